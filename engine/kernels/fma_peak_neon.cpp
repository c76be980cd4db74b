// The FMA peak loop in NEON, for every arm64 Isa: the others add integer dot products, not fp32
// width.
#include <arm_neon.h>

#include "engine/kernels/fma_peak.h"
#include "engine/kernels/fma_peak_body.h"

namespace waste {

namespace {

struct Neon {
  using Reg = float32x4_t;
  static constexpr int kLanes = 4;
  static Reg set1(float x) { return vdupq_n_f32(x); }
  static Reg fma(Reg b, Reg m, Reg acc) { return vfmaq_f32(acc, b, m); }
  static Reg add(Reg a, Reg b) { return vaddq_f32(a, b); }
  static void keep(Reg x) { __asm__ volatile("" : : "w"(x)); }
};

}  // namespace

// Up to four 128-bit fma pipes (Apple's large cores) with a latency of 4 need 16 chains; 24 leave
// room and fit the 32 registers beside the two constants.
double fma_loop(Isa, int64_t rounds) {
  return fma_chains<Neon, 24>(rounds);
}

}  // namespace waste
