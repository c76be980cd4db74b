// The integer-screened nearest-entry search (issue 9), written once over a vector-traits type V
// that each instruction-set file supplies and instantiates (vq_encode_avx512vnni.cpp,
// vq_encode_avxvnni.cpp). The exact kernels spend 8 float fmas on every (vector, entry); the
// screen first scores every entry with exact 8-bit integer products, then runs the exact float
// chain only on the entries whose score lies within a proven bound of the best one
// (detail::screen_step derives it; about 2.2 per vector on trained books). Those candidates are
// evaluated as nearest_scalar does and the first minimum in ascending order is taken, so the
// index is the scalar one, bit for bit, whatever V is.
//
// Per call, every 8 groups (64 vectors) share one x step: qx_d = rint(x_d * inv_step), stored as
// qx_d + 128 because the x86 dot product's first operand is unsigned; the book holds -qc_d, and
// bias_c (128 sum_d qc_d) removes the offset again. A batch the bound cannot cover (NaN or
// infinite x, all zero, extreme magnitudes) takes V's exact search instead.
//
// What V provides (static members):
//   I, kLanes             an int32 vector of kLanes lanes (a multiple of 8 dividing 16)
//   kPerPass              vectors scored together (registers: 2 lo/hi + 1 min per vector)
//   set1, load, load_book, dot, min, store, hmin
//                         the int32 operations of score(); dot(acc, u, q) adds the 4-byte dot
//                         products of unsigned bytes u and signed bytes q to acc
//   abs_max, fill_init, quantize_group
//                         a chunk's max |x|, its integer score offsets, a group's offset bytes
//                         and slacks (see their x86 versions in vq_screen_x86.h)
//   exact                 the float search a batch the bound cannot cover takes
//   decide                each pass's indices from its scores and thresholds
// Everything here has internal linkage: each instruction-set file compiles its own copy with its
// own flags, and no inline function of one can be linked into the other.
#pragma once

#include <cstdint>

#include "engine/convert/vq_encode.h"

namespace waste::detail {

namespace {

constexpr int kScreenChunkGroups = 8;  // groups per x step (encode_matrix's call size)
constexpr int kScreenChunkVectors = kScreenChunkGroups * 8;
constexpr int32_t kPadScore = 1 << 30;  // above every threshold (screen_step's ranges)

// One x step's data: what the scores start from and each vector's quantized bytes and slack.
struct ScreenBatch {
  alignas(64) int32_t init[256];                              // rint(|c|^2 / U) + bias_c
  uint32_t lo[kScreenChunkVectors], hi[kScreenChunkVectors];  // bytes qx_d + 128, dims 0-3, 4-7
  int32_t slack[kScreenChunkVectors];
};

// Integer scores of V::kPerPass vectors (from v0) against every entry, and each one's smallest.
// A 16-entry block of the book is [dims 0-3 of entries 0-15][dims 4-7 of entries 0-15].
template <class V>
inline void screen_score(const SearchView& b, const ScreenBatch& bt, int v0, int32_t (*s)[256],
                         int32_t* smin) {
  using I = typename V::I;
  I lo[V::kPerPass], hi[V::kPerPass], mn[V::kPerPass];
#pragma GCC unroll 8
  for (int i = 0; i < V::kPerPass; i++) {
    lo[i] = V::set1((int32_t)bt.lo[v0 + i]);
    hi[i] = V::set1((int32_t)bt.hi[v0 + i]);
    mn[i] = V::set1(kPadScore);
  }
  const int8_t* q = b.q.neg;
  for (int c = 0; c < b.padded; c += V::kLanes) {
    const int8_t* blk = q + c / 16 * 128 + c % 16 * 4;
    const I init = V::load(bt.init + c);
    const I q03 = V::load_book(blk), q47 = V::load_book(blk + 64);
#pragma GCC unroll 8
    for (int i = 0; i < V::kPerPass; i++) {
      const I a = V::dot(V::dot(init, lo[i], q03), hi[i], q47);
      mn[i] = V::min(mn[i], a);
      V::store(s[i] + c, a);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < V::kPerPass; i++) smin[i] = V::hmin(mn[i]);
}

// Up to 8 groups sharing one x step.
template <class V>
void screen_chunk(const SearchView& b, const float* xs, int64_t groups, uint8_t* idx) {
  static_assert(kScreenChunkVectors % V::kPerPass == 0 && 16 % V::kLanes == 0);
  const ScreenStep st = screen_step(b.q, V::abs_max(xs, groups * 64));
  if (!st.ok) return V::exact(b, xs, groups, idx);
  ScreenBatch bt;
  V::fill_init(b, st.inv_unit, bt.init);
  for (int c = b.entries; c < b.padded; c++) bt.init[c] = kPadScore;
  for (int64_t g = 0; g < groups; g++)
    V::quantize_group(xs + g * 64, st, bt.lo + g * 8, bt.hi + g * 8, bt.slack + g * 8);
  // Scores past the padded book: never within a threshold, for a decide that reads all 256.
  alignas(64) int32_t s[V::kPerPass][256];
  for (int i = 0; i < V::kPerPass; i++)
    for (int c = b.padded; c < 256; c++) s[i][c] = kPadScore;
  int32_t smin[V::kPerPass], thr[V::kPerPass];
  for (int v = 0; v < groups * 8; v += V::kPerPass) {
    screen_score<V>(b, bt, v, s, smin);
    for (int i = 0; i < V::kPerPass; i++) thr[i] = smin[i] + bt.slack[v + i];
    V::decide(b, s, thr, xs, v, idx);
  }
}

// The whole search: n_groups groups of 8 vectors (dimension-major), 8 groups per x step.
template <class V>
void nearest_screened(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  for (int64_t g = 0; g < n_groups; g += kScreenChunkGroups) {
    int64_t n = n_groups - g < kScreenChunkGroups ? n_groups - g : kScreenChunkGroups;
    screen_chunk<V>(b, xs + g * 64, n, idx + g * 8);
  }
}

}  // namespace

}  // namespace waste::detail
