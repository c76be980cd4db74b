// Run-time choice of the kernel table. The SIMD tables live in files compiled for their
// instruction set; nothing here may use those instructions, so this file stays portable.
#include "engine/kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstdlib>
#include <string>
#include <string_view>

#include "engine/base/error.h"

namespace waste {

namespace {

// XGETBV without -mxsave: the register saved by the OS for AVX (bits 1,2) and AVX-512 (5,6,7).
#if defined(__x86_64__)
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}
#endif

void append(std::string* out, bool ok, std::string_view what) {
  if (ok) return;
  if (!out->empty()) *out += ", ";
  *out += what;
}

// The features `isa` needs that `cpu` lacks, comma separated; empty when it can run `isa`.
std::string missing_features(Isa isa, const CpuFeatures& cpu) {
  std::string m;
  if (isa == Isa::kScalar) return m;
#if defined(__aarch64__)
  if (isa == Isa::kNeon) return m;  // TEMP: lead's placeholder until arm64ci lands detection
#else
  if (isa == Isa::kNeon) return "neon";
#endif
  append(&m, cpu.avx2, "avx2");
  append(&m, cpu.fma, "fma");
  append(&m, cpu.f16c, "f16c");
  append(&m, cpu.os_avx, "OS support for AVX state");
  if (isa == Isa::kAvx2) return m;
  append(&m, cpu.avx512f, "avx512f");
  append(&m, cpu.avx512bw, "avx512bw");
  append(&m, cpu.avx512vl, "avx512vl");
  append(&m, cpu.avx512dq, "avx512dq");
  append(&m, cpu.os_avx512, "OS support for AVX-512 state");
  return m;
}

Isa parse_isa(std::string_view name) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  fail<UsageError>("WASTE_ISA={} is not one of scalar, avx2, avx512", name);
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kNeon:
      return "neon";
  }
  return "unknown";
}

const char* format_name(TensorFormat f) {
  switch (f) {
    case TensorFormat::kF32:
      return "F32";
    case TensorFormat::kQ8G:
      return "Q8G";
    case TensorFormat::kQ4G:
      return "Q4G";
  }
  return "unknown";
}

CpuFeatures cpu_features() {
  CpuFeatures f;
#if !defined(__x86_64__)
  return f;
#else
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.fma = c & bit_FMA;
  f.f16c = c & bit_F16C;
  bool osxsave = (c & bit_OSXSAVE) && (c & bit_AVX);
  uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  f.os_avx = (xcr0 & 0x6) == 0x6;
  f.os_avx512 = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & bit_AVX2;
  f.avx512f = b & bit_AVX512F;
  f.avx512dq = b & bit_AVX512DQ;
  f.avx512bw = b & bit_AVX512BW;
  f.avx512vl = b & bit_AVX512VL;
  f.avx512vnni = c & bit_AVX512VNNI;
  f.avx512vbmi2 = c & bit_AVX512VBMI2;
  if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = a & bit_AVXVNNI;
  return f;
#endif
}

bool cpu_supports(Isa isa, const CpuFeatures& cpu) {
  return missing_features(isa, cpu).empty();
}

bool cpu_supports(Isa isa) {
  return cpu_supports(isa, cpu_features());
}

Isa choose_isa(const char* requested, const CpuFeatures& cpu) {
  if (requested && *requested) {
    Isa isa = parse_isa(requested);
    std::string missing = missing_features(isa, cpu);
    if (!missing.empty()) fail<UsageError>("WASTE_ISA={}: this CPU lacks {}", requested, missing);
    return isa;
  }
  if (cpu_supports(Isa::kAvx512, cpu)) return Isa::kAvx512;
  if (cpu_supports(Isa::kAvx2, cpu)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa detect_isa() {
  return choose_isa(std::getenv("WASTE_ISA"), cpu_features());
}

const Kernels& kernels_for(Isa isa) {
  std::string missing = missing_features(isa, cpu_features());
  if (!missing.empty()) fail<UsageError>("{} kernels: this CPU lacks {}", isa_name(isa), missing);
  switch (isa) {
#if defined(__x86_64__)
    case Isa::kAvx512:
      return detail::avx512_kernels();
    case Isa::kAvx2:
      return detail::avx2_kernels();
#else
    case Isa::kNeon:
      return detail::neon_kernels();
#endif
    default:
      return detail::scalar_kernels();
  }
}

}  // namespace waste
