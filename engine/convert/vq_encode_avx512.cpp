// The AVX-512 nearest-entry search. The book is dimension-major, so one register holds 16 entries
// and each lane runs the scalar kernel's fma chain for its entry: acc = |c|^2, then
// acc = fma(-2x_d, c_d, acc) for d = 0..7. Two vectors share each pass so every book load feeds
// two fmas (16 broadcast -2x_d registers of the 32). Each vector keeps a per-lane minimum with
// strict `<` in ascending order, i.e. the first minimum of the lane's entries; the final merge
// takes the smallest distance and, among equal ones, the lowest index: the scalar answer.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* idiom
// (GCC PR 105593, as in kernels_avx512.cpp); silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "engine/convert/vq_encode_x86.h"

namespace waste::detail {

namespace {

// Every lane gets the minimum of all 16 (in-register shuffles; GCC 12's reduce intrinsics warn).
__m512 all_min(__m512 v) {
  v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_min_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm512_min_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
}

__m512i all_min(__m512i v) {
  v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
  return _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
}

// The lowest index among the lanes holding the smallest distance (no lane holds NaN).
int merge_lanes(__m512 best, __m512i id) {
  __mmask16 eq = _mm512_cmp_ps_mask(best, all_min(best), _CMP_EQ_OQ);
  __m512i k = _mm512_mask_mov_epi32(_mm512_set1_epi32(1 << 30), eq, id);
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(all_min(k)));
}

// Strict `<` keeps the earlier entry on ties; the masked moves skip NaN distances as `<` does.
inline void track(__m512 acc, __m512i cur, __m512* best, __m512i* id) {
  __mmask16 lt = _mm512_cmp_ps_mask(acc, *best, _CMP_LT_OQ);
  *best = _mm512_mask_mov_ps(*best, lt, acc);
  *id = _mm512_mask_mov_epi32(*id, lt, cur);
}

// Vectors x0 and x1 (lanes of one dimension-major group) against the whole book.
void nearest_two(const SearchView& b, const float* x0, const float* x1, uint8_t* i0, uint8_t* i1) {
  const float* t = b.t;
  const float* norms = b.norms;
  const int P = b.padded;
  __m512 m0[8], m1[8];
  for (int d = 0; d < 8; d++) {
    m0[d] = _mm512_set1_ps(-2.0f * x0[d * 8]);
    m1[d] = _mm512_set1_ps(-2.0f * x1[d * 8]);
  }
  __m512 best0 = _mm512_set1_ps(__builtin_inff()), best1 = best0;
  __m512i id0 = _mm512_setzero_si512(), id1 = id0;
  __m512i cur = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i sixteen = _mm512_set1_epi32(16);
  for (int c = 0; c < P; c += 16) {  // padded is a multiple of 16
    __m512 a0 = _mm512_loadu_ps(norms + c), a1 = a0;
    for (int d = 0; d < 8; d++) {
      __m512 cd = _mm512_loadu_ps(t + d * P + c);
      a0 = _mm512_fmadd_ps(m0[d], cd, a0);
      a1 = _mm512_fmadd_ps(m1[d], cd, a1);
    }
    track(a0, cur, &best0, &id0);
    track(a1, cur, &best1, &id1);
    cur = _mm512_add_epi32(cur, sixteen);
  }
  *i0 = (uint8_t)merge_lanes(best0, id0);
  *i1 = (uint8_t)merge_lanes(best1, id1);
}

}  // namespace

void nearest_avx512(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  for (int64_t g = 0; g < n_groups; g++)
    for (int lane = 0; lane < 8; lane += 2)
      nearest_two(b, xs + g * 64 + lane, xs + g * 64 + lane + 1, idx + g * 8 + lane,
                  idx + g * 8 + lane + 1);
}

}  // namespace waste::detail
