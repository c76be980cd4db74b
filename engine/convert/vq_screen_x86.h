// The parts of the x86 integer screens (vq_screen.h) that need no more than AVX2 and FMA, shared
// by the AVX-512 VNNI and the AVX-VNNI traits: the per-chunk and per-group work around the
// scoring, a small share of the time at either width. Included only by instruction-set files
// after <immintrin.h>; internal linkage, as vq_screen.h explains.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "engine/convert/vq_encode.h"

namespace waste::detail {

namespace {

struct ScreenX86 {
  // max |x| over n floats (a multiple of 8), NaN when any of them is NaN.
  static float abs_max(const float* x, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) {
      __m256 v = _mm256_loadu_ps(x + i);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
    }
    if (_mm256_movemask_ps(nan)) return __builtin_nanf("");
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(1, 0, 3, 2)));
    h = _mm_max_ps(h, _mm_shuffle_ps(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtss_f32(h);
  }

  // init[c] = rint(N_c * inv_unit) + bias_c for the padded book (screen_chunk then overwrites
  // the padding).
  static void fill_init(const SearchView& b, double inv_unit, int32_t* init) {
    const __m256d s = _mm256_set1_pd(inv_unit);
    for (int c = 0; c < b.padded; c += 4) {
      __m256d n = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(b.norms + c)), s);
      __m128i r =
          _mm256_cvtpd_epi32(_mm256_round_pd(n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      r = _mm_add_epi32(r, _mm_loadu_si128((const __m128i*)(b.q.bias + c)));
      _mm_storeu_si128((__m128i*)(init + c), r);
    }
  }

  // One group's 8 vectors ([d][lane]): the offset bytes, transposed to per-lane words by the
  // classic unpack ladder, and ceil(slack_a + slack_b * ||x||_1) + 1 with ||x||_1 summed in
  // float, as screen_step assumes.
  static void quantize_group(const float* x, const ScreenStep& st, uint32_t* lo, uint32_t* hi,
                             int32_t* slack) {
    const __m256 inv = _mm256_set1_ps(st.inv_step);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 l1 = _mm256_setzero_ps();
    __m128i r[8];
    for (int d = 0; d < 8; d++) {
      __m256 v = _mm256_loadu_ps(x + d * 8);
      l1 = _mm256_add_ps(l1, _mm256_andnot_ps(sign, v));
      // Rounded explicitly: the bound holds whatever MXCSR's rounding mode is.
      __m256 p =
          _mm256_round_ps(_mm256_mul_ps(v, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      r[d] = to_bytes(_mm256_cvtps_epi32(p));
    }
    const __m128i flip = _mm_set1_epi8((char)0x80);
    __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpacklo_epi8(r[2], r[3]);
    __m128i c = _mm_unpacklo_epi8(r[4], r[5]), d = _mm_unpacklo_epi8(r[6], r[7]);
    _mm_storeu_si128((__m128i*)lo, _mm_xor_si128(_mm_unpacklo_epi16(a, b), flip));
    _mm_storeu_si128((__m128i*)(lo + 4), _mm_xor_si128(_mm_unpackhi_epi16(a, b), flip));
    _mm_storeu_si128((__m128i*)hi, _mm_xor_si128(_mm_unpacklo_epi16(c, d), flip));
    _mm_storeu_si128((__m128i*)(hi + 4), _mm_xor_si128(_mm_unpackhi_epi16(c, d), flip));
    _mm_storeu_si128((__m128i*)slack, slack4(_mm256_castps256_ps128(l1), st));
    _mm_storeu_si128((__m128i*)(slack + 4), slack4(_mm256_extractf128_ps(l1, 1), st));
  }

 private:
  // Eight int32 lanes (all within [-127, 127], so no saturation) as the low 8 bytes.
  static __m128i to_bytes(__m256i q) {
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    return _mm_packs_epi16(w, w);
  }

  // ceil(slack_a + slack_b * l1) + 1 for 4 lanes (the fma in double, rounded up exactly).
  static __m128i slack4(__m128 l1, const ScreenStep& st) {
    __m256d s = _mm256_fmadd_pd(_mm256_cvtps_pd(l1), _mm256_set1_pd(st.slack_b),
                                _mm256_set1_pd(st.slack_a));
    __m128i up = _mm256_cvtpd_epi32(_mm256_round_pd(s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    return _mm_add_epi32(up, _mm_set1_epi32(1));
  }
};

}  // namespace

}  // namespace waste::detail
