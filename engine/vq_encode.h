// Residual VQ encoding of routed experts (converter doc §3, our recipe in §3.8): per-row amax
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

#include "engine/kernels.h"
#include "engine/rng.h"

namespace waste {

class ThreadPool;

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
};
struct SearchBook {
  int entries = 0, padded = 0;
  std::vector<float> t, rows, norms;
  SearchView view() const { return {t.data(), rows.data(), norms.data(), entries, padded}; }
};
SearchBook search_book(const float* book, const float* norms, int entries);

// Nearest entry for 8 vectors at a time. `xs` holds n_groups groups of 8 vectors stored
// dimension-major ([group][d][lane]); idx gets n_groups*8 indices.
using NearestFn = void (*)(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx);
// The best kernel `isa` allows on this CPU (kAvx512 falls back to AVX2, then scalar).
NearestFn nearest_kernel(Isa isa);
namespace detail {
void nearest_scalar(const SearchView&, const float*, int64_t, uint8_t*);
void nearest_avx2(const SearchView&, const float*, int64_t, uint8_t*);
void nearest_avx512(const SearchView&, const float*, int64_t, uint8_t*);
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
// row scales. Returns the reconstruction error against w with the f16 scales.
EncodeError encode_matrix(const float* w, int64_t rows, int64_t cols, const KindBooks& b,
                          NearestFn nearest, uint8_t* idx, uint16_t* scales);

}  // namespace waste
