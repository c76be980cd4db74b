// The integer-screened nearest-entry search (issue 9), AVX-512 with VNNI. The exact kernels
// spend 8 float fmas on every (vector, entry); this one first scores all entries with 8-bit
// integers, which vpdpbusd does 64 multiply-adds at a time and exactly, and then runs the exact
// float chain only on the few entries whose score is within a proven bound of the best one
// (detail::screen_step derives it; about 2.3 per vector on trained books, 39% alone). Those
// candidates are evaluated as nearest_scalar does and the first minimum in ascending order is
// taken, so the index is the scalar one, bit for bit.
//
// Measured (issue 9): picking through the candidates with branches cost more than scoring, as
// their count is unpredictable. So a group's candidates are compressed into one list
// (vpcompressb, hence VBMI2), their distances computed 16 at a time from transposed rows, and
// each vector's minimum found with masks: only the list's length branches (one round of 32
// lanes, rarely two).
//
// Per call, every 8 groups (64 vectors) share one x step: qx_d = rint(x_d * inv_step), stored
// as qx_d + 128 because vpdpbusd's first operand is unsigned; the book holds -qc_d, and bias_c
// (128 sum_d qc_d) removes the offset again. A batch the bound cannot cover (NaN or infinite x,
// all zero, extreme magnitudes) takes the exact AVX-512 search instead.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* idiom
// (GCC PR 105593, as in kernels_avx512.cpp); silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "engine/vq_encode.h"

namespace waste::detail {

namespace {

constexpr int kChunkGroups = 8;  // groups per x step (encode_matrix's call size)
constexpr int kChunkVectors = kChunkGroups * 8;
constexpr int kPerPass = 8;             // one group per pass: 8 vectors share each book load
constexpr int32_t kPadScore = 1 << 30;  // above every threshold (screen_step's ranges)

// One x step's data: what the scores start from and each vector's quantized bytes and slack.
struct Batch {
  alignas(64) int32_t init[256];                  // rint(|c|^2 / U) + bias_c
  uint32_t lo[kChunkVectors], hi[kChunkVectors];  // bytes qx_d + 128 of dims 0-3 and 4-7
  int32_t slack[kChunkVectors];
};

float hmax(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_max_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_max_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
}

int32_t hmin(__m512i v) {
  v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
  v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
  return _mm_cvtsi128_si32(_mm512_castsi512_si128(v));
}

// max |x| over n floats (a multiple of 16), NaN when any of them is NaN.
float abs_max(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 nan = 0;
  for (int64_t i = 0; i < n; i += 16) {
    __m512 v = _mm512_loadu_ps(x + i);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    m = _mm512_max_ps(m, _mm512_abs_ps(v));
  }
  return nan ? __builtin_nanf("") : hmax(m);
}

// init[c] = rint(N_c * inv_unit) + bias_c; padded entries get kPadScore.
void fill_init(const SearchView& b, double inv_unit, int32_t* init) {
  const __m512d s = _mm512_set1_pd(inv_unit);
  for (int c = 0; c < b.padded; c += 8) {
    __m512d n = _mm512_mul_pd(_mm512_cvtps_pd(_mm256_loadu_ps(b.norms + c)), s);
    __m256i r = _mm512_cvt_roundpd_epi32(n, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    r = _mm256_add_epi32(r, _mm256_loadu_si256((const __m256i*)(b.q.bias + c)));
    _mm256_storeu_si256((__m256i*)(init + c), r);
  }
  for (int c = b.entries; c < b.padded; c++) init[c] = kPadScore;
}

// One group's 8 vectors: the offset bytes, transposed from [d][lane] to per-lane words by the
// classic unpack ladder, and the slack from ||x||_1 (float sum, as screen_step assumes).
void quantize_group(const float* x, const ScreenStep& st, uint32_t* lo, uint32_t* hi,
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
    r[d] = _mm256_cvtepi32_epi8(_mm256_cvtps_epi32(p));
  }
  const __m128i flip = _mm_set1_epi8((char)0x80);
  __m128i a = _mm_unpacklo_epi8(r[0], r[1]), b = _mm_unpacklo_epi8(r[2], r[3]);
  __m128i c = _mm_unpacklo_epi8(r[4], r[5]), d = _mm_unpacklo_epi8(r[6], r[7]);
  _mm_storeu_si128((__m128i*)lo, _mm_xor_si128(_mm_unpacklo_epi16(a, b), flip));
  _mm_storeu_si128((__m128i*)(lo + 4), _mm_xor_si128(_mm_unpackhi_epi16(a, b), flip));
  _mm_storeu_si128((__m128i*)hi, _mm_xor_si128(_mm_unpacklo_epi16(c, d), flip));
  _mm_storeu_si128((__m128i*)(hi + 4), _mm_xor_si128(_mm_unpackhi_epi16(c, d), flip));
  __m512d s =
      _mm512_fmadd_pd(_mm512_cvtps_pd(l1), _mm512_set1_pd(st.slack_b), _mm512_set1_pd(st.slack_a));
  __m256i up = _mm512_cvt_roundpd_epi32(s, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
  _mm256_storeu_si256((__m256i*)slack, _mm256_add_epi32(up, _mm256_set1_epi32(1)));
}

// Integer scores of kPerPass vectors against every entry, and each vector's smallest score.
void score(const SearchView& b, const Batch& bt, int v0, int32_t (*s)[256], int32_t* smin) {
  __m512i lo[kPerPass], hi[kPerPass], mn[kPerPass];
#pragma GCC unroll 8
  for (int i = 0; i < kPerPass; i++) {
    lo[i] = _mm512_set1_epi32((int)bt.lo[v0 + i]);
    hi[i] = _mm512_set1_epi32((int)bt.hi[v0 + i]);
    mn[i] = _mm512_set1_epi32(kPadScore);
  }
  const int8_t* q = b.q.neg;
  for (int c = 0; c < b.padded; c += 16) {
    __m512i init = _mm512_load_si512(bt.init + c);
    __m512i q03 = _mm512_loadu_si512(q + c * 8), q47 = _mm512_loadu_si512(q + c * 8 + 64);
#pragma GCC unroll 8
    for (int i = 0; i < kPerPass; i++) {
      __m512i a = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo[i], q03), hi[i], q47);
      mn[i] = _mm512_min_epi32(mn[i], a);
      _mm512_store_si512(s[i] + c, a);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kPerPass; i++) smin[i] = hmin(mn[i]);
}

// Entries scoring at most `thr` of one vector, as bytes appended to e[*n..]. Compressing each
// 64-entry mask (vpcompressb) keeps this free of branches on the data; s[] is 256 scores long,
// kPadScore past the book.
void collect(const int32_t* s, int32_t thr, uint8_t* e, int* n) {
  const __m512i t = _mm512_set1_epi32(thr);
  const __m512i iota = _mm512_set_epi8(
      63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
      40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
      17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
#pragma GCC unroll 4
  for (int w = 0; w < 4; w++) {
    const int32_t* p = s + w * 64;
    __mmask32 lo = _mm512_kunpackw(_mm512_cmple_epi32_mask(_mm512_load_si512(p + 16), t),
                                   _mm512_cmple_epi32_mask(_mm512_load_si512(p), t));
    __mmask32 hi = _mm512_kunpackw(_mm512_cmple_epi32_mask(_mm512_load_si512(p + 48), t),
                                   _mm512_cmple_epi32_mask(_mm512_load_si512(p + 32), t));
    __mmask64 k = _mm512_kunpackd(hi, lo);
    __m512i ids = _mm512_add_epi8(iota, _mm512_set1_epi8((char)(w * 64)));
    _mm512_storeu_si512(e + *n, _mm512_maskz_compress_epi8(k, ids));
    *n += __builtin_popcountll(_cvtmask64_u64(k));
  }
}

// The candidates of one pass, vector by vector, each vector's entries ascending: vector i's
// are e[start[i] .. start[i+1]). 64 bytes of room past the last, which collect's
// whole-register stores may write.
struct Candidates {
  uint8_t e[kPerPass * 256 + 64];
  int start[kPerPass + 1];
};

// Bits 0..k-1 of 32.
inline uint32_t below(int k) {
  return k <= 0 ? 0u : k >= 32 ? ~0u : (1u << k) - 1;
}

// The rows of 16 entries transposed: c[d] lane k = rows[e_k][d]. Loads and shuffles (an 8 x 8
// transpose in each 256-bit half) cost far fewer instructions than 8 gathers.
void transpose_rows(const float* rows, const int32_t* e, __m512* c) {
  __m512 z[8], t[8];
  for (int k = 0; k < 8; k++)
    z[k] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(rows + e[k] * 8)),
                              _mm256_loadu_ps(rows + e[k + 8] * 8), 1);
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm512_unpacklo_ps(z[k], z[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(z[k], z[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    z[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
    z[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xee);
    z[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    z[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xee);
  }
  const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int k = 0; k < 4; k++) {
    c[k] = _mm512_permutex2var_ps(z[k], lo, z[k + 4]);
    c[k + 4] = _mm512_permutex2var_ps(z[k], hi, z[k + 4]);
  }
}

// Float distances of up to 16 candidates, as nearest_scalar computes them (|c|^2, then the fma
// chain in dimension order); m2[d] holds -2x_d of the pass's vectors in lanes 0..kPerPass-1.
// Lane k is list entry j + k, owned by vector owner[k]; lanes past the list read entry 0 and
// the caller ignores them.
__m512 distances(const SearchView& b, const Candidates& cs, int j, __mmask16 live, __m512i owner,
                 const __m512* m2) {
  const __m512i e = _mm512_maskz_cvtepu8_epi32(live, _mm_loadu_si128((const __m128i*)(cs.e + j)));
  alignas(64) int32_t ei[16];
  _mm512_store_si512(ei, e);
  __m512 c[8];
  transpose_rows(b.rows, ei, c);
  __m512 f = _mm512_i32gather_ps(e, b.norms, 4);
#pragma GCC unroll 8
  for (int d = 0; d < 8; d++) f = _mm512_fmadd_ps(_mm512_permutexvar_ps(owner, m2[d]), c[d], f);
  return f;
}

float hmin(__m512 v) {
  v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_min_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_min_ps(v, _mm512_shuffle_ps(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
}

// The owners of list entries j .. j+15 (lane k: the vector whose range holds j + k).
__m512i owners(const Candidates& cs, int j) {
  __m512i owner = _mm512_setzero_si512();
  for (int i = 1; i < kPerPass; i++) {
    __mmask16 from = (__mmask16)~below(cs.start[i] - j);
    owner = _mm512_mask_add_epi32(owner, from, owner, _mm512_set1_epi32(1));
  }
  return owner;
}

// Each vector's first float minimum among its candidates: the smallest distance, and of the
// lanes holding it the first, i.e. the lowest entry (lanes are ascending per vector and later
// rounds of 32 hold higher entries, which win only when strictly smaller). 32 lanes a round:
// a group's list is rarely longer, and each vector's minimum costs one reduction per round.
void decide(const SearchView& b, const Candidates& cs, const __m512* m2, uint8_t* out) {
  float best[kPerPass];
  for (int i = 0; i < kPerPass; i++) best[i] = __builtin_inff();
  const int n = cs.start[kPerPass];
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  for (int j = 0; j < n; j += 32) {
    const __m512 f0 = distances(b, cs, j, (__mmask16)below(n - j), owners(cs, j), m2);
    const __m512 f1 =
        distances(b, cs, j + 16, (__mmask16)below(n - j - 16), owners(cs, j + 16), m2);
    for (int i = 0; i < kPerPass; i++) {
      uint32_t mine = below(cs.start[i + 1] - j) & ~below(cs.start[i] - j);
      __mmask16 m0 = (__mmask16)mine, m1 = (__mmask16)(mine >> 16);
      float m =
          hmin(_mm512_min_ps(_mm512_mask_mov_ps(inf, m0, f0), _mm512_mask_mov_ps(inf, m1, f1)));
      const __m512 mv = _mm512_set1_ps(m);
      uint32_t at = _mm512_mask_cmp_ps_mask(m0, f0, mv, _CMP_EQ_OQ) |
                    (uint32_t)_mm512_mask_cmp_ps_mask(m1, f1, mv, _CMP_EQ_OQ) << 16;
      if (m < best[i]) {
        best[i] = m;
        out[i] = cs.e[j + __builtin_ctz(at)];
      }
    }
  }
}

void nearest_chunk(const SearchView& b, const float* xs, int64_t groups, uint8_t* idx) {
  const ScreenStep st = screen_step(b.q, abs_max(xs, groups * 64));
  if (!st.ok) return nearest_avx512(b, xs, groups, idx);
  Batch bt;
  fill_init(b, st.inv_unit, bt.init);
  for (int64_t g = 0; g < groups; g++)
    quantize_group(xs + g * 64, st, bt.lo + g * 8, bt.hi + g * 8, bt.slack + g * 8);
  alignas(64) int32_t s[kPerPass][256];
  for (int i = 0; i < kPerPass; i++)
    for (int c = b.padded; c < 256; c++) s[i][c] = kPadScore;
  int32_t smin[kPerPass];
  Candidates cs;
  for (int v = 0; v < groups * 8; v += kPerPass) {
    score(b, bt, v, s, smin);
    int n = 0;
    for (int i = 0; i < kPerPass; i++) {
      cs.start[i] = n;
      collect(s[i], smin[i] + bt.slack[v + i], cs.e, &n);
    }
    cs.start[kPerPass] = n;
    // The pass's vectors are the 8 lanes of one group.
    const float* x = xs + v / 8 * 64 + v % 8;
    __m512 m2[8];
    for (int d = 0; d < 8; d++)
      m2[d] =
          _mm512_zextps256_ps512(_mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_loadu_ps(x + d * 8)));
    decide(b, cs, m2, idx + v);
  }
}

}  // namespace

void nearest_vnni(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  for (int64_t g = 0; g < n_groups; g += kChunkGroups) {
    int64_t n = n_groups - g < kChunkGroups ? n_groups - g : kChunkGroups;
    nearest_chunk(b, xs + g * 64, n, idx + g * 8);
  }
}

}  // namespace waste::detail
