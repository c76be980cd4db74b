// The integer-screened nearest-entry search (vq_screen.h) with AVX-512 VNNI: 16 entries per
// register, the 8 vectors of a group per pass so each book load feeds 8 vectors.
//
// Measured (issue 9): picking through the candidates with branches cost more than scoring, as
// their count is unpredictable. So a group's candidates are compressed into one list
// (vpcompressb, hence VBMI2); each vector's first four take fixed lanes, where their distances
// are computed 16 at a time from transposed rows and the minimum over a vector's four is a
// lane-wise compare. Only the rare vector with more than four candidates (about 8%) branches.
// A batch the bound cannot cover takes the exact AVX-512 search.
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* idiom
// (GCC PR 105593, as in kernels_avx512.cpp); silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "engine/convert/vq_encode_x86.h"
#include "engine/convert/vq_screen.h"
#include "engine/convert/vq_screen_x86.h"

namespace waste::detail {

namespace {

constexpr int kGroupPass = 8;  // one group per pass: 8 vectors share each book load

// Entries scoring at most `thr` of one vector, as bytes appended to e[*n..]. Compressing each
// 64-entry mask (vpcompressb) keeps this free of branches on the data; s[] is 256 scores long,
// kPadScore past the book. s <= thr is the sign of s - (thr + 1) (no overflow: both lie
// within +-2^30, screen_step's ranges), which vpmovd2m reads on another port than compares into
// masks use on Intel cores; the masks are joined in general registers for the same reason.
void collect(const int32_t* s, int32_t thr, uint8_t* e, int* n) {
  const __m512i t = _mm512_set1_epi32(thr + 1);
  const __m512i iota = _mm512_set_epi8(
      63, 62, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41,
      40, 39, 38, 37, 36, 35, 34, 33, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18,
      17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  uint64_t words[4];
#pragma GCC unroll 4
  for (int w = 0; w < 4; w++) {
    const int32_t* p = s + w * 64;
    uint64_t k = 0;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
      k |= (uint64_t)_cvtmask16_u32(
               _mm512_movepi32_mask(_mm512_sub_epi32(_mm512_load_si512(p + 16 * j), t)))
           << (16 * j);
    words[w] = k;
  }
#pragma GCC unroll 4
  for (int w = 0; w < 4; w++) {
    __m512i ids = _mm512_add_epi8(iota, _mm512_set1_epi8((char)(w * 64)));
    _mm512_storeu_si512(e + *n, _mm512_maskz_compress_epi8(_cvtu64_mask64(words[w]), ids));
    *n += __builtin_popcountll(words[w]);
  }
}

// The candidates of one pass, vector by vector, each vector's entries ascending: vector i's
// are e[start[i] .. start[i+1]). 64 bytes of room past the last, which collect's
// whole-register stores may write.
struct Candidates {
  uint8_t e[kGroupPass * 256 + 64];
  int start[kGroupPass + 1];
};

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

// Float distances of 16 candidates (lane k: entry e[k]) as nearest_scalar computes them: |c|^2,
// then the fma chain in dimension order; m2[d] holds -2x_d of each lane's vector.
__m512 distances(const SearchView& b, __m512i e, const __m512* m2) {
  alignas(64) int32_t ei[16];
  _mm512_store_si512(ei, e);
  __m512 c[8];
  transpose_rows(b.rows, ei, c);
  __m512 f = _mm512_i32gather_ps(e, b.norms, 4);
#pragma GCC unroll 8
  for (int d = 0; d < 8; d++) f = _mm512_fmadd_ps(m2[d], c[d], f);
  return f;
}

constexpr int kSlots = 4;  // candidates per vector evaluated in registers; the rest one by one

// The entries in slot-major lanes: slot k of vector i is lane 8k + i, slots 0-1 in e01 and 2-3
// in e23; lanes past a vector's count hold entry 0 and are off in live01/live23.
struct Slots {
  __m512i e01, e23;
  __mmask16 live01, live23;
  __m512i count;  // each vector's candidate count, in lanes i and 8 + i
};

Slots slots(const Candidates& cs) {
  alignas(32) uint32_t first[kGroupPass];  // a vector's first four entries, one per byte
  alignas(32) int32_t count[kGroupPass];
  for (int i = 0; i < kGroupPass; i++) {
    __builtin_memcpy(&first[i], cs.e + cs.start[i], 4);  // bytes past the count: any value
    count[i] = cs.start[i + 1] - cs.start[i];
  }
  Slots sl;
  const __m256i f = _mm256_load_si256((const __m256i*)first), ff = _mm256_set1_epi32(0xff);
  sl.count = _mm512_broadcast_i64x4(_mm256_load_si256((const __m256i*)count));
  const __m512i k01 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  sl.live01 = _mm512_cmpgt_epi32_mask(sl.count, k01);
  sl.live23 = _mm512_cmpgt_epi32_mask(sl.count, _mm512_add_epi32(k01, _mm512_set1_epi32(2)));
  auto byte = [&](int k) { return _mm256_and_si256(_mm256_srli_epi32(f, 8 * k), ff); };
  sl.e01 = _mm512_maskz_mov_epi32(sl.live01,
                                  _mm512_inserti64x4(_mm512_castsi256_si512(byte(0)), byte(1), 1));
  sl.e23 = _mm512_maskz_mov_epi32(sl.live23,
                                  _mm512_inserti64x4(_mm512_castsi256_si512(byte(2)), byte(3), 1));
  return sl;
}

// Strict `<`: on equal distances the earlier slot, i.e. the lower entry, stays.
inline void take_if_less(__m256 d, __m256i e, __m256* best, __m256i* id) {
  __mmask8 lt = _mm256_cmp_ps_mask(d, *best, _CMP_LT_OQ);
  *best = _mm256_mask_mov_ps(*best, lt, d);
  *id = _mm256_mask_mov_epi32(*id, lt, e);
}

// Candidates past the fourth of the vectors in `more`, one at a time in ascending order, as
// nearest_scalar evaluates them; m2[d] lane i is -2x_d of vector i.
__m256i finish_long(const SearchView& b, const Candidates& cs, unsigned more, const __m256* m2,
                    __m256 best, __m256i id) {
  alignas(32) float bd[kGroupPass], m2v[8][kGroupPass];
  alignas(32) int32_t bi[kGroupPass];
  _mm256_store_ps(bd, best);
  _mm256_store_si256((__m256i*)bi, id);
  for (int d = 0; d < 8; d++) _mm256_store_ps(m2v[d], m2[d]);
  for (; more; more &= more - 1) {
    int i = __builtin_ctz(more);
    for (int k = cs.start[i] + kSlots; k < cs.start[i + 1]; k++) {
      int e = cs.e[k];
      float acc = b.norms[e];
      for (int d = 0; d < 8; d++) acc = __builtin_fmaf(m2v[d][i], b.rows[e * 8 + d], acc);
      if (acc < bd[i]) {
        bd[i] = acc;
        bi[i] = e;
      }
    }
  }
  return _mm256_load_si256((const __m256i*)bi);
}

// Each vector's first float minimum among its candidates: the four slots' distances in two
// registers, three lane-wise steps in slot order, then the rare longer lists. x is the group.
void decide_group(const SearchView& b, const Candidates& cs, const float* x, uint8_t* out) {
  const Slots sl = slots(cs);
  __m256 m2[8];
  __m512 m2x2[8];  // both halves: slots 0 and 1 (2 and 3) belong to the same 8 vectors
  for (int d = 0; d < 8; d++) {
    m2[d] = _mm256_mul_ps(_mm256_set1_ps(-2.0f), _mm256_loadu_ps(x + d * 8));
    m2x2[d] = _mm512_insertf32x8(_mm512_castps256_ps512(m2[d]), m2[d], 1);
  }
  const __m512 inf = _mm512_set1_ps(__builtin_inff());
  const __m512 f01 = _mm512_mask_mov_ps(inf, sl.live01, distances(b, sl.e01, m2x2));
  const __m512 f23 = _mm512_mask_mov_ps(inf, sl.live23, distances(b, sl.e23, m2x2));
  __m256 best = _mm512_castps512_ps256(f01);
  __m256i id = _mm512_castsi512_si256(sl.e01);
  take_if_less(_mm512_extractf32x8_ps(f01, 1), _mm512_extracti64x4_epi64(sl.e01, 1), &best, &id);
  take_if_less(_mm512_castps512_ps256(f23), _mm512_castsi512_si256(sl.e23), &best, &id);
  take_if_less(_mm512_extractf32x8_ps(f23, 1), _mm512_extracti64x4_epi64(sl.e23, 1), &best, &id);
  unsigned more = _mm512_cmpgt_epi32_mask(sl.count, _mm512_set1_epi32(kSlots)) & 0xffu;
  if (__builtin_expect(more != 0, 0)) id = finish_long(b, cs, more, m2, best, id);
  _mm_storel_epi64((__m128i*)out, _mm256_cvtepi32_epi8(id));
}

struct Avx512Vnni : ScreenX86 {
  using I = __m512i;
  static constexpr int kLanes = 16;
  static constexpr int kPerPass = kGroupPass;

  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I load(const int32_t* p) { return _mm512_load_si512(p); }
  static I load_book(const int8_t* p) { return _mm512_loadu_si512(p); }
  static I dot(I acc, I u, I q) { return _mm512_dpbusd_epi32(acc, u, q); }
  static I min(I a, I b) { return _mm512_min_epi32(a, b); }
  static void store(int32_t* p, I v) { _mm512_store_si512(p, v); }
  static int32_t hmin(I v) {
    v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_min_epi32(v, _mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
    v = _mm512_min_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
    return _mm_cvtsi128_si32(_mm512_castsi512_si128(v));
  }

  static void exact(const SearchView& b, const float* xs, int64_t groups, uint8_t* idx) {
    nearest_avx512(b, xs, groups, idx);
  }

  // The pass's vectors are the 8 lanes of one group: one candidate list, decided together.
  static void decide(const SearchView& b, const int32_t (*s)[256], const int32_t* thr,
                     const float* xs, int v, uint8_t* idx) {
    Candidates cs;
    int n = 0;
    for (int i = 0; i < kPerPass; i++) {
      cs.start[i] = n;
      collect(s[i], thr[i], cs.e, &n);
    }
    cs.start[kPerPass] = n;
    decide_group(b, cs, xs + v / 8 * 64, idx + v);
  }
};

}  // namespace

void nearest_vnni(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  nearest_screened<Avx512Vnni>(b, xs, n_groups, idx);
}

}  // namespace waste::detail
