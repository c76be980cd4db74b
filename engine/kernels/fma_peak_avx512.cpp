// The FMA peak loop in AVX-512 (see fma_peak.h).
#include <immintrin.h>

#include "engine/kernels/fma_peak.h"

namespace waste {

namespace detail {

// 16 chains: two 512-bit fma ports with a latency of 4 need 8; 32 registers hold them easily.
double fma_loop_avx512(int64_t rounds) {
  constexpr int kChains = 16;
  const __m512 b = _mm512_set1_ps(1e-6f), m = _mm512_set1_ps(0.5f);
  __m512 acc[kChains];
#pragma GCC unroll 32
  for (int c = 0; c < kChains; c++) acc[c] = _mm512_set1_ps((float)c);
  for (int64_t r = 0; r < rounds; r++)
#pragma GCC unroll 32  // every chain in its own register
    for (int c = 0; c < kChains; c++) acc[c] = _mm512_fmadd_ps(b, m, acc[c]);
  __m512 sum = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < kChains; c++) sum = _mm512_add_ps(sum, acc[c]);
  __asm__ volatile("" : : "v"(sum));
  return 2.0 * 16 * kChains * (double)rounds;
}

}  // namespace detail

}  // namespace waste
