// The FMA peak loop in AVX2, and x86-64's choice of loop (its caller asks only for an Isa this CPU
// supports, and every x86-64 Isa but scalar includes AVX2 and FMA, so the choice may be compiled
// for them).
#include <immintrin.h>

#include "engine/kernels/fma_peak.h"
#include "engine/kernels/fma_peak_body.h"

namespace waste {

namespace detail {
double fma_loop_avx512(int64_t rounds);  // fma_peak_avx512.cpp
}  // namespace detail

namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg fma(Reg b, Reg m, Reg acc) { return _mm256_fmadd_ps(b, m, acc); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static void keep(Reg x) { __asm__ volatile("" : : "x"(x)); }
};

}  // namespace

// Two fma ports with a latency of 4 need 8 chains in flight; 12 leave room and fit the 16
// registers beside the two constants.
double fma_loop(Isa isa, int64_t rounds) {
  return isa == Isa::kAvx512 ? detail::fma_loop_avx512(rounds) : fma_chains<Avx2, 12>(rounds);
}

}  // namespace waste
