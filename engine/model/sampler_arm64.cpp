// arm64 has no sampler table beyond the baseline: sampler.cpp's 4 lanes are already NEON's full
// width, and every arm64 CPU has NEON.
#include "engine/model/sampler_lanes.h"

namespace waste {

const SamplerKernels* vector_sampler_kernels() {
  return nullptr;
}

}  // namespace waste
