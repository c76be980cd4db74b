// PLACEHOLDER, replaced by the lead's NEON kernels: the scalar kernels under the kNeon name, so
// that arm64 builds link and choose_isa's arm64 path runs end to end before the NEON bodies land.
#include "engine/kernels/kernels.h"

namespace waste::detail {

const Kernels& neon_kernels() {
  static const Kernels k = [] {
    Kernels t = scalar_kernels();
    t.isa = Isa::kNeon;
    return t;
  }();
  return k;
}

}  // namespace waste::detail
