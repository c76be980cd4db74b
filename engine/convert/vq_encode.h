// Residual VQ encoding of routed experts (docs/CONVERTER.md §3, our recipe in §3.8): per-row amax
// scales, 8-dim vectors along the input axis, per (layer, kind) codebooks trained by seeded
// k-means stage by stage, greedy residual assignment, indices in 64-row blocks.
//
// Determinism: every decision is made by one distance formula evaluated in one fixed order,
// d(x, c) = fma(-2x7, c7, ... fma(-2x0, c0, |c|^2)), argmin with ties to the lowest index. The
// scalar, AVX2 and AVX-512 search kernels all compute exactly this per (vector, entry) and merge
// their partial minima by (distance, index), so output bytes do not depend on the instruction
// set, the thread count or the order in which work finishes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/base/rng.h"
#include "engine/kernels/kernels.h"

namespace waste {

class ThreadPool;
struct TileOps;

struct VqRecipe {
  int stages = 3;
  int entries = 256;
  int iters = 10;                  // Lloyd iterations per stage
  int sample_experts = 12;         // evenly spaced experts the books are trained on
  int64_t train_vectors = 300000;  // spread over the sample experts
  uint64_t seed = 0;
};

// One kind's books: stages x entries x 8 values (entry-major), already rounded to f16 with
// subnormals flushed, i.e. exactly what the engine reconstructs with; plus |c|^2 per entry.
struct KindBooks {
  int stages = 0, entries = 0;
  std::vector<float> values;
  std::vector<float> norms;
  const float* book(int s) const { return values.data() + (size_t)s * entries * kVqDim; }
  const float* norm(int s) const { return norms.data() + (size_t)s * entries; }
};

// The integer screen of the VNNI kernels (detail::screen_step derives it): the book rounded to
// 8 bits, qc = rint(c / step), and what the error bound needs to know about it.
// `ok` is false when the book cannot be screened (non-finite or out-of-range values, all zero,
// more than 256 entries); the kernels then run the exact float search.
struct QuantBook {
  const int8_t* neg;    // -qc: padded/16 blocks of [16 entries][dims 0-3] then [16][dims 4-7]
  const int32_t* bias;  // padded: 128 * sum_d qc_d, undoing vpdpbusd's unsigned x offset
  double step;          // Dc
  double round_err;     // max |c_d - qc_d * step| over entries and dims
  double l1_max;        // max over entries of sum_d |qc_d| * step
  double abs_max;       // max |c_d|
  double norm_max;      // max |c|^2 as stored (the float norms below)
  bool ok;
};

// One stage's book as the search kernels read it. Dimension-major ([d][padded]) so 8 or 16
// consecutive entries fill one register and each lane runs the fma chain of one entry. Entries
// are padded to a multiple of 16 with zero values and +inf norms: a padded entry's distance is
// +inf or NaN, which never wins a strict `<` against the +inf start. Kernels get a plain view:
// the ISA-specific files instantiate no inline library code that the linker could share with
// portable code.
struct SearchView {
  const float* t;      // kVqDim x padded
  const float* rows;   // entries x kVqDim, the entry-major copy (AVX2 broadcasts from it)
  const float* norms;  // padded
  int entries, padded;
  QuantBook q;
};
struct SearchBook {
  int entries = 0, padded = 0;
  std::vector<float> t, rows, norms;
  std::vector<int8_t> neg;
  std::vector<int32_t> bias;
  QuantBook q{};
  SearchView view() const;
};
SearchBook search_book(const float* book, const float* norms, int entries);

// Nearest entry for 8 vectors at a time. `xs` holds n_groups groups of 8 vectors stored
// dimension-major ([group][d][lane]); idx gets n_groups*8 indices.
using NearestFn = void (*)(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx);
// The best kernel `isa` allows on this CPU. Each CPU family's file decides (vq_select_x86.cpp:
// with kAvx512 the AVX-512 VNNI screen where the CPU has it, else AVX-512, with kAvx2 AVX-VNNI's
// screen, else AVX2; vq_select_arm64.cpp: NEON), and every kernel returns nearest_scalar's
// indices.
NearestFn nearest_kernel(Isa isa);
// Every search kernel this build holds that this CPU can run, scalar first, by the names
// WASTE_VQ_KERNEL takes in the encode bench; the tests hold each one to the scalar answer.
struct NearestKernel {
  const char* name;
  NearestFn fn;
};
std::vector<NearestKernel> nearest_kernels();
namespace detail {
// The reference every other kernel must reproduce (vq_encode.cpp).
void nearest_scalar(const SearchView&, const float*, int64_t, uint8_t*);

// The screen's constants for one batch of vectors whose largest |x_d| is `x_max` (portable
// code shared by both VNNI kernels; the derivation is at its definition). A vector is quantized
// as qx_d = rint(x_d * inv_step); entry c's integer score is s_c = rint(|c|^2 * inv_unit) -
// sum_d qx_d qc_d. The float argmin's score is at most min_c s_c + ceil(slack_a + slack_b *
// ||x||_1) + 1, ||x||_1 summed in float. `ok` is false when the batch must take the exact search.
struct ScreenStep {
  float inv_step;
  double inv_unit, slack_a, slack_b;
  bool ok;
};
ScreenStep screen_step(const QuantBook& q, float x_max);
}  // namespace detail

// A sub-seed for (seed, a, b, c): splitmix-style mixing, stable across versions.
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

// Row scale (amax, at least 1e-8) and the normalized rows x = w / scale, in f32.
void normalize_rows(const float* w, int64_t rows, int64_t cols, float* x, float* scale);

// `count` distinct vector ids of [0, n) by a partial Fisher-Yates shuffle with `rng`.
std::vector<uint32_t> sample_ids(uint64_t n, uint64_t count, Rng& rng);

// Trains the books of one kind on `x` (n x 8 normalized vectors, consumed as the residual).
// Throws FormatError when n < entries (`what` names the layer and kind).
KindBooks train_books(std::vector<float> x, const VqRecipe& r, uint64_t seed, Isa isa,
                      ThreadPool* pool, const char* what);

// The books' f16 bits as codebooks.bin stores them (stage s: entries x 8).
std::vector<uint16_t> books_f16(const KindBooks& b);

struct EncodeError {
  double err2 = 0, ref2 = 0;  // sum (w - w_hat)^2 and sum w^2
  double relative() const { return ref2 > 0 ? __builtin_sqrt(err2 / ref2) : 0; }
};

// Encodes a rows x cols matrix: idx gets the blocked indices (ceil(rows/64)*64 * cols/8 *
// stages bytes; rows past `rows` are left as they are, zero in a fresh record), scales the f16
// row scales. Returns the reconstruction error against w with the f16 scales. `tile` does the
// work around the search (vq_tile.h; tile_ops picks it).
EncodeError encode_matrix(const float* w, int64_t rows, int64_t cols, const KindBooks& b,
                          NearestFn nearest, const TileOps& tile, uint8_t* idx, uint16_t* scales);

}  // namespace waste
