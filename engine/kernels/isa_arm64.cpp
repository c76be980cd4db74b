// The arm64 family (built for arm64 targets only): the features the OS reports (the platform
// layer reads them: HWCAP on Linux, sysctl on macOS; user code may not read the ID registers on
// every OS), and the NEON table.
#include "engine/base/platform.h"
#include "engine/kernels/kernels.h"

namespace waste {

CpuFeatures cpu_features() {
  const Arm64Features os = arm64_cpu_features();
  CpuFeatures f;
  f.neon = os.neon;
  f.fp16 = os.fp16;
  f.dotprod = os.dotprod;
  f.i8mm = os.i8mm;
  return f;
}

namespace detail {

const Kernels* family_kernels(Isa isa) {
  return isa == Isa::kNeon ? &neon_kernels() : nullptr;
}

}  // namespace detail

}  // namespace waste
