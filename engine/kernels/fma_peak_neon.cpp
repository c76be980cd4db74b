// The FMA peak loop in NEON, for every arm64 Isa: the others add integer dot products, not fp32
// width.
#include <arm_neon.h>

#include "engine/kernels/fma_peak.h"

namespace waste {

// Up to four 128-bit fma pipes (Apple's large cores) with a latency of 4 need 16 chains; 24 leave
// room and fit the 32 registers beside the two constants.
double fma_loop(Isa, int64_t rounds) {
  constexpr int kChains = 24;
  const float32x4_t b = vdupq_n_f32(1e-6f), m = vdupq_n_f32(0.5f);
  float32x4_t acc[kChains];
#pragma GCC unroll 32
  for (int c = 0; c < kChains; c++) acc[c] = vdupq_n_f32((float)c);
  for (int64_t r = 0; r < rounds; r++)
#pragma GCC unroll 32  // every chain in its own register
    for (int c = 0; c < kChains; c++) acc[c] = vfmaq_f32(acc[c], b, m);
  float32x4_t sum = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < kChains; c++) sum = vaddq_f32(sum, acc[c]);
  __asm__ volatile("" : : "w"(sum));
  return 2.0 * 4 * kChains * (double)rounds;
}

}  // namespace waste
