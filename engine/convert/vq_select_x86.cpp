// The converter's kernels on x86-64: the instruction-set variants (vq_encode_x86.h) where the
// Isa the run asked for allows them and CPUID says this CPU has what they were compiled for.
// Compiled only for x86-64 (vq_select_arm64.cpp is the arm64 counterpart); itself built for the
// baseline, so the checks run on any x86-64 CPU.
#include <vector>

#include "engine/convert/vq_encode_x86.h"
#include "engine/kernels/kernels.h"

namespace waste {

namespace {

// nearest_vnni needs AVX-512 F/BW/VL/DQ + VNNI + VBMI2: Ice Lake, Zen 4 and later (Cascade Lake
// has VNNI without VBMI2 and keeps nearest_avx512).
bool has_avx512vnni(const CpuFeatures& f) {
  return cpu_supports(Isa::kAvx512, f) && f.avx512vnni && f.avx512vbmi2;
}

bool has_avxvnni(const CpuFeatures& f) {
  return cpu_supports(Isa::kAvx2, f) && f.avxvnni;
}

}  // namespace

NearestFn nearest_kernel(Isa isa) {
  const CpuFeatures f = cpu_features();
  const bool avx512 = isa == Isa::kAvx512, avx2 = avx512 || isa == Isa::kAvx2;
  if (avx512 && has_avx512vnni(f)) return detail::nearest_vnni;
  if (avx512 && cpu_supports(Isa::kAvx512, f)) return detail::nearest_avx512;
  if (avx2 && has_avxvnni(f)) return detail::nearest_avxvnni;
  if (avx2 && cpu_supports(Isa::kAvx2, f)) return detail::nearest_avx2;
  return detail::nearest_scalar;
}

std::vector<NearestKernel> nearest_kernels() {
  const CpuFeatures f = cpu_features();
  std::vector<NearestKernel> ks{{"scalar", detail::nearest_scalar}};
  if (cpu_supports(Isa::kAvx2, f)) ks.push_back({"avx2", detail::nearest_avx2});
  if (cpu_supports(Isa::kAvx512, f)) ks.push_back({"avx512", detail::nearest_avx512});
  if (has_avx512vnni(f)) ks.push_back({"vnni", detail::nearest_vnni});
  if (has_avxvnni(f)) ks.push_back({"avxvnni", detail::nearest_avxvnni});
  return ks;
}

TileOps tile_ops(Isa isa) {
  const bool avx2 = isa == Isa::kAvx512 || isa == Isa::kAvx2;
  return avx2 && cpu_supports(Isa::kAvx2) ? detail::tile_ops_avx2() : detail::tile_ops_portable();
}

std::vector<NamedTileOps> tile_ops_variants() {
  std::vector<NamedTileOps> ts{{"portable", detail::tile_ops_portable()}};
  if (cpu_supports(Isa::kAvx2)) ts.push_back({"avx2", detail::tile_ops_avx2()});
  return ts;
}

}  // namespace waste
