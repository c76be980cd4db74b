// The sampler's passes in AVX2's 8 lanes (sampler_lanes.h). The build compiles this file for AVX2
// and, like sampler.cpp, without fused multiply-adds, so its draws are the baseline's bit for bit.
#include "engine/model/sampler_lanes.h"

namespace waste {

const SamplerKernels* vector_sampler_kernels() {
  static constexpr SamplerKernels kAvx2 = sampler_table<8>();
  return &kAvx2;
}

}  // namespace waste
