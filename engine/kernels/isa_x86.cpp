// The x86_64 family (built for x86_64 targets only): the features CPUID and XGETBV report, and
// the AVX2 and AVX-512 tables.
#include <cpuid.h>

#include "engine/kernels/kernels.h"

namespace waste {

namespace {

// XGETBV without -mxsave: the register saved by the OS for AVX (bits 1,2) and AVX-512 (5,6,7).
uint64_t read_xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t)hi << 32) | lo;
}

}  // namespace

CpuFeatures cpu_features() {
  CpuFeatures f;
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
}

namespace detail {

const Kernels* family_kernels(Isa isa) {
  switch (isa) {
    case Isa::kAvx2:
      return &avx2_kernels();
    case Isa::kAvx512:
      return &avx512_kernels();
    default:
      return nullptr;
  }
}

}  // namespace detail

}  // namespace waste
