// The FMA peak loop in AVX-512 (see fma_peak.h).
#include <immintrin.h>

#include "engine/kernels/fma_peak.h"
#include "engine/kernels/fma_peak_body.h"

namespace waste {

namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg fma(Reg b, Reg m, Reg acc) { return _mm512_fmadd_ps(b, m, acc); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static void keep(Reg x) { __asm__ volatile("" : : "v"(x)); }
};

}  // namespace

namespace detail {

// 16 chains: two 512-bit fma ports with a latency of 4 need 8; 32 registers hold them easily.
double fma_loop_avx512(int64_t rounds) {
  return fma_chains<Avx512, 16>(rounds);
}

}  // namespace detail

}  // namespace waste
