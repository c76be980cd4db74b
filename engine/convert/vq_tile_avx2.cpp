// The tile work of vq_tile.h with 8-wide registers: a group of a tile is an 8 x 8 block, so
// loads, entry lookups and error sums are a register transpose away from whole-row operations.
// Built with -ffp-contract=off (the top-level CMakeLists.txt): a multiply and an add fused into one
// fma would round once instead of twice and no longer match the portable sums.
#include <immintrin.h>

#include "engine/convert/vq_encode_x86.h"

namespace waste::detail {

namespace {

constexpr int kGroups = kVqRowBlock / 8;

// Rows of an 8 x 8 block to its columns.
inline __attribute__((always_inline)) void transpose8(__m256* r) {
  __m256 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xee);
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xee);
  }
  for (int k = 0; k < 4; k++) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

void load(const float* w, int64_t cols, int64_t n, const float* amax, float* res) {
  for (int g = 0; g < kGroups; g++) {
    __m256 r[8];
    for (int l = 0; l < 8; l++) {
      int64_t i = g * 8 + l;
      r[l] = i < n ? _mm256_div_ps(_mm256_loadu_ps(w + i * cols), _mm256_set1_ps(amax[i]))
                   : _mm256_setzero_ps();
    }
    transpose8(r);
    for (int d = 0; d < 8; d++) _mm256_storeu_ps(res + g * 64 + d * 8, r[d]);
  }
}

void apply(const SearchView& sv, const uint8_t* ids, float* res, float* sum) {
  for (int g = 0; g < kGroups; g++) {
    __m256 c[8];
    for (int l = 0; l < 8; l++) c[l] = _mm256_loadu_ps(sv.rows + ids[g * 8 + l] * 8);
    transpose8(c);
    for (int d = 0; d < 8; d++) {
      float* r = res + g * 64 + d * 8;
      float* a = sum + g * 64 + d * 8;
      _mm256_storeu_ps(r, _mm256_sub_ps(_mm256_loadu_ps(r), c[d]));
      _mm256_storeu_ps(a, _mm256_add_ps(_mm256_loadu_ps(a), c[d]));
    }
  }
}

void add_error(const float* w, int64_t cols, int64_t n, const float* s16, const float* sum,
               TileError* te) {
  __m256d e0 = _mm256_loadu_pd(te->err2), e1 = _mm256_loadu_pd(te->err2 + 4);
  __m256d q0 = _mm256_loadu_pd(te->ref2), q1 = _mm256_loadu_pd(te->ref2 + 4);
  for (int g = 0; g * 8 < n; g++) {
    __m256 a[8];
    for (int d = 0; d < 8; d++) a[d] = _mm256_loadu_ps(sum + g * 64 + d * 8);
    transpose8(a);  // a[l]: row g * 8 + l, dims 0-7
    for (int l = 0; l < 8 && g * 8 + l < n; l++) {
      const int64_t i = g * 8 + l;
      const __m256d s = _mm256_set1_pd((double)s16[i]);
      const __m256d w0 = _mm256_cvtps_pd(_mm_loadu_ps(w + i * cols));
      const __m256d w1 = _mm256_cvtps_pd(_mm_loadu_ps(w + i * cols + 4));
      const __m256d d0 =
          _mm256_sub_pd(w0, _mm256_mul_pd(s, _mm256_cvtps_pd(_mm256_castps256_ps128(a[l]))));
      const __m256d d1 =
          _mm256_sub_pd(w1, _mm256_mul_pd(s, _mm256_cvtps_pd(_mm256_extractf128_ps(a[l], 1))));
      e0 = _mm256_add_pd(e0, _mm256_mul_pd(d0, d0));
      e1 = _mm256_add_pd(e1, _mm256_mul_pd(d1, d1));
      q0 = _mm256_add_pd(q0, _mm256_mul_pd(w0, w0));
      q1 = _mm256_add_pd(q1, _mm256_mul_pd(w1, w1));
    }
  }
  _mm256_storeu_pd(te->err2, e0);
  _mm256_storeu_pd(te->err2 + 4, e1);
  _mm256_storeu_pd(te->ref2, q0);
  _mm256_storeu_pd(te->ref2 + 4, q1);
}

}  // namespace

TileOps tile_ops_avx2() {
  return {load, apply, add_error};
}

}  // namespace waste::detail
