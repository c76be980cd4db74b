// Run-time choice of the kernel table. The SIMD tables live in files compiled for their
// instruction set, and reading the CPU's features in one file per CPU family (isa_x86.cpp,
// isa_arm64.cpp); nothing here may use those instructions or name another family's tables, so
// this file builds unchanged for every target.
#include "engine/kernels/kernels.h"

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "engine/base/error.h"

namespace waste {

namespace {

void append(std::string* out, bool ok, std::string_view what) {
  if (ok) return;
  if (!out->empty()) *out += ", ";
  *out += what;
}

// The features `isa` needs that `cpu` lacks, comma separated; empty when it can run `isa`.
std::string missing_features(Isa isa, const CpuFeatures& cpu) {
  std::string m;
  if (isa == Isa::kScalar) return m;
  if (isa == Isa::kNeon) {
    append(&m, cpu.neon, "neon");
    return m;
  }
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
  if (name == "neon") return Isa::kNeon;
  fail<UsageError>("WASTE_ISA={} is not one of scalar, avx2, avx512, neon", name);
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

std::string cpu_feature_names(const CpuFeatures& cpu) {
  const std::pair<bool, std::string_view> all[] = {
      {cpu.avx2, "avx2"},
      {cpu.fma, "fma"},
      {cpu.f16c, "f16c"},
      {cpu.os_avx, "os_avx"},
      {cpu.avx512f, "avx512f"},
      {cpu.avx512bw, "avx512bw"},
      {cpu.avx512vl, "avx512vl"},
      {cpu.avx512dq, "avx512dq"},
      {cpu.os_avx512, "os_avx512"},
      {cpu.avx512vnni, "avx512vnni"},
      {cpu.avx512vbmi2, "avx512vbmi2"},
      {cpu.avxvnni, "avxvnni"},
      {cpu.neon, "neon"},
      {cpu.fp16, "fp16"},
      {cpu.dotprod, "dotprod"},
      {cpu.i8mm, "i8mm"},
  };
  std::string names;
  for (const auto& [has, name] : all) {
    if (!has) continue;
    if (!names.empty()) names += ' ';
    names += name;
  }
  return names;
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
  if (cpu_supports(Isa::kNeon, cpu)) return Isa::kNeon;
  return Isa::kScalar;
}

Isa detect_isa() {
  return choose_isa(std::getenv("WASTE_ISA"), cpu_features());
}

const Kernels& kernels_for(Isa isa) {
  std::string missing = missing_features(isa, cpu_features());
  if (!missing.empty()) fail<UsageError>("{} kernels: this CPU lacks {}", isa_name(isa), missing);
  // A table the CPU can run belongs to the build's family (the check above refuses the others).
  if (const Kernels* k = detail::family_kernels(isa)) return *k;
  return detail::scalar_kernels();
}

}  // namespace waste
