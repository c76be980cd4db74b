// The integer-screened nearest-entry search with 256-bit AVX-VNNI (VEX vpdpbusd), for CPUs
// without AVX-512: vq_screen.h's method, 8 entries per register, two vectors per pass (16
// registers). A batch the bound cannot cover takes the exact AVX2 search.
#include <immintrin.h>

#include "engine/convert/vq_encode_x86.h"
#include "engine/convert/vq_screen.h"
#include "engine/convert/vq_screen_x86.h"

namespace waste::detail {

namespace {

struct AvxVnni : ScreenX86 {
  using I = __m256i;
  static constexpr int kLanes = 8;
  static constexpr int kPerPass = 2;

  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I load(const int32_t* p) { return _mm256_load_si256((const __m256i*)p); }
  static I load_book(const int8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
  static I dot(I acc, I u, I q) { return _mm256_dpbusd_avx_epi32(acc, u, q); }
  static I min(I a, I b) { return _mm256_min_epi32(a, b); }
  static void store(int32_t* p, I v) { _mm256_store_si256((__m256i*)p, v); }
  static int32_t hmin(I v) {
    __m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(m);
  }

  static void exact(const SearchView& b, const float* xs, int64_t groups, uint8_t* idx) {
    nearest_avx2(b, xs, groups, idx);
  }

  // Each vector of the pass on its own: its candidates one by one, branching on the mask.
  // (Measured: evaluating them eight lanes at a time was about 12% slower at ~2.2 candidates.)
  static void decide(const SearchView& b, const int32_t (*s)[256], const int32_t* thr,
                     const float* xs, int v, uint8_t* idx) {
    for (int i = 0; i < kPerPass; i++) {
      int k = v + i;
      idx[k] = (uint8_t)pick(b, s[i], thr[i], xs + k / 8 * 64 + k % 8);
    }
  }

 private:
  // The scalar kernel's distance of entry c: same operands, same fma order.
  static float exact_distance(const SearchView& b, int c, const float* m2) {
    const float* row = b.rows + c * 8;
    float acc = b.norms[c];
    for (int d = 0; d < 8; d++) acc = __builtin_fmaf(m2[d], row[d], acc);
    return acc;
  }

  // The first float minimum among the entries scoring at most `thr`, in ascending order; x is
  // the vector's first coordinate in its group.
  static int pick(const SearchView& b, const int32_t* s, int32_t thr, const float* x) {
    float m2[8];
    for (int d = 0; d < 8; d++) m2[d] = -2.0f * x[d * 8];
    const __m256i t = _mm256_set1_epi32(thr);
    float best = __builtin_inff();
    int bi = 0;
    for (int c = 0; c < b.padded; c += 8) {
      __m256i over = _mm256_cmpgt_epi32(_mm256_load_si256((const __m256i*)(s + c)), t);
      unsigned mask = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(over)) & 0xffu;
      while (mask) {
        int e = c + __builtin_ctz(mask);
        mask &= mask - 1;
        float f = exact_distance(b, e, m2);
        if (f < best) {
          best = f;
          bi = e;
        }
      }
    }
    return bi;
  }
};

}  // namespace

void nearest_avxvnni(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  nearest_screened<AvxVnni>(b, xs, n_groups, idx);
}

}  // namespace waste::detail
