// The SIMD kernels, written once over a vector-traits type V and instantiated by each
// instruction set's file (kernels_avx2.cpp, kernels_avx512.cpp, kernels_neon.cpp), which defines
// V and includes this header. V supplies the lane width, float arithmetic and the few steps whose
// best form differs per instruction set: exact f16 decode, turning Q4G/Q8G code bytes into
// floats, and spreading a VQ weight vector's 8 floats over 16 lanes. Everything else, including
// every reduction order the contracts in kernels.h fix, is here.
//
// Everything is in an anonymous namespace on purpose: each including file compiles its own copy
// with its own instruction-set flags, and no copy may be visible to the linker, which could
// otherwise pick an AVX-512 build of a shared helper for code that runs on an older CPU.
//
// What V provides (F: a vector of V::kLanes floats; M: a lane mask made by first()):
//   zero, set1, load (aligned), loadu, store (aligned), storeu, add, sub, mul,
//   fma(a, b, c) = a * b + c rounded once,
//   first(n): lanes [0, n) (n may be <= 0 or >= kLanes); load_m, store_m touch only those lanes,
//   fma_m(a, b, c, m): fma on m's lanes, c elsewhere,
//   hsum(v): lanes l and l + kLanes/2 added, then l and l + kLanes/4, ... down to one,
//   f16(h): kLanes f16 values decoded exactly as f16_to_f32 does (subnormals kept, exponent 31
//     finite),
//   q4: kQ4StepBytes of Q4G codes -> kQ4Vecs vectors; lane p of vector i holds input
//     q4_input(i, p) of the step, as the float code - 8,
//   q8: kQ8StepBytes of Q8G codes -> kQ8Vecs vectors in input order,
//   join8(a, b) (16 lanes only): 8 floats from a, then 8 from b; dup8(p) (16 lanes only): the 8
//     floats at p twice,
//   kDeltaVecs: vectors per column span in delta_rule (registers permitting),
//   kRegisters: the vector registers the compiler can allocate (sizes matmul's and vq_rows' tiles),
//   pin(v): v stays in a register (where an instruction set's multiply-add can take a memory
//     operand, GCC otherwise folds matmul's weight loads into every multiply-add of a tile:
//     one load per multiply-add instead of one per weight vector).
#pragma once

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "engine/kernels/kernels.h"

namespace waste {
namespace {

constexpr int kRowTile = 4;          // rows sharing each x load
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

// The exact decode of f16_to_f32 (exponent 31 stays finite, subnormals kept), local so that no
// shared inline function is compiled with this file's flags.
float f16_scalar(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023;
  if (exp == 0) {
    float v = (float)man * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  uint32_t b = sign | ((exp + 112) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

template <class V>
struct Body {
  using F = typename V::F;
  static constexpr int kLanes = V::kLanes;

  static void decode_scales(const uint16_t* h, int64_t n, float* out) {
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) V::storeu(out + i, V::f16(h + i));
    for (; i < n; i++) out[i] = f16_scalar(h[i]);
  }

  // --- Trunk rows (kernels.h matvec/matmul). Each instruction set fixes one order per output,
  // which matvec and matmul both follow, so a window gives decode's bits:
  //   F32: one vector accumulator over the row's kLanes-wide chunks in ascending order (the last
  //     one zero past the row's end), then hsum;
  //   Q8G/Q4G: per 128-group a partial dot, one vector accumulator over the group's decoded
  //     vectors in decode order, then total = fma(scale, partial, total); hsum(total) at the end.
  // One accumulator per output (not several interleaved chains) is what lets matmul's register
  // tiles hold many outputs; matvec gets its independent chains from the rows of its tile.
  //
  // Quantized codes: a decode step turns a run of code bytes into kVecs lane vectors of exact
  // integer-valued floats; x is rearranged once per call into a zero-padded "panel" in the order
  // the vectors come out, so the codes need only in-lane work.

  struct Q4 {
    static constexpr int kSteps = (int)(kQuantGroup / 2 / V::kQ4StepBytes), kVecs = V::kQ4Vecs;
    static constexpr int kStepInputs = 2 * V::kQ4StepBytes;
    static void decode(const uint8_t* p, int j, F* f) { V::q4(p + j * V::kQ4StepBytes, f); }
  };
  struct Q8 {
    static constexpr int kSteps = (int)(kQuantGroup / V::kQ8StepBytes), kVecs = V::kQ8Vecs;
    static void decode(const uint8_t* p, int j, F* f) { V::q8(p + j * V::kQ8StepBytes, f); }
  };
  static_assert(Q4::kVecs * kLanes == Q4::kStepInputs && Q8::kVecs * kLanes == V::kQ8StepBytes);
  static constexpr int kGroupVecs = (int)(kQuantGroup / kLanes);

  // Q4G needs x in decode order, Q8G in input order; both zero-padded to whole groups. Callers
  // split rows across threads, so this O(cols) step runs once per row range and must stay cheap.
  static void build_panel(const float* x, int64_t cols, int64_t padded, bool q4, float* panel) {
    if (!q4) {
      std::memcpy(panel, x, (size_t)cols * 4);
      for (int64_t c = cols; c < padded; c++) panel[c] = 0.0f;
      return;
    }
    constexpr int kStep = Q4::kStepInputs;
    int order[kStep];
    for (int i = 0; i < kStep; i++) order[i] = V::q4_input(i / kLanes, i % kLanes);
    int64_t c0 = 0;
    for (; c0 + kStep <= cols; c0 += kStep)
      for (int i = 0; i < kStep; i++) panel[c0 + i] = x[c0 + order[i]];
    for (; c0 < padded; c0 += kStep)
      for (int i = 0; i < kStep; i++)
        panel[c0 + i] = c0 + order[i] < cols ? x[c0 + order[i]] : 0.0f;
  }

  static int64_t padded_cols(const Matrix& w) { return w.groups() * kQuantGroup; }

  // Code pointers of NR rows at one group.
  template <int NR>
  struct Rows {
    const uint8_t* p[NR];
  };

  template <int NR>
  static Rows<NR> rows_at(const Matrix& w, int64_t r, int64_t g) {
    Rows<NR> c;
    int64_t group_bytes = w.row_bytes() / w.groups();
    for (int k = 0; k < NR; k++)
      c.p[k] = (const uint8_t*)w.data + (r + k) * w.row_bytes() + g * group_bytes;
    return c;
  }

  // The partial dots of NR rows at one group: each row's one accumulator takes the group's
  // vectors in decode order.
  template <int NR, class Codes>
  static inline __attribute__((always_inline)) void group_dots(const Rows<NR>& w, const float* xg,
                                                               F* part) {
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) part[k] = V::zero();
#pragma GCC unroll 8
    for (int j = 0; j < Codes::kSteps; j++) {
#pragma GCC unroll 8
      for (int k = 0; k < NR; k++) {
        F f[Codes::kVecs];
        Codes::decode(w.p[k], j, f);
#pragma GCC unroll 8
        for (int i = 0; i < Codes::kVecs; i++)
          part[k] = V::fma(f[i], V::load(xg + (j * Codes::kVecs + i) * kLanes), part[k]);
      }
    }
  }

  // Fetches the same group of the next row tile: the hardware prefetcher alone falls behind on
  // NR interleaved row streams (measured on AVX2: cold Q4G matvec 5.0 -> 6.7 GB/s). Prefetches
  // past the matrix end are harmless: they never fault.
  template <int NR>
  static void prefetch_next_tile(const Rows<NR>& c, int64_t tile_bytes, int64_t group_bytes) {
    for (const uint8_t* p : c.p)
      for (int64_t o = 0; o < group_bytes; o += 64) __builtin_prefetch(p + tile_bytes + o, 0, 3);
  }

  // Scales of NR rows for groups [g0, g0 + n).
  template <int NR>
  static void tile_scales(const Matrix& w, int64_t r, int64_t g0, int64_t n,
                          float (*sc)[kScaleChunk]) {
    for (int k = 0; k < NR; k++) decode_scales(w.scales + (r + k) * w.groups() + g0, n, sc[k]);
  }

  template <int NR, class Codes>
  static void quant_tile_matvec(const Matrix& w, const float* panel, float* y, int64_t r) {
    F acc[NR];
    for (int k = 0; k < NR; k++) acc[k] = V::zero();
    float sc[NR][kScaleChunk];
    for (int64_t g0 = 0; g0 < w.groups(); g0 += kScaleChunk) {
      int64_t ng = min64(kScaleChunk, w.groups() - g0);
      tile_scales<NR>(w, r, g0, ng, sc);
      for (int64_t g = 0; g < ng; g++) {
        Rows<NR> rows = rows_at<NR>(w, r, g0 + g);
        prefetch_next_tile(rows, NR * w.row_bytes(), w.row_bytes() / w.groups());
        F part[NR];
        group_dots<NR, Codes>(rows, panel + (g0 + g) * kQuantGroup, part);
#pragma GCC unroll 8
        for (int k = 0; k < NR; k++) acc[k] = V::fma(V::set1(sc[k][g]), part[k], acc[k]);
      }
    }
    for (int k = 0; k < NR; k++) y[r + k] = V::hsum(acc[k]);
  }

  // tile(NR, r) over rows [r0, r1): tiles of kRowTile rows, then the rest one by one (NR as a
  // std::integral_constant).
  template <class Fn>
  static void for_row_tiles(int64_t r0, int64_t r1, Fn&& tile) {
    int64_t r = r0;
    for (; r + kRowTile <= r1; r += kRowTile) tile(std::integral_constant<int, kRowTile>{}, r);
    for (; r < r1; r++) tile(std::integral_constant<int, 1>{}, r);
  }

  template <class Codes>
  static void quant_matvec(const Matrix& w, const float* panel, float* y, int64_t r0, int64_t r1) {
    for_row_tiles(r0, r1, [&](auto NR, int64_t r) {
      quant_tile_matvec<decltype(NR)::value, Codes>(w, panel, y, r);
    });
  }

  // --- A few tokens (a shared decode step; up to kFewTokens), Q8G and Q4G: each group of a row
  // tile is decoded once into L1 and applied to every token with group_dots' operations and
  // order, each token's running totals kept across the whole row. For so few tokens the blocked
  // loop further down costs more than it saves (measured on AVX-512: 4 tokens of a 4096 x 2304
  // Q8G matrix at 22% of the peak, against 40-48% here).

  static constexpr int kFewTokens = (int)kMatmulFewTokens;

  // One group of NR rows decoded into floats, row k's at out + k * row_stride, in decode order.
  template <int NR, class Codes>
  static void decode_group(const Rows<NR>& rows, float* out, int64_t row_stride) {
    for (int k = 0; k < NR; k++)
      for (int j = 0; j < Codes::kSteps; j++) {
        F f[Codes::kVecs];
        Codes::decode(rows.p[k], j, f);
        for (int i = 0; i < Codes::kVecs; i++)
          V::store(out + k * row_stride + (j * Codes::kVecs + i) * kLanes, f[i]);
      }
  }

  // group_dots for a group decoded earlier into w ([k][kQuantGroup]).
  template <int NR>
  static inline __attribute__((always_inline)) void decoded_dots(const float* w, const float* x,
                                                                 F* part) {
#pragma GCC unroll 8
    for (int k = 0; k < NR; k++) part[k] = V::zero();
#pragma GCC unroll 32
    for (int v = 0; v < kGroupVecs; v++) {
      const F xv = V::load(x + v * kLanes);
#pragma GCC unroll 8
      for (int k = 0; k < NR; k++)
        part[k] = V::fma(V::load(w + k * kQuantGroup + v * kLanes), xv, part[k]);
    }
  }

  // nt tokens (panels `stride` floats apart) through NR rows; outputs y[t*y_stride + r + k].
  // Kept out of line: inlined beside its other instantiation, GCC spills more.
  template <int NR, class Codes>
  static __attribute__((noinline)) void few_tokens_tile(const Matrix& w, const float* panels,
                                                        int64_t stride, int nt, float* y,
                                                        int64_t y_stride, int64_t r) {
    F acc[kFewTokens][NR];
    for (int t = 0; t < nt; t++)
      for (int k = 0; k < NR; k++) acc[t][k] = V::zero();
    alignas(64) float decoded[NR * kQuantGroup];
    float sc[NR][kScaleChunk];
    for (int64_t g0 = 0; g0 < w.groups(); g0 += kScaleChunk) {
      const int64_t ng = min64(kScaleChunk, w.groups() - g0);
      tile_scales<NR>(w, r, g0, ng, sc);
      for (int64_t g = 0; g < ng; g++) {
        decode_group<NR, Codes>(rows_at<NR>(w, r, g0 + g), decoded, kQuantGroup);
        const float* xg = panels + (g0 + g) * kQuantGroup;
        for (int t = 0; t < nt; t++) {
          F part[NR];
          decoded_dots<NR>(decoded, xg + t * stride, part);
#pragma GCC unroll 8
          for (int k = 0; k < NR; k++) acc[t][k] = V::fma(V::set1(sc[k][g]), part[k], acc[t][k]);
        }
      }
    }
    for (int t = 0; t < nt; t++)
      for (int k = 0; k < NR; k++) y[t * y_stride + r + k] = V::hsum(acc[t][k]);
  }

  template <class Codes>
  static void few_tokens_matmul(const Matrix& w, const float* x, int n, int64_t x_stride, float* y,
                                int64_t y_stride, int64_t r0, int64_t r1) {
    const int64_t stride = padded_cols(w);
    Scratch panels(stride * n);
    for (int t = 0; t < n; t++)
      build_panel(x + t * x_stride, w.cols, stride, std::is_same_v<Codes, Q4>,
                  panels.get() + t * stride);
    for_row_tiles(r0, r1, [&](auto NR, int64_t r) {
      few_tokens_tile<decltype(NR)::value, Codes>(w, panels.get(), stride, n, y, y_stride, r);
    });
  }

  template <int NR>
  static void f32_tile(const Matrix& w, const float* x, float* y, int64_t r) {
    const float* row[NR];
    F a[NR];
    for (int k = 0; k < NR; k++) {
      row[k] = (const float*)w.data + (r + k) * w.cols;
      a[k] = V::zero();
    }
    int64_t c = 0, n = w.cols;
    for (; c + kLanes <= n; c += kLanes) {
      const F xv = V::loadu(x + c);
#pragma GCC unroll 8
      for (int k = 0; k < NR; k++) a[k] = V::fma(V::loadu(row[k] + c), xv, a[k]);
    }
    if (c < n) {  // the zeros past the row's end take part, as in matmul's padded copies
      auto m = V::first(n - c);
      const F xv = V::load_m(x + c, m);
      for (int k = 0; k < NR; k++) a[k] = V::fma(V::load_m(row[k] + c, m), xv, a[k]);
    }
    for (int k = 0; k < NR; k++) y[r + k] = V::hsum(a[k]);
  }

  static void f32_matvec(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
    for_row_tiles(r0, r1, [&](auto NR, int64_t r) { f32_tile<decltype(NR)::value>(w, x, y, r); });
  }

  // --- matmul: blocks of rows x tokens, one loop for every format. A block of kBlockRows rows
  // and up to tokens_per_block() tokens walks the columns in spans of kSpanGroups groups: the
  // block's rows for a span are copied (F32) or decoded (Q8G, Q4G) once into floats, its tokens'
  // inputs were laid out once into panels, and register tiles of rows x tokens then load each
  // weight vector once for the tile's tokens and each input vector once for its rows. A tile
  // gives each output matvec's operations in matvec's order; outputs' accumulators (F32) or
  // running totals (quantized) wait in memory between spans.

  // Where a format's tile shapes come from: one accumulator per output in F32, a partial and a
  // total in Q8G/Q4G, beside a vector per tile row and one input. 32 registers: 4 x 6 and 4 x 3;
  // 16: 3 x 4 and 2 x 3.
  static constexpr bool kWide = V::kRegisters >= 32;
  static constexpr int kF32Rows = kWide ? 4 : 3, kF32Tokens = kWide ? 6 : 4;
  static constexpr int kQuantRows = kWide ? 4 : 2, kQuantTokens = 3;
  static constexpr int kBlockRows = (int)kMatmulBlockRows;
  static_assert(kLanes <= kMatmulMaxLanes && kQuantGroup == 128);
  static constexpr int64_t kSpanCols = kMatmulSpanCols, kSpanGroups = kSpanCols / kQuantGroup;
  static_assert(kSpanGroups * kQuantGroup == kSpanCols);
  // The weights stream from memory once per token block: few, large blocks (measured on AVX-512
  // at 12288 x 7168, F32: 48% of the peak with 48 tokens, 61% with 120).
  static constexpr int64_t kMaxTokens = kMatmulBlockTokens;
  static_assert(kMaxTokens % 12 == 0 && 12 % kF32Tokens == 0 && 12 % kQuantTokens == 0);

  // Tokens whose panels (`cols` floats each) fit in kMatmulPanelFloats: up to kMaxTokens, in
  // multiples of 12 (every tile's token count divides it) where at least 12 fit.
  static int64_t tokens_per_block(int64_t cols) {
    const int64_t tb = min64(kMaxTokens, kMatmulPanelFloats / (cols > 0 ? cols : 1));
    return tb >= 12 ? tb / 12 * 12 : tb > 0 ? tb : 1;
  }

  // One span of an R x T tile. Row k's span at w + k * kSpanCols, token t's at x + t * kSpanCols;
  // output (k, t) keeps its vector at state + (k * ts + t) * kLanes. F32 (scales null): `n`
  // vectors into the accumulators. Quantized: `n` groups, each a partial dot then
  // total = fma(scales[k * kSpanGroups + g], partial, total).
  template <int R, int T>
  static __attribute__((noinline)) void span_tile(const float* w, const float* scales,
                                                  const float* x, int64_t n, float* state,
                                                  int64_t ts) {
    F acc[R][T];
#pragma GCC unroll 4
    for (int k = 0; k < R; k++)
#pragma GCC unroll 6
      for (int t = 0; t < T; t++) acc[k][t] = V::load(state + (k * ts + t) * kLanes);
    if (!scales) {
      for (int64_t v = 0; v < n; v++) tile_fmas<R, T>(w + v * kLanes, x + v * kLanes, acc);
    } else {
      for (int64_t g = 0; g < n; g++) {
        F part[R][T];
#pragma GCC unroll 4
        for (int k = 0; k < R; k++)
#pragma GCC unroll 6
          for (int t = 0; t < T; t++) part[k][t] = V::zero();
        const int64_t c = g * kQuantGroup;
#pragma GCC unroll 2
        for (int v = 0; v < kGroupVecs; v++)
          tile_fmas<R, T>(w + c + v * kLanes, x + c + v * kLanes, part);
#pragma GCC unroll 4
        for (int k = 0; k < R; k++) {
          const F s = V::set1(scales[k * kSpanGroups + g]);
#pragma GCC unroll 6
          for (int t = 0; t < T; t++) acc[k][t] = V::fma(s, part[k][t], acc[k][t]);
        }
      }
    }
#pragma GCC unroll 4
    for (int k = 0; k < R; k++)
#pragma GCC unroll 6
      for (int t = 0; t < T; t++) V::store(state + (k * ts + t) * kLanes, acc[k][t]);
  }

  // One vector of R span rows times one vector of T tokens' spans.
  template <int R, int T>
  static inline __attribute__((always_inline)) void tile_fmas(const float* w, const float* x,
                                                              F (&acc)[R][T]) {
    F wv[R];
#pragma GCC unroll 4
    for (int k = 0; k < R; k++) {
      wv[k] = V::load(w + k * kSpanCols);
      V::pin(wv[k]);
    }
#pragma GCC unroll 6
    for (int t = 0; t < T; t++) {
      const F xv = V::load(x + t * kSpanCols);
#pragma GCC unroll 4
      for (int k = 0; k < R; k++) acc[k][t] = V::fma(wv[k], xv, acc[k][t]);
    }
  }

  // tile(R, T, k, t) for every tile of an nr x nt block (R and T as std::integral_constant):
  // whole TR x TT tiles, then leftover rows one by one; the tokens past whole tiles as one
  // narrower tile. Each token tile's inputs are shared by every row tile while they are in L1.
  template <int TR, int T, class Fn>
  static inline __attribute__((always_inline)) void row_tiles(int nr, int t, Fn& tile) {
    int k = 0;
    for (; k + TR <= nr; k += TR)
      tile(std::integral_constant<int, TR>{}, std::integral_constant<int, T>{}, k, t);
    for (; k < nr; k++)
      tile(std::integral_constant<int, 1>{}, std::integral_constant<int, T>{}, k, t);
  }
  // The last `left` (< T) tokens from t.
  template <int TR, int T, class Fn>
  static inline __attribute__((always_inline)) void token_tail(int nr, int t, int left, Fn& tile) {
    if constexpr (T > 1) {
      if (left == T - 1) return row_tiles<TR, T - 1>(nr, t, tile);
      token_tail<TR, T - 1>(nr, t, left, tile);
    }
  }
  template <int TR, int TT, class Fn>
  static inline __attribute__((always_inline)) void for_tiles(int nr, int nt, Fn&& tile) {
    int t = 0;
    for (; t + TT <= nt; t += TT) row_tiles<TR, TT>(nr, t, tile);
    token_tail<TR, TT>(nr, t, nt - t, tile);
  }

  // The nr block rows from r, columns of span `s`, as floats at span + k * kSpanCols (F32:
  // zero past the row's end; quantized: decoded, with their scales at scales + k * kSpanGroups).
  template <class Codes>
  static void fill_span(const Matrix& w, int64_t r, int nr, int64_t s, float* span, float* scales) {
    // Hoisted: each is a division or a switch, and a span of few tokens is short.
    const int64_t groups = w.groups(), row_bytes = w.row_bytes(), group_bytes = row_bytes / groups;
    const int64_t g0 = s * kSpanGroups, ng = min64(kSpanGroups, groups - g0);
    for (int k = 0; k < nr; k++) {
      float* out = span + k * kSpanCols;
      if constexpr (std::is_void_v<Codes>) {
        const int64_t c0 = g0 * kQuantGroup, n = min64(kSpanCols, w.cols - c0);
        std::memcpy(out, (const float*)w.data + (r + k) * w.cols + c0, (size_t)n * 4);
        for (int64_t c = n; c < (n + kLanes - 1) / kLanes * kLanes; c++) out[c] = 0.0f;
      } else {
        decode_scales(w.scales + (r + k) * groups + g0, ng, scales + k * kSpanGroups);
        const uint8_t* codes = (const uint8_t*)w.data + (r + k) * row_bytes + g0 * group_bytes;
        for (int64_t g = 0; g < ng; g++)
          decode_group<1, Codes>(Rows<1>{{codes + g * group_bytes}}, out + g * kQuantGroup, 0);
      }
    }
  }

  // Codes: Q4, Q8, or void for F32.
  template <class Codes>
  static void blocked_matmul(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
                             int64_t y_stride, int64_t r0, int64_t r1) {
    constexpr bool f32 = std::is_void_v<Codes>;
    constexpr int TR = f32 ? kF32Rows : kQuantRows, TT = f32 ? kF32Tokens : kQuantTokens;
    constexpr int BR = kBlockRows / TR * TR;  // rows of a block, whole tiles
    const int64_t padded = padded_cols(w), spans = (w.groups() + kSpanGroups - 1) / kSpanGroups;
    const int64_t tb = min64(n, tokens_per_block(spans * kSpanCols));
    const int64_t vecs = (w.cols + kLanes - 1) / kLanes;
    // Token t's inputs of span s at panels + (s * tb + t) * kSpanCols.
    Scratch panels(spans * tb * kSpanCols), row(spans * kSpanCols), state(kBlockRows * tb * kLanes);
    alignas(64) float span[kBlockRows * kSpanCols];
    alignas(64) float scales[kBlockRows * kSpanGroups];
    for (int64_t t0 = 0; t0 < n; t0 += tb) {
      const int nt = (int)min64(tb, n - t0);
      for (int t = 0; t < nt; t++) {
        build_panel(x + (t0 + t) * x_stride, w.cols, padded, std::is_same_v<Codes, Q4>, row.get());
        for (int64_t s = 0; s < spans; s++)
          std::memcpy(panels.get() + (s * tb + t) * kSpanCols, row.get() + s * kSpanCols,
                      (size_t)min64(kSpanCols, padded - s * kSpanCols) * 4);
      }
      for (int64_t r = r0; r < r1; r += BR) {
        const int nr = (int)min64(BR, r1 - r);
        for (int64_t i = 0; i < nr * tb * kLanes; i += kLanes) V::store(state.get() + i, V::zero());
        for (int64_t s = 0; s < spans; s++) {
          fill_span<Codes>(w, r, nr, s, span, scales);
          const int64_t len = f32 ? min64(kSpanCols / kLanes, vecs - s * kSpanCols / kLanes)
                                  : min64(kSpanGroups, w.groups() - s * kSpanGroups);
          for_tiles<TR, TT>(nr, nt, [&](auto R, auto T, int k, int t) {
            span_tile<decltype(R)::value, decltype(T)::value>(
                span + k * kSpanCols, f32 ? nullptr : scales + k * kSpanGroups,
                panels.get() + (s * tb + t) * kSpanCols, len, state.get() + (k * tb + t) * kLanes,
                tb);
          });
        }
        // A token's nr outputs in one store: each lands in another cache line, and stores of one
        // float each filled the store buffer (measured: 5-10% of a 4096x2304 window).
        for (int t = 0; t < nt; t++) {
          float out[kBlockRows];
          for (int k = 0; k < nr; k++)
            out[k] = V::hsum(V::load(state.get() + (k * tb + t) * kLanes));
          std::memcpy(y + (t0 + t) * y_stride + r, out, (size_t)nr * 4);
        }
      }
    }
  }

  // --- Entry points.

  static void matvec(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
    if (w.fmt == TensorFormat::kF32) return f32_matvec(w, x, y, r0, r1);
    bool q4 = w.fmt == TensorFormat::kQ4G;
    Scratch panel(padded_cols(w));
    build_panel(x, w.cols, padded_cols(w), q4, panel.get());
    if (q4) return quant_matvec<Q4>(w, panel.get(), y, r0, r1);
    quant_matvec<Q8>(w, panel.get(), y, r0, r1);
  }

  template <class Codes>
  static void quant_matmul(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
                           int64_t y_stride, int64_t r0, int64_t r1) {
    if (n <= kFewTokens)
      return few_tokens_matmul<Codes>(w, x, (int)n, x_stride, y, y_stride, r0, r1);
    blocked_matmul<Codes>(w, x, n, x_stride, y, y_stride, r0, r1);
  }

  static void matmul(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
                     int64_t y_stride, int64_t r0, int64_t r1) {
    if (n == 1) return matvec(w, x, y, r0, r1);  // the same bits (kernels.h), with no copies
    if (w.fmt == TensorFormat::kF32)
      return blocked_matmul<void>(w, x, n, x_stride, y, y_stride, r0, r1);
    if (w.fmt == TensorFormat::kQ4G)
      return quant_matmul<Q4>(w, x, n, x_stride, y, y_stride, r0, r1);
    quant_matmul<Q8>(w, x, n, x_stride, y, y_stride, r0, r1);
  }

  // --- VQ rows (kernels.h). A tile is kVqTileVecs weight vectors per position: kVqTileRows
  // rows of 8 weights, each vector holding kLanes of them (two rows on 16 lanes, half a row on
  // 4). A token's 8 inputs at a position meet every vector of the tile with one multiply-add,
  // so each lane is one of kernels.h's a[d]. Up to kVqTokens tokens, a tile's weights are summed
  // from the books as the positions go by; more tokens read them from a panel built once.

  static constexpr int kVqTileVecs = V::kRegisters >= 32 ? 4 : 3;
  static constexpr int kVqTileRows = kVqTileVecs * kLanes / kVqDim;
  // Accumulators for kVqTokens tokens, the tile's weights and the inputs fill the registers.
  static constexpr int kVqTokens = kLanes == 4 ? 5 : V::kRegisters >= 32 ? 6 : 4;
  static_assert(kVqTileRows * kVqDim == kVqTileVecs * kLanes);

  // Where a tile's weights come from: a panel of sums made once, or the books as the positions
  // go by. Row p's stage-s index at position v is at[off(p) + s], at = first + v * kVqRowBlock *
  // S, where off(p) = p * S when the tile lies within one 64-row block (known at compile time:
  // one base register) and off[p] otherwise.
  enum class Weights { kPanel, kBlock, kOffsets };

  template <int S>
  struct VqTile {
    const float* book[S];
    const uint8_t* first;  // row 0's indices at position 0
    int64_t off[kVqTileRows];
    const uint16_t* scales;  // from row 0
    int live;                // rows in the caller's range; the others repeat the last one
  };

  // A tile's indices at one position, whose runs start at `at`. Within one 64-row block the
  // tile's runs are one run of kVqTileRows * S bytes, read as 8-byte words: each index is then a
  // shift of a word (integer work) rather than a load of its own, which would compete with the
  // books' loads. Otherwise byte by byte.
  template <int S, Weights W>
  struct TileIndex {
    static constexpr int kBytes = kVqTileRows * S, kWords = (kBytes + 7) / 8;
    const uint8_t* at;
    const int64_t* off;
    uint64_t word[kWords];

    // Always inlined, as is everything a tile's position runs: the words must stay in
    // registers, and the shifts' counts constants.
    [[gnu::always_inline]] TileIndex(const VqTile<S>& t, const uint8_t* run) : at(run), off(t.off) {
      static_assert(std::endian::native == std::endian::little);
      if constexpr (W == Weights::kBlock) {
#pragma GCC unroll 8
        for (int i = 0; i < kWords; i++)
          word[i] = load_le(at + 8 * i, 8 * i + 8 <= kBytes ? 8 : kBytes - 8 * i);
      }
    }
    // n (1..8, known at compile time) bytes as a little-endian word, in loads of 4, 2 and 1
    // bytes: a short copy into the word would go through memory, and the word's 8-byte load
    // would then wait for the copy's narrower store (a failed store-to-load forwarding, on every
    // position).
    [[gnu::always_inline]] static uint64_t load_le(const uint8_t* p, int n) {
      uint64_t v = 0;
      int i = 0;
      if (n == 8) {
        std::memcpy(&v, p, 8);
        return v;
      }
      if (n - i >= 4) {
        uint32_t u;
        std::memcpy(&u, p + i, 4);
        v |= (uint64_t)u << (8 * i);
        i += 4;
      }
      if (n - i >= 2) {
        uint16_t u;
        std::memcpy(&u, p + i, 2);
        v |= (uint64_t)u << (8 * i);
        i += 2;
      }
      if (n - i >= 1) v |= (uint64_t)p[i] << (8 * i);
      return v;
    }
    [[gnu::always_inline]] size_t operator()(int p, int s) const {
      if constexpr (W == Weights::kBlock) {
        const int b = p * S + s;
        return (size_t)(word[b / 8] >> (8 * (b % 8))) & 0xff;
      }
      return at[off[p] + s];
    }
  };

  // Stage s's vector of the tile's row p at the position of `index`.
  template <int S, Weights W>
  [[gnu::always_inline]] static const float* book_vec(const VqTile<S>& t,
                                                      const TileIndex<S, W>& index, int p, int s) {
    return t.book[s] + index(p, s) * kVqDim;
  }

  // Vector j of the tile's weights at the position of `index`: the stage vectors summed left to
  // right.
  template <int S, Weights W>
  [[gnu::always_inline]] static F tile_weights(const VqTile<S>& t, const TileIndex<S, W>& index,
                                               int j) {
    F w[S];
#pragma GCC unroll 4
    for (int s = 0; s < S; s++) {
      if constexpr (kLanes == 4) {
        w[s] = V::loadu(book_vec(t, index, j / 2, s) + 4 * (j % 2));
      } else if constexpr (kLanes == 8) {
        w[s] = V::loadu(book_vec(t, index, j, s));
      } else {
        w[s] = V::join8(book_vec(t, index, 2 * j, s), book_vec(t, index, 2 * j + 1, s));
      }
    }
    F sum = w[0];
#pragma GCC unroll 4
    for (int s = 1; s < S; s++) sum = V::add(sum, w[s]);
    return sum;
  }

  // A row's eight lanes in kernels.h's tree (kernels_scalar.cpp has its own copy: see the top of
  // this file for why nothing here is shared).
  static float reduce8(const float* l) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  }

  // Lanes of x_t[8v..8v+8) matching vector j's weights.
  static F tile_inputs(const float* x8, int j) {
    if constexpr (kLanes == 4) return V::loadu(x8 + 4 * (j % 2));
    if constexpr (kLanes == 8) return V::loadu(x8);
    if constexpr (kLanes == 16) return V::dup8(x8);
  }

  // NT tokens through one tile, the weights from `panel` ([v][kVqTileVecs][kLanes]) or from the
  // books; with kKeep, the weights summed from the books also go into `panel` for the tokens
  // after these. (The sums are integer and load work, the tokens' multiply-adds floating-point
  // work: in one loop they overlap, where a pass of sums alone would leave the FMA units idle.)
  template <int S, int NT, Weights W, bool kKeep = false>
  static void vq_tile(const VqTile<S>& tile, float* panel, int64_t nv, const float* x,
                      int64_t x_stride, float* y, int64_t y_stride) {
    static_assert(!kKeep || W != Weights::kPanel);
    constexpr int J = kVqTileVecs;
    // Every loop over the tile is unrolled: an accumulator indexed at run time would live in
    // memory, stored on every position.
    F acc[J][NT];
#pragma GCC unroll 4
    for (int j = 0; j < J; j++)
#pragma GCC unroll 6
      for (int t = 0; t < NT; t++) acc[j][t] = V::zero();
    const uint8_t* at = tile.first;
    for (int64_t v = 0; v < nv; v++, at += kVqRowBlock * S) {
      F w[J];
      if constexpr (W == Weights::kPanel) {
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) w[j] = V::load(panel + (v * J + j) * kLanes);
      } else {
        const TileIndex<S, W> index(tile, at);
#pragma GCC unroll 4
        for (int j = 0; j < J; j++) {
          w[j] = tile_weights<S, W>(tile, index, j);
          if constexpr (kKeep) V::store(panel + (v * J + j) * kLanes, w[j]);
        }
      }
#pragma GCC unroll 6
      for (int t = 0; t < NT; t++) {
        const float* x8 = x + t * x_stride + v * kVqDim;
        if constexpr (kLanes == 4) {
          const F lo = tile_inputs(x8, 0), hi = tile_inputs(x8, 1);
#pragma GCC unroll 4
          for (int j = 0; j < J; j++) acc[j][t] = V::fma(w[j], j % 2 ? hi : lo, acc[j][t]);
        } else {
          const F xv = tile_inputs(x8, 0);
#pragma GCC unroll 4
          for (int j = 0; j < J; j++) acc[j][t] = V::fma(w[j], xv, acc[j][t]);
        }
      }
    }
#pragma GCC unroll 6
    for (int t = 0; t < NT; t++) {
      alignas(64) float a[J * kLanes];
#pragma GCC unroll 4
      for (int j = 0; j < J; j++) V::store(a + j * kLanes, acc[j][t]);
      for (int p = 0; p < tile.live; p++)
        y[t * y_stride + p] = f16_scalar(tile.scales[p]) * reduce8(a + p * kVqDim);
    }
  }

  // Tokens [t, n) through one tile, at most kVqTokens at a time.
  template <int S, Weights W, int NT = kVqTokens>
  static void vq_tile_tail(const VqTile<S>& tile, float* panel, int64_t nv, const float* x,
                           int64_t x_stride, int64_t n, int64_t t, float* y, int64_t y_stride) {
    for (; t + NT <= n; t += NT)
      vq_tile<S, NT, W>(tile, panel, nv, x + t * x_stride, x_stride, y + t * y_stride, y_stride);
    if constexpr (NT > 1)
      if (t < n) vq_tile_tail<S, W, NT - 1>(tile, panel, nv, x, x_stride, n, t, y, y_stride);
  }

  template <int S>
  static void vq_rows_s(const VqBooks& books, const float* x, int64_t n, int64_t x_stride,
                        const VqMatrix& m, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
    const bool panel = n > kVqTokens;
    Scratch scratch(panel ? m.nv * kVqTileVecs * kLanes : 0);
    VqTile<S> tile;
    for (int s = 0; s < S; s++) tile.book[s] = books.stage[s];
    auto index_run = [&](int64_t row) {
      return ((row / kVqRowBlock) * m.nv * kVqRowBlock + row % kVqRowBlock) * S;
    };
    for (int64_t r = r0; r < r1; r += kVqTileRows) {
      tile.live = (int)min64(kVqTileRows, r1 - r);
      tile.scales = m.scales + r;
      tile.first = m.idx + index_run(r);
      bool block = tile.live == kVqTileRows;
      for (int p = 0; p < kVqTileRows; p++) {
        tile.off[p] = index_run(r + (p < tile.live ? p : tile.live - 1)) - index_run(r);
        block = block && tile.off[p] == p * S;
      }
      float* yr = y + r;
      if (!panel && block) {
        vq_tile_tail<S, Weights::kBlock>(tile, nullptr, m.nv, x, x_stride, n, 0, yr, y_stride);
      } else if (!panel) {
        vq_tile_tail<S, Weights::kOffsets>(tile, nullptr, m.nv, x, x_stride, n, 0, yr, y_stride);
      } else {
        // The first kVqTokens tokens sum the weights and keep them; the rest read them.
        if (block) {
          vq_tile<S, kVqTokens, Weights::kBlock, true>(tile, scratch.get(), m.nv, x, x_stride, yr,
                                                       y_stride);
        } else {
          vq_tile<S, kVqTokens, Weights::kOffsets, true>(tile, scratch.get(), m.nv, x, x_stride, yr,
                                                         y_stride);
        }
        vq_tile_tail<S, Weights::kPanel>(tile, scratch.get(), m.nv, x, x_stride, n, kVqTokens, yr,
                                         y_stride);
      }
    }
  }

  static void vq_rows(const VqBooks& books, const float* x, int64_t n, int64_t x_stride,
                      const VqMatrix& m, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
    switch (books.stages) {
      case 1:
        return vq_rows_s<1>(books, x, n, x_stride, m, y, y_stride, r0, r1);
      case 2:
        return vq_rows_s<2>(books, x, n, x_stride, m, y, y_stride, r0, r1);
      case 3:
        return vq_rows_s<3>(books, x, n, x_stride, m, y, y_stride, r0, r1);
      case 4:
        return vq_rows_s<4>(books, x, n, x_stride, m, y, y_stride, r0, r1);
      default:  // the same bits: kernels.h fixes every operation
        return detail::scalar_kernels().vq_rows(books, x, n, x_stride, m, y, y_stride, r0, r1);
    }
  }

  // --- Attention: scores and weighted sums of cache rows, in the orders kernels.h defines.
  // A dot's 16 lanes are kDotVecs vectors; four keys at a time so the dependent adds of one key
  // overlap others'.

  static constexpr int kDotVecs = 16 / kLanes;
  static_assert(kDotVecs * kLanes == 16);

  // Lanes l and l + 8, then 4, 2 and 1 apart, as the scalar reference reduces its 16 lanes.
  static float reduce16(F* v) {
    for (int w = kDotVecs / 2; w > 0; w /= 2)
      for (int i = 0; i < w; i++) v[i] = V::add(v[i], v[i + w]);
    return V::hsum(v[0]);
  }

  template <int NK>
  static void dots_group(const float* q, const float* k, int64_t stride, int64_t len, float scale,
                         float* out) {
    F acc[NK][kDotVecs];
    for (int i = 0; i < NK; i++)
      for (int u = 0; u < kDotVecs; u++) acc[i][u] = V::zero();
    int64_t j = 0;
    for (; j + 16 <= len; j += 16) {
#pragma GCC unroll 4
      for (int u = 0; u < kDotVecs; u++) {
        F qv = V::loadu(q + j + u * kLanes);
#pragma GCC unroll 4
        for (int i = 0; i < NK; i++)
          acc[i][u] = V::fma(qv, V::loadu(k + i * stride + j + u * kLanes), acc[i][u]);
      }
    }
    if (j < len) {  // masked-off lanes keep their sums
      for (int u = 0; u < kDotVecs; u++) {
        auto m = V::first(len - j - u * kLanes);
        F qv = V::load_m(q + j + u * kLanes, m);
        for (int i = 0; i < NK; i++)
          acc[i][u] = V::fma_m(qv, V::load_m(k + i * stride + j + u * kLanes, m), acc[i][u], m);
      }
    }
    for (int i = 0; i < NK; i++) out[i] = reduce16(acc[i]) * scale;
  }

  static void dots(const float* q, const float* keys, int64_t n, int64_t stride, int64_t len,
                   float scale, float* out) {
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) dots_group<4>(q, keys + s * stride, stride, len, scale, out + s);
    for (; s < n; s++) dots_group<1>(q, keys + s * stride, stride, len, scale, out + s);
  }

  // Eight vectors of `out` stay in registers while every row adds into them.
  static void axpys(const float* a, const float* rows, int64_t n, int64_t stride, int64_t len,
                    float* out) {
    constexpr int64_t kSpan = 8 * kLanes;
    for (int64_t j0 = 0; j0 < len; j0 += kSpan) {
      decltype(V::first(0)) m[8];
      F o[8];
      for (int v = 0; v < 8; v++) {
        m[v] = V::first(len - j0 - v * kLanes);
        o[v] = V::load_m(out + j0 + v * kLanes, m[v]);
      }
      for (int64_t s = 0; s < n; s++) {
        const F as = V::set1(a[s]);
        const float* r = rows + s * stride + j0;
        for (int v = 0; v < 8; v++) o[v] = V::fma(as, V::load_m(r + v * kLanes, m[v]), o[v]);
      }
      for (int v = 0; v < 8; v++) V::store_m(out + j0 + v * kLanes, m[v], o[v]);
    }
  }

  // Columns in spans of kDeltaVecs vectors: a span's p and o stay in registers through both
  // passes.
  static void delta_rule(float* S, const float* q, const float* k, const float* v,
                         const float* decay, float beta, int64_t d, float* o) {
    constexpr int kVecs = V::kDeltaVecs;
    constexpr int64_t kSpan = kVecs * kLanes;
    for (int64_t j0 = 0; j0 < d; j0 += kSpan) {
      decltype(V::first(0)) m[kVecs];
      F p[kVecs], acc[kVecs];
      for (int u = 0; u < kVecs; u++) {
        m[u] = V::first(d - j0 - u * kLanes);
        p[u] = acc[u] = V::zero();
      }
      for (int64_t i = 0; i < d; i++) {
        const F di = V::set1(decay[i]), ki = V::set1(k[i]);
        float* row = S + i * d + j0;
        for (int u = 0; u < kVecs; u++) {
          const F s = V::mul(V::load_m(row + u * kLanes, m[u]), di);
          V::store_m(row + u * kLanes, m[u], s);
          p[u] = V::fma(s, ki, p[u]);
        }
      }
      const F b = V::set1(beta);
      for (int u = 0; u < kVecs; u++)
        p[u] = V::mul(b, V::sub(V::load_m(v + j0 + u * kLanes, m[u]), p[u]));
      for (int64_t i = 0; i < d; i++) {
        const F ki = V::set1(k[i]), qi = V::set1(q[i]);
        float* row = S + i * d + j0;
        for (int u = 0; u < kVecs; u++) {
          const F s = V::fma(ki, p[u], V::load_m(row + u * kLanes, m[u]));
          V::store_m(row + u * kLanes, m[u], s);
          acc[u] = V::fma(s, qi, acc[u]);
        }
      }
      for (int u = 0; u < kVecs; u++) V::store_m(o + j0 + u * kLanes, m[u], acc[u]);
    }
  }

  static constexpr Kernels table(Isa isa) {
    return Kernels{isa, matvec, matmul, vq_rows, dots, axpys, delta_rule};
  }
};

}  // namespace
}  // namespace waste
