// The FMA peak loop in AVX2, and x86-64's choice of loop (its caller asks only for an Isa this CPU
// supports, and every x86-64 Isa but scalar includes AVX2 and FMA, so the choice may be compiled
// for them).
#include <immintrin.h>

#include "engine/kernels/fma_peak.h"

namespace waste {

namespace detail {
double fma_loop_avx512(int64_t rounds);  // fma_peak_avx512.cpp
}  // namespace detail

namespace {

// Two fma ports with a latency of 4 need 8 chains in flight; 12 leave room and fit the 16
// registers beside the two constants.
constexpr int kChains = 12;

double fma_loop_avx2(int64_t rounds) {
  const __m256 b = _mm256_set1_ps(1e-6f), m = _mm256_set1_ps(0.5f);
  __m256 acc[kChains];
#pragma GCC unroll 32
  for (int c = 0; c < kChains; c++) acc[c] = _mm256_set1_ps((float)c);
  for (int64_t r = 0; r < rounds; r++)
#pragma GCC unroll 32  // every chain in its own register
    for (int c = 0; c < kChains; c++) acc[c] = _mm256_fmadd_ps(b, m, acc[c]);
  __m256 sum = acc[0];
#pragma GCC unroll 32
  for (int c = 1; c < kChains; c++) sum = _mm256_add_ps(sum, acc[c]);
  // Keeps the chains' results live without a store in the loop.
  __asm__ volatile("" : : "x"(sum));
  return 2.0 * 8 * kChains * (double)rounds;
}

}  // namespace

double fma_loop(Isa isa, int64_t rounds) {
  return isa == Isa::kAvx512 ? detail::fma_loop_avx512(rounds) : fma_loop_avx2(rounds);
}

}  // namespace waste
