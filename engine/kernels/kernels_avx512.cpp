// AVX-512 kernels (16 float lanes; F, BW, VL, DQ). The same structure as kernels_avx2.cpp with
// twice the width; everything is internal so no AVX-512 copy of a shared helper can leak out
// (see kernels_avx2.cpp).
// GCC 12's AVX-512 headers trip -W(maybe-)uninitialized on their own _mm512_undefined_* idiom
// (a known false positive, GCC PR 105593); silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>

#include "engine/kernels/kernels.h"

namespace waste {

namespace {

constexpr int kLanes = 16;
constexpr int kRowTile = 4;          // rows sharing each x load
constexpr int kTokenTile = 16;       // matmul tokens sharing each decoded group
constexpr int64_t kScaleChunk = 64;  // groups whose scales are decoded at once
constexpr int64_t kStackFloats = 8192;

// Scratch floats, 64-byte aligned: on the stack when small, else on the heap.
class Scratch {
 public:
  explicit Scratch(int64_t n) : p_(local_) {
    if (n > kStackFloats) p_ = (float*)std::aligned_alloc(64, (size_t)(n * 4 + 63) / 64 * 64);
  }
  ~Scratch() {
    if (p_ != local_) std::free(p_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* get() { return p_; }

 private:
  alignas(64) float local_[kStackFloats];
  float* p_;
};

int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

__mmask16 first_lanes(int64_t n) {
  return (__mmask16)((1u << n) - 1);
}

// --- f16 scales: the exact decode of f16_to_f32 (exponent 31 stays finite, subnormals kept).

float f16_scalar(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
  if (exp == 0) {
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  uint32_t b = sign | ((exp + 112) << 23) | (man << 13);
  float f;
  __builtin_memcpy(&f, &b, 4);
  return f;
}

__m512 f16x16(const uint16_t* h) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)h));
  __m512i mag = _mm512_and_si512(w, _mm512_set1_epi32(0x7fff));
  __m512i sign = _mm512_slli_epi32(_mm512_xor_si512(w, mag), 16);
  __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 13), _mm512_set1_epi32(112 << 23));
  __m512 man = _mm512_cvtepi32_ps(_mm512_and_si512(w, _mm512_set1_epi32(1023)));
  __m512 sub = _mm512_mul_ps(man, _mm512_set1_ps(1.0f / 16777216.0f));
  __mmask16 is_sub = _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(0x400));
  __m512 v = _mm512_mask_blend_ps(is_sub, _mm512_castsi512_ps(normal), sub);
  return _mm512_or_ps(v, _mm512_castsi512_ps(sign));
}

void decode_scales(const uint16_t* h, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) _mm512_storeu_ps(out + i, f16x16(h + i));
  for (; i < n; i++) out[i] = f16_scalar(h[i]);
}

// A fixed reduction order: matvec and matmul must reduce identically.
float hsum(__m512 v) {
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// --- Quantized trunk rows. A decode step turns a run of code bytes into kVecs lane vectors of
// exact integer-valued floats; x is rearranged once per call into a zero-padded "panel" in the
// order the vectors come out, so the codes need only in-lane shuffles.

// Q4G, 64 bytes (a whole group) per step: nibbles are split with masks, widened by unpacking
// with zero bytes and then with 0x4B00 words, which makes each lane the float 2^23 + code;
// subtracting 2^23 + 8 leaves q = code - 8 exactly. Vector i, lane p holds input q4_input(i, p).
constexpr int kQ4StepInputs = 128;

int q4_input(int i, int p) {
  int byte = 16 * (p / 4) + 4 * (i % 4) + p % 4;
  return 2 * byte + i / 4;
}

template <int NR>
struct Q4Codes {
  static constexpr int kSteps = 1, kVecs = 8;
  const uint8_t* p[NR];
  void decode(int k, int j, __m512* f) const {
    __m512i b = _mm512_loadu_si512(p[k] + 64 * j);
    __m512i mask = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
    __m512i magic = _mm512_set1_epi16(0x4B00);
    __m512 bias = _mm512_set1_ps(8388616.0f);  // 2^23 + 8
    __m512i nib[2] = {_mm512_and_si512(b, mask), _mm512_and_si512(_mm512_srli_epi16(b, 4), mask)};
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      __m512i w[2] = {_mm512_unpacklo_epi8(nib[h], zero), _mm512_unpackhi_epi8(nib[h], zero)};
#pragma GCC unroll 2
      for (int u = 0; u < 2; u++) {
        __m512i lo = _mm512_unpacklo_epi16(w[u], magic), hi = _mm512_unpackhi_epi16(w[u], magic);
        f[4 * h + 2 * u] = _mm512_sub_ps(_mm512_castsi512_ps(lo), bias);
        f[4 * h + 2 * u + 1] = _mm512_sub_ps(_mm512_castsi512_ps(hi), bias);
      }
    }
  }
};

// Q8G, 64 bytes (64 inputs, in order) per step: sign-extending loads and a conversion.
template <int NR>
struct Q8Codes {
  static constexpr int kSteps = 2, kVecs = 4;
  const uint8_t* p[NR];
  void decode(int k, int j, __m512* f) const {
#pragma GCC unroll 4
    for (int i = 0; i < kVecs; i++) {
      __m128i q = _mm_loadu_si128((const __m128i*)(p[k] + 64 * j + 16 * i));
      f[i] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    }
  }
};

// Q4G needs x in decode order, Q8G in input order; both zero-padded to whole groups. Callers
// split rows across threads, so this O(cols) step runs once per row range and must stay cheap.
void build_panel(const float* x, int64_t cols, int64_t padded, bool q4, float* panel) {
  if (!q4) {
    __builtin_memcpy(panel, x, (size_t)cols * 4);
    for (int64_t c = cols; c < padded; c++) panel[c] = 0.0f;
    return;
  }
  int order[kQ4StepInputs];
  for (int i = 0; i < kQ4StepInputs; i++) order[i] = q4_input(i / kLanes, i % kLanes);
  int64_t c0 = 0;
  for (; c0 + kQ4StepInputs <= cols; c0 += kQ4StepInputs)
    for (int i = 0; i < kQ4StepInputs; i++) panel[c0 + i] = x[c0 + order[i]];
  for (; c0 < padded; c0 += kQ4StepInputs)
    for (int i = 0; i < kQ4StepInputs; i++)
      panel[c0 + i] = c0 + order[i] < cols ? x[c0 + order[i]] : 0.0f;
}

template <int NR, template <int> class Codes>
void decode_group(const Codes<NR>& codes, float* out) {
  for (int k = 0; k < NR; k++)
    for (int j = 0; j < Codes<NR>::kSteps; j++) {
      __m512 f[Codes<NR>::kVecs];
      codes.decode(k, j, f);
      for (int i = 0; i < Codes<NR>::kVecs; i++)
        _mm512_store_ps(out + k * kQuantGroup + (j * Codes<NR>::kVecs + i) * kLanes, f[i]);
    }
}

// The per-group partial dots of NR rows for matvec: two accumulators per row, the vectors of
// the group alternating between them in ascending order, then one add.
template <int NR, class Codes>
inline __attribute__((always_inline)) void group_dots(const Codes& w, const float* xg,
                                                      __m512* part) {
  __m512 acc[2][NR];
#pragma GCC unroll 8
  for (int k = 0; k < NR; k++) acc[0][k] = acc[1][k] = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < Codes::kSteps; j++) {
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
      __m512 f[Codes::kVecs];
      w.decode(k, j, f);
#pragma GCC unroll 8
      for (int i = 0; i < Codes::kVecs; i++) {
        __m512 x = _mm512_load_ps(xg + (j * Codes::kVecs + i) * kLanes);
        acc[i % 2][k] = _mm512_fmadd_ps(f[i], x, acc[i % 2][k]);
      }
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < NR; k++) part[k] = _mm512_add_ps(acc[0][k], acc[1][k]);
}

// group_dots for codes decoded earlier (matmul): the loop runs vector-major, yet every
// accumulator receives the same FMAs in the same order as in group_dots (vectors ascending,
// parity picking the accumulator, since decode steps hold an even number of vectors), so the
// partials are bit-identical to matvec's.
static_assert(Q4Codes<1>::kVecs % 2 == 0 && Q8Codes<1>::kVecs % 2 == 0);

template <int NR>
inline __attribute__((always_inline)) void decoded_dots(const float* w, const float* x,
                                                        __m512* part) {
  __m512 acc[2][NR];
#pragma GCC unroll 8
  for (int k = 0; k < NR; k++) acc[0][k] = acc[1][k] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int v = 0; v < kQuantGroup / kLanes; v++) {
    __m512 xv = _mm512_load_ps(x + v * kLanes);
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++)
      acc[v % 2][k] =
          _mm512_fmadd_ps(_mm512_load_ps(w + k * kQuantGroup + v * kLanes), xv, acc[v % 2][k]);
  }
#pragma GCC unroll 8
  for (int k = 0; k < NR; k++) part[k] = _mm512_add_ps(acc[0][k], acc[1][k]);
}

template <int NR, template <int> class Codes>
Codes<NR> codes_at(const Matrix& w, int64_t r, int64_t g) {
  Codes<NR> c;
  int64_t group_bytes = w.row_bytes() / w.groups();
  for (int k = 0; k < NR; k++)
    c.p[k] = (const uint8_t*)w.data + (r + k) * w.row_bytes() + g * group_bytes;
  return c;
}

// Fetches the same group of the next row tile: the hardware prefetcher alone falls behind on
// NR interleaved row streams. Prefetches past the matrix end are harmless: they never fault.
template <class Codes>
void prefetch_next_tile(const Codes& c, int64_t tile_bytes, int64_t group_bytes) {
  for (const uint8_t* p : c.p)
    for (int64_t o = 0; o < group_bytes; o += 64)
      _mm_prefetch((const char*)((uintptr_t)p + tile_bytes + o), _MM_HINT_T0);
}

// Scales of NR rows for groups [g0, g0 + n).
template <int NR>
void tile_scales(const Matrix& w, int64_t r, int64_t g0, int64_t n, float (*sc)[kScaleChunk]) {
  for (int k = 0; k < NR; k++) decode_scales(w.scales + (r + k) * w.groups() + g0, n, sc[k]);
}

template <int NR, template <int> class Codes>
void quant_tile_matvec(const Matrix& w, const float* panel, float* y, int64_t r) {
  __m512 acc[NR];
  for (int k = 0; k < NR; k++) acc[k] = _mm512_setzero_ps();
  float sc[NR][kScaleChunk];
  for (int64_t g0 = 0; g0 < w.groups(); g0 += kScaleChunk) {
    int64_t ng = min64(kScaleChunk, w.groups() - g0);
    tile_scales<NR>(w, r, g0, ng, sc);
    for (int64_t g = 0; g < ng; g++) {
      Codes<NR> codes = codes_at<NR, Codes>(w, r, g0 + g);
      prefetch_next_tile(codes, NR * w.row_bytes(), w.row_bytes() / w.groups());
      __m512 part[NR];
      group_dots<NR>(codes, panel + (g0 + g) * kQuantGroup, part);
#pragma GCC unroll 8
      for (int k = 0; k < NR; k++)
        acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(sc[k][g]), part[k], acc[k]);
    }
  }
  for (int k = 0; k < NR; k++) y[r + k] = hsum(acc[k]);
}

// nt tokens (panels `stride` floats apart) through NR rows; outputs y[t*y_stride + r + k].
template <int NR, template <int> class Codes>
void quant_tile_matmul(const Matrix& w, const float* panels, int64_t stride, int nt, float* y,
                       int64_t y_stride, int64_t r) {
  __m512 acc[kTokenTile][NR];
  for (int t = 0; t < nt; t++)
    for (int k = 0; k < NR; k++) acc[t][k] = _mm512_setzero_ps();
  alignas(64) float decoded[NR * kQuantGroup];
  float sc[NR][kScaleChunk];
  for (int64_t g0 = 0; g0 < w.groups(); g0 += kScaleChunk) {
    int64_t ng = min64(kScaleChunk, w.groups() - g0);
    tile_scales<NR>(w, r, g0, ng, sc);
    for (int64_t g = 0; g < ng; g++) {
      decode_group<NR, Codes>(codes_at<NR, Codes>(w, r, g0 + g), decoded);
      const float* xg = panels + (g0 + g) * kQuantGroup;
      for (int t = 0; t < nt; t++) {
        __m512 part[NR];
        decoded_dots<NR>(decoded, xg + t * stride, part);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++)
          acc[t][k] = _mm512_fmadd_ps(_mm512_set1_ps(sc[k][g]), part[k], acc[t][k]);
      }
    }
  }
  for (int t = 0; t < nt; t++)
    for (int k = 0; k < NR; k++) y[t * y_stride + r + k] = hsum(acc[t][k]);
}

template <template <int> class Codes>
void quant_matvec(const Matrix& w, const float* panel, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + kRowTile <= r1; r += kRowTile) quant_tile_matvec<kRowTile, Codes>(w, panel, y, r);
  for (; r < r1; r++) quant_tile_matvec<1, Codes>(w, panel, y, r);
}

template <template <int> class Codes>
void quant_matmul(const Matrix& w, const float* panels, int64_t stride, int nt, float* y,
                  int64_t y_stride, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + kRowTile <= r1; r += kRowTile)
    quant_tile_matmul<kRowTile, Codes>(w, panels, stride, nt, y, y_stride, r);
  for (; r < r1; r++) quant_tile_matmul<1, Codes>(w, panels, stride, nt, y, y_stride, r);
}

// --- F32 rows: two accumulators per row (even and odd 16-lane chunks), masked tail.

template <int NR>
void f32_tile(const Matrix& w, const float* x, float* y, int64_t r) {
  const float* row[NR];
  __m512 a[NR], b[NR];
  for (int k = 0; k < NR; k++) {
    row[k] = (const float*)w.data + (r + k) * w.cols;
    a[k] = b[k] = _mm512_setzero_ps();
  }
  int64_t c = 0, n = w.cols;
  for (; c + 2 * kLanes <= n; c += 2 * kLanes) {
    __m512 xa = _mm512_loadu_ps(x + c), xb = _mm512_loadu_ps(x + c + kLanes);
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) {
      a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(row[k] + c), xa, a[k]);
      b[k] = _mm512_fmadd_ps(_mm512_loadu_ps(row[k] + c + kLanes), xb, b[k]);
    }
  }
  if (c + kLanes <= n) {
    __m512 xa = _mm512_loadu_ps(x + c);
    for (int k = 0; k < NR; k++) a[k] = _mm512_fmadd_ps(_mm512_loadu_ps(row[k] + c), xa, a[k]);
    c += kLanes;
  }
  if (c < n) {
    __mmask16 m = first_lanes(n - c);
    __m512 xb = _mm512_maskz_loadu_ps(m, x + c);
    for (int k = 0; k < NR; k++)
      b[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row[k] + c), xb, b[k]);
  }
  for (int k = 0; k < NR; k++) y[r + k] = hsum(_mm512_add_ps(a[k], b[k]));
}

void f32_matvec(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + kRowTile <= r1; r += kRowTile) f32_tile<kRowTile>(w, x, y, r);
  for (; r < r1; r++) f32_tile<1>(w, x, y, r);
}

// --- Entry points.

int64_t padded_cols(const Matrix& w) {
  return w.groups() * kQuantGroup;
}

void matvec(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  if (w.fmt == TensorFormat::kF32) return f32_matvec(w, x, y, r0, r1);
  bool q4 = w.fmt == TensorFormat::kQ4G;
  Scratch panel(padded_cols(w));
  build_panel(x, w.cols, padded_cols(w), q4, panel.get());
  if (q4) return quant_matvec<Q4Codes>(w, panel.get(), y, r0, r1);
  quant_matvec<Q8Codes>(w, panel.get(), y, r0, r1);
}

void matmul(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
            int64_t y_stride, int64_t r0, int64_t r1) {
  if (w.fmt == TensorFormat::kF32) {
    for (int64_t t = 0; t < n; t++) f32_matvec(w, x + t * x_stride, y + t * y_stride, r0, r1);
    return;
  }
  bool q4 = w.fmt == TensorFormat::kQ4G;
  int64_t stride = padded_cols(w);
  Scratch panels(stride * kTokenTile);
  for (int64_t t0 = 0; t0 < n; t0 += kTokenTile) {
    int nt = (int)min64(kTokenTile, n - t0);
    for (int t = 0; t < nt; t++)
      build_panel(x + (t0 + t) * x_stride, w.cols, stride, q4, panels.get() + t * stride);
    float* yt = y + t0 * y_stride;
    if (q4) {
      quant_matmul<Q4Codes>(w, panels.get(), stride, nt, yt, y_stride, r0, r1);
    } else {
      quant_matmul<Q8Codes>(w, panels.get(), stride, nt, yt, y_stride, r0, r1);
    }
  }
}

// --- VQ tables: per (position, stage) one multiply-add per dimension over all codes at once.

void vq_lut(const VqBooks& books, const float* x, int64_t nv, float* lut) {
  const int64_t e = books.entries;
  for (int64_t v = 0; v < nv; v++) {
    __m512 xd[kVqDim];
    for (int d = 0; d < kVqDim; d++) xd[d] = _mm512_set1_ps(x[v * kVqDim + d]);
    for (int s = 0; s < books.stages; s++) {
      const float* b = books.stage[s];
      float* out = lut + (v * books.stages + s) * e;
      for (int64_t c = 0; c < e; c += kLanes) {
        __mmask16 m = first_lanes(min64(kLanes, e - c));
        __m512 t = _mm512_mul_ps(xd[0], _mm512_maskz_loadu_ps(m, b + c));
#pragma GCC unroll 8
        for (int d = 1; d < kVqDim; d++)
          t = _mm512_fmadd_ps(xd[d], _mm512_maskz_loadu_ps(m, b + d * e + c), t);
        _mm512_mask_storeu_ps(out + c, m, t);
      }
    }
  }
}

// --- VQ rows: a 64-row tile keeps its sums in 4 registers while the positions stream by.

// Shuffle controls that pick stage s's index of 16 rows into 32-bit lanes. The runs of rows
// 4L..4L+3 go to 128-bit lane L, loaded from min(4LS, 16S-16) so no byte past the 16 rows'
// runs (16*S bytes) is read.
template <int S>
int lane_base(int lane) {
  int b = 4 * lane * S;
  return b < 16 * S - 16 ? b : 16 * S - 16;
}

template <int S>
__m512i stage_picker(int s) {
  alignas(64) int8_t m[64];
  for (int i = 0; i < 64; i++) m[i] = -128;
  for (int k = 0; k < kLanes; k++) {
    int lane = k / 4;
    m[16 * lane + 4 * (k % 4)] = (int8_t)(k * S + s - lane_base<S>(lane));
  }
  return _mm512_load_si512(m);
}

template <int S>
__m512i load_runs(const uint8_t* p) {
  if constexpr (S == 1) return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)p));
  if constexpr (S == 4) return _mm512_loadu_si512(p);
  __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(p + lane_base<S>(0))));
  z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + lane_base<S>(1))), 1);
  z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + lane_base<S>(2))), 2);
  return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i*)(p + lane_base<S>(3))), 3);
}

constexpr int kTileVecs = kVqRowBlock / kLanes;

template <int S>
void vq_tile_sums(const float* lut, int entries, const uint8_t* blk, int64_t nv, __m512* acc) {
  __m512i pick[S];
  for (int s = 0; s < S; s++) pick[s] = stage_picker<S>(s);
  for (int k = 0; k < kTileVecs; k++) acc[k] = _mm512_setzero_ps();
  for (int64_t v = 0; v < nv; v++) {
    const uint8_t* p = blk + v * kVqRowBlock * S;
    const float* t = lut + v * S * entries;
#pragma GCC unroll 4
    for (int k = 0; k < kTileVecs; k++) {
      __m512i runs = load_runs<S>(p + k * kLanes * S);
      __m512i i0 = S == 1 ? runs : _mm512_shuffle_epi8(runs, pick[0]);
      __m512 sum = _mm512_i32gather_ps(i0, t, 4);
#pragma GCC unroll 4
      for (int s = 1; s < S; s++)
        sum = _mm512_add_ps(
            sum, _mm512_i32gather_ps(_mm512_shuffle_epi8(runs, pick[s]), t + s * entries, 4));
      acc[k] = _mm512_add_ps(acc[k], sum);
    }
  }
}

template <int S>
void vq_rows_s(const float* lut, int entries, const VqMatrix& m, float* y, int64_t r0, int64_t r1) {
  for (int64_t rb = r0; rb < r1; rb += kVqRowBlock) {
    __m512 acc[kTileVecs];
    vq_tile_sums<S>(lut, entries, m.idx + rb * m.nv * S, m.nv, acc);
    for (int k = 0; k < kTileVecs; k++) {
      int64_t r = rb + k * kLanes;
      if (r + kLanes <= r1) {
        _mm512_storeu_ps(y + r, _mm512_mul_ps(f16x16(m.scales + r), acc[k]));
        continue;
      }
      alignas(64) float sums[kLanes];
      _mm512_store_ps(sums, acc[k]);
      for (int i = 0; i < kLanes && r + i < r1; i++)
        y[r + i] = f16_scalar(m.scales[r + i]) * sums[i];
    }
  }
}

void vq_rows(const float* lut, int stages, int entries, const VqMatrix& m, float* y, int64_t r0,
             int64_t r1) {
  switch (stages) {
    case 1:
      return vq_rows_s<1>(lut, entries, m, y, r0, r1);
    case 2:
      return vq_rows_s<2>(lut, entries, m, y, r0, r1);
    case 3:
      return vq_rows_s<3>(lut, entries, m, y, r0, r1);
    case 4:
      return vq_rows_s<4>(lut, entries, m, y, r0, r1);
    default:
      return detail::scalar_kernels().vq_rows(lut, stages, entries, m, y, r0, r1);
  }
}

// --- VQ rows for many tokens: one token per lane, so every lane repeats vq_lut's and vq_rows'
// operations for its own token. Few rows: each (row, position, stage) entry is computed in
// place, kRowTile rows sharing each load of the tokens' inputs; many rows: a table per position.

// Rows [r, r + R) for the kLanes tokens of `xt` ([position][lane]); `lanes` of them are real.
template <int S, int R>
void token_rows(const VqBooks& books, const float* xt, const VqMatrix& m, int64_t r, float* y,
                int64_t y_stride, int64_t lanes) {
  const int64_t e = books.entries;
  __m512 acc[R];
  const uint8_t* run[R];
  for (int i = 0; i < R; i++) {
    acc[i] = _mm512_setzero_ps();
    run[i] = m.idx + ((r + i) / kVqRowBlock) * m.nv * kVqRowBlock * S + ((r + i) % kVqRowBlock) * S;
  }
  for (int64_t v = 0; v < m.nv; v++) {
    __m512 xd[kVqDim];
    for (int d = 0; d < kVqDim; d++) xd[d] = _mm512_load_ps(xt + (v * kVqDim + d) * kLanes);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
      const uint8_t* idx = run[i] + v * kVqRowBlock * S;
      __m512 sum = _mm512_setzero_ps();
#pragma GCC unroll 4
      for (int s = 0; s < S; s++) {
        const float* b = books.stage[s] + idx[s];
        __m512 dot = _mm512_mul_ps(xd[0], _mm512_set1_ps(b[0]));
#pragma GCC unroll 8
        for (int d = 1; d < kVqDim; d++)
          dot = _mm512_fmadd_ps(xd[d], _mm512_set1_ps(b[d * e]), dot);
        sum = s == 0 ? dot : _mm512_add_ps(sum, dot);
      }
      acc[i] = _mm512_add_ps(acc[i], sum);
    }
  }
  for (int i = 0; i < R; i++) {
    alignas(64) float out[kLanes];
    _mm512_store_ps(out, _mm512_mul_ps(_mm512_set1_ps(f16_scalar(m.scales[r + i])), acc[i]));
    for (int64_t l = 0; l < lanes; l++) y[l * y_stride + r + i] = out[l];
  }
}

// Many rows: each position's table for the kLanes tokens (one vector per code, built with
// vq_lut's operations) is made once and shared by every row of [r0, r1), as vq_lut's table is
// for one token; `acc` holds each row's running sums between positions.
template <int S>
void table_rows(const VqBooks& books, const float* xt, const VqMatrix& m, int64_t r0, int64_t r1,
                float* lut, float* acc, float* y, int64_t y_stride, int64_t lanes) {
  const int64_t e = books.entries;
  for (int64_t r = r0; r < r1; r++) _mm512_store_ps(acc + (r - r0) * kLanes, _mm512_setzero_ps());
  for (int64_t v = 0; v < m.nv; v++) {
    __m512 xd[kVqDim];
    for (int d = 0; d < kVqDim; d++) xd[d] = _mm512_load_ps(xt + (v * kVqDim + d) * kLanes);
    for (int s = 0; s < S; s++) {
      const float* b = books.stage[s];
      float* out = lut + s * e * kLanes;
      for (int64_t c = 0; c < e; c++) {
        __m512 t = _mm512_mul_ps(xd[0], _mm512_set1_ps(b[c]));
#pragma GCC unroll 8
        for (int d = 1; d < kVqDim; d++)
          t = _mm512_fmadd_ps(xd[d], _mm512_set1_ps(b[d * e + c]), t);
        _mm512_store_ps(out + c * kLanes, t);
      }
    }
    // Row by row within each 64-row block, whose codes for position v are one contiguous run.
    for (int64_t rb = r0 / kVqRowBlock * kVqRowBlock; rb < r1; rb += kVqRowBlock) {
      const int64_t first = rb > r0 ? rb : r0, last = min64(r1, rb + kVqRowBlock);
      const uint8_t* idx = m.idx + (rb * m.nv + v * kVqRowBlock + (first - rb)) * S;
      float* a = acc + (first - r0) * kLanes;
      for (int64_t r = first; r < last; r++, idx += S, a += kLanes) {
        __m512 sum = _mm512_load_ps(lut + idx[0] * kLanes);
#pragma GCC unroll 4
        for (int s = 1; s < S; s++)
          sum = _mm512_add_ps(sum, _mm512_load_ps(lut + (s * e + idx[s]) * kLanes));
        _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), sum));
      }
    }
  }
  for (int64_t r = r0; r < r1; r++) {
    alignas(64) float out[kLanes];
    _mm512_store_ps(out, _mm512_mul_ps(_mm512_set1_ps(f16_scalar(m.scales[r])),
                                       _mm512_load_ps(acc + (r - r0) * kLanes)));
    for (int64_t l = 0; l < lanes; l++) y[l * y_stride + r] = out[l];
  }
}

template <int S>
void vq_rows_tokens_s(const VqBooks& books, const float* x, int64_t n, int64_t x_stride,
                      const VqMatrix& m, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  const int64_t width = m.nv * kVqDim;
  Scratch scratch(width * kLanes);
  float* xt = scratch.get();
  // Building a position's table costs S * entries vectors: worth it once a call has a quarter
  // as many rows.
  const bool tables = (r1 - r0) * 4 >= (int64_t)S * books.entries;
  Scratch lut(tables ? (int64_t)S * books.entries * kLanes : 0);
  Scratch acc(tables ? (r1 - r0) * kLanes : 0);
  for (int64_t t0 = 0; t0 < n; t0 += kLanes) {
    const int64_t lanes = min64(kLanes, n - t0);
    for (int64_t c = 0; c < width; c++)
      for (int64_t l = 0; l < kLanes; l++)
        xt[c * kLanes + l] = l < lanes ? x[(t0 + l) * x_stride + c] : 0.0f;
    float* yt = y + t0 * y_stride;
    if (tables) {
      table_rows<S>(books, xt, m, r0, r1, lut.get(), acc.get(), yt, y_stride, lanes);
      continue;
    }
    int64_t r = r0;
    for (; r + kRowTile <= r1; r += kRowTile)
      token_rows<S, kRowTile>(books, xt, m, r, yt, y_stride, lanes);
    for (; r < r1; r++) token_rows<S, 1>(books, xt, m, r, yt, y_stride, lanes);
  }
}

void vq_rows_tokens(const VqBooks& books, const float* x, int64_t n, int64_t x_stride,
                    const VqMatrix& m, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  switch (books.stages) {
    case 1:
      return vq_rows_tokens_s<1>(books, x, n, x_stride, m, y, y_stride, r0, r1);
    case 2:
      return vq_rows_tokens_s<2>(books, x, n, x_stride, m, y, y_stride, r0, r1);
    case 3:
      return vq_rows_tokens_s<3>(books, x, n, x_stride, m, y, y_stride, r0, r1);
    case 4:
      return vq_rows_tokens_s<4>(books, x, n, x_stride, m, y, y_stride, r0, r1);
    default:
      return detail::scalar_kernels().vq_rows_tokens(books, x, n, x_stride, m, y, y_stride, r0, r1);
  }
}

// --- Attention: scores and weighted sums of cache rows, in the orders kernels.h defines (the
// scalar reference's), four keys at a time so the dependent adds of one key overlap others'.

template <int NK>
void dots_group(const float* q, const float* k, int64_t stride, int64_t len, float scale,
                float* out) {
  __m512 acc[NK];
  for (int i = 0; i < NK; i++) acc[i] = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + kLanes <= len; j += kLanes) {
    __m512 qv = _mm512_loadu_ps(q + j);
    for (int i = 0; i < NK; i++)
      acc[i] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k + i * stride + j), acc[i]);
  }
  if (j < len) {  // masked-off lanes keep their sums
    const __mmask16 m = first_lanes(len - j);
    __m512 qv = _mm512_maskz_loadu_ps(m, q + j);
    for (int i = 0; i < NK; i++)
      acc[i] = _mm512_mask3_fmadd_ps(qv, _mm512_maskz_loadu_ps(m, k + i * stride + j), acc[i], m);
  }
  for (int i = 0; i < NK; i++) out[i] = hsum(acc[i]) * scale;
}

void dots(const float* q, const float* keys, int64_t n, int64_t stride, int64_t len, float scale,
          float* out) {
  int64_t s = 0;
  for (; s + 4 <= n; s += 4) dots_group<4>(q, keys + s * stride, stride, len, scale, out + s);
  for (; s < n; s++) dots_group<1>(q, keys + s * stride, stride, len, scale, out + s);
}

// Eight vectors of `out` stay in registers while every row adds into them.
void axpys(const float* a, const float* rows, int64_t n, int64_t stride, int64_t len, float* out) {
  constexpr int64_t kSpan = 8 * kLanes;
  for (int64_t j0 = 0; j0 < len; j0 += kSpan) {
    __mmask16 m[8];
    __m512 o[8];
    for (int v = 0; v < 8; v++) {
      const int64_t j = j0 + v * kLanes;
      m[v] = j >= len ? 0 : first_lanes(min64(kLanes, len - j));
      o[v] = _mm512_maskz_loadu_ps(m[v], out + j);
    }
    for (int64_t s = 0; s < n; s++) {
      const __m512 as = _mm512_set1_ps(a[s]);
      const float* r = rows + s * stride + j0;
      for (int v = 0; v < 8; v++)
        o[v] = _mm512_fmadd_ps(as, _mm512_maskz_loadu_ps(m[v], r + v * kLanes), o[v]);
    }
    for (int v = 0; v < 8; v++) _mm512_mask_storeu_ps(out + j0 + v * kLanes, m[v], o[v]);
  }
}

// Columns in spans of eight vectors: a span's p and o stay in registers through both passes.
void delta_rule(float* S, const float* q, const float* k, const float* v, const float* decay,
                float beta, int64_t d, float* o) {
  constexpr int64_t kSpan = 8 * kLanes;
  for (int64_t j0 = 0; j0 < d; j0 += kSpan) {
    __mmask16 m[8];
    __m512 p[8], acc[8];
    for (int u = 0; u < 8; u++) {
      const int64_t j = j0 + u * kLanes;
      m[u] = j >= d ? 0 : first_lanes(min64(kLanes, d - j));
      p[u] = acc[u] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < d; i++) {
      const __m512 di = _mm512_set1_ps(decay[i]), ki = _mm512_set1_ps(k[i]);
      float* row = S + i * d + j0;
      for (int u = 0; u < 8; u++) {
        const __m512 s = _mm512_mul_ps(_mm512_maskz_loadu_ps(m[u], row + u * kLanes), di);
        _mm512_mask_storeu_ps(row + u * kLanes, m[u], s);
        p[u] = _mm512_fmadd_ps(s, ki, p[u]);
      }
    }
    const __m512 b = _mm512_set1_ps(beta);
    for (int u = 0; u < 8; u++)
      p[u] =
          _mm512_mul_ps(b, _mm512_sub_ps(_mm512_maskz_loadu_ps(m[u], v + j0 + u * kLanes), p[u]));
    for (int64_t i = 0; i < d; i++) {
      const __m512 ki = _mm512_set1_ps(k[i]), qi = _mm512_set1_ps(q[i]);
      float* row = S + i * d + j0;
      for (int u = 0; u < 8; u++) {
        const __m512 s = _mm512_fmadd_ps(ki, p[u], _mm512_maskz_loadu_ps(m[u], row + u * kLanes));
        _mm512_mask_storeu_ps(row + u * kLanes, m[u], s);
        acc[u] = _mm512_fmadd_ps(s, qi, acc[u]);
      }
    }
    for (int u = 0; u < 8; u++) _mm512_mask_storeu_ps(o + j0 + u * kLanes, m[u], acc[u]);
  }
}

}  // namespace

namespace detail {

const Kernels& avx512_kernels() {
  static constexpr Kernels k{Isa::kAvx512,   matvec, matmul, vq_lut,    vq_rows,
                             vq_rows_tokens, dots,   axpys,  delta_rule};
  return k;
}

}  // namespace detail

}  // namespace waste
