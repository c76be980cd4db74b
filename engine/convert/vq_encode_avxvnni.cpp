// The integer-screened nearest-entry search with 256-bit AVX-VNNI (VEX vpdpbusd), for CPUs
// without AVX-512: the same method, bounds and data as nearest_vnni
// (vq_encode_avx512vnni.cpp; detail::screen_step has the proof), 8 entries per register. A
// batch the bound cannot cover takes the exact AVX2 search.
#include <immintrin.h>

#include "engine/convert/vq_encode.h"

namespace waste::detail {

namespace {

constexpr int kChunkGroups = 8;  // groups per x step (encode_matrix's call size)
constexpr int kChunkVectors = kChunkGroups * 8;
constexpr int kPerPass = 2;             // vectors scored together (16 registers)
constexpr int32_t kPadScore = 1 << 30;  // above every threshold (screen_step's ranges)

struct Batch {
  alignas(32) int32_t init[256];                  // rint(|c|^2 / U) + bias_c
  uint32_t lo[kChunkVectors], hi[kChunkVectors];  // bytes qx_d + 128 of dims 0-3 and 4-7
  int32_t slack[kChunkVectors];
};

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtss_f32(m);
}

int32_t hmin(__m256i v) {
  __m128i m = _mm_min_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_min_epi32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(m);
}

// max |x| over n floats (a multiple of 8), NaN when any of them is NaN.
float abs_max(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v));
  }
  return _mm256_movemask_ps(nan) ? __builtin_nanf("") : hmax(m);
}

// init[c] = rint(N_c * inv_unit) + bias_c; padded entries get kPadScore.
void fill_init(const SearchView& b, double inv_unit, int32_t* init) {
  const __m256d s = _mm256_set1_pd(inv_unit);
  for (int c = 0; c < b.padded; c += 4) {
    __m256d n = _mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(b.norms + c)), s);
    __m128i r =
        _mm256_cvtpd_epi32(_mm256_round_pd(n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    r = _mm_add_epi32(r, _mm_loadu_si128((const __m128i*)(b.q.bias + c)));
    _mm_storeu_si128((__m128i*)(init + c), r);
  }
  for (int c = b.entries; c < b.padded; c++) init[c] = kPadScore;
}

// Eight int32 lanes (all within [-127, 127]) as the low 8 bytes.
__m128i to_bytes(__m256i q) {
  __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  return _mm_packs_epi16(w, w);
}

// ceil(slack_a + slack_b * l1) + 1 for 4 lanes.
__m128i slack4(__m128 l1, const ScreenStep& st) {
  __m256d s =
      _mm256_fmadd_pd(_mm256_cvtps_pd(l1), _mm256_set1_pd(st.slack_b), _mm256_set1_pd(st.slack_a));
  __m128i up = _mm256_cvtpd_epi32(_mm256_round_pd(s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
  return _mm_add_epi32(up, _mm_set1_epi32(1));
}

// One group's 8 vectors: offset bytes transposed to per-lane words, and the slacks.
void quantize_group(const float* x, const ScreenStep& st, uint32_t* lo, uint32_t* hi,
                    int32_t* slack) {
  const __m256 inv = _mm256_set1_ps(st.inv_step);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 l1 = _mm256_setzero_ps();
  __m128i r[8];
  for (int d = 0; d < 8; d++) {
    __m256 v = _mm256_loadu_ps(x + d * 8);
    l1 = _mm256_add_ps(l1, _mm256_andnot_ps(sign, v));
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

// Integer scores of kPerPass vectors against every entry, and each vector's smallest score.
// A 16-entry block of the book is [dims 0-3 of entries 0-15][dims 4-7 of entries 0-15].
void score(const SearchView& b, const Batch& bt, int v0, int32_t (*s)[256], int32_t* smin) {
  __m256i lo[kPerPass], hi[kPerPass], mn[kPerPass];
  for (int i = 0; i < kPerPass; i++) {
    lo[i] = _mm256_set1_epi32((int)bt.lo[v0 + i]);
    hi[i] = _mm256_set1_epi32((int)bt.hi[v0 + i]);
    mn[i] = _mm256_set1_epi32(kPadScore);
  }
  const int8_t* q = b.q.neg;
  for (int c = 0; c < b.padded; c += 8) {
    const int8_t* blk = q + c / 16 * 128 + c % 16 * 4;
    __m256i init = _mm256_load_si256((const __m256i*)(bt.init + c));
    __m256i q03 = _mm256_loadu_si256((const __m256i*)blk);
    __m256i q47 = _mm256_loadu_si256((const __m256i*)(blk + 64));
    for (int i = 0; i < kPerPass; i++) {
      __m256i a = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(init, lo[i], q03), hi[i], q47);
      mn[i] = _mm256_min_epi32(mn[i], a);
      _mm256_store_si256((__m256i*)(s[i] + c), a);
    }
  }
  for (int i = 0; i < kPerPass; i++) smin[i] = hmin(mn[i]);
}

// The scalar kernel's distance of entry c: same operands, same fma order.
inline float exact(const SearchView& b, int c, const float* m2) {
  const float* row = b.rows + c * 8;
  float acc = b.norms[c];
  for (int d = 0; d < 8; d++) acc = __builtin_fmaf(m2[d], row[d], acc);
  return acc;
}

// The first float minimum among the entries scoring at most `thr`, in ascending order.
int pick(const SearchView& b, const int32_t* s, int32_t thr, const float* x) {
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
      float f = exact(b, e, m2);
      if (f < best) {
        best = f;
        bi = e;
      }
    }
  }
  return bi;
}

void nearest_chunk(const SearchView& b, const float* xs, int64_t groups, uint8_t* idx) {
  const ScreenStep st = screen_step(b.q, abs_max(xs, groups * 64));
  if (!st.ok) return nearest_avx2(b, xs, groups, idx);
  Batch bt;
  fill_init(b, st.inv_unit, bt.init);
  for (int64_t g = 0; g < groups; g++)
    quantize_group(xs + g * 64, st, bt.lo + g * 8, bt.hi + g * 8, bt.slack + g * 8);
  alignas(32) int32_t s[kPerPass][256];
  int32_t smin[kPerPass];
  for (int v = 0; v < groups * 8; v += kPerPass) {
    score(b, bt, v, s, smin);
    for (int i = 0; i < kPerPass; i++) {
      int k = v + i;
      idx[k] = (uint8_t)pick(b, s[i], smin[i] + bt.slack[k], xs + k / 8 * 64 + k % 8);
    }
  }
}

}  // namespace

void nearest_avxvnni(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  for (int64_t g = 0; g < n_groups; g += kChunkGroups) {
    int64_t n = n_groups - g < kChunkGroups ? n_groups - g : kChunkGroups;
    nearest_chunk(b, xs + g * 64, n, idx + g * 8);
  }
}

}  // namespace waste::detail
