// encode_matrix's work around the search, one tile at a time: the 64 rows of one vector
// position in groups of 8, dimension-major ([group][d][lane]), the layout of the search kernels
// and of an index block. The instruction-set versions perform the portable ones' float and double
// operations element by element in the same order, so every result is the same bit for bit
// (tests compare them); tile_ops picks the fastest the instruction set and CPU allow.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/convert/vq_encode.h"

namespace waste {

constexpr int64_t kTileFloats = kVqRowBlock * kVqDim;

// The reconstruction error so far, one running sum per dimension so the additions do not wait
// on each other; total() adds the eight in a fixed order.
struct TileError {
  double err2[kVqDim] = {}, ref2[kVqDim] = {};
  EncodeError total() const;
};

struct TileOps {
  // res = rows 0..n-1 of w (row stride cols, 8 values each) divided by their amax, as a tile;
  // rows past n zero. The quotients are normalize_rows' (one correctly rounded division).
  void (*load)(const float* w, int64_t cols, int64_t n, const float* amax, float* res);
  // Each row's chosen entry ids[row] subtracted from res and added to sum. Rows past the matrix
  // are updated too: their indices are never stored, and no kernel lets one vector's values
  // change another's index.
  void (*apply)(const SearchView& sv, const uint8_t* ids, float* res, float* sum);
  // For rows 0..n-1 in order, in double: err2[d] += (w - s16 * sum)^2, ref2[d] += w^2, where w
  // is the row's 8 weights (row stride cols) and s16 its f16 scale.
  void (*add_error)(const float* w, int64_t cols, int64_t n, const float* s16, const float* sum,
                    TileError* te);
};

// The fastest tile work `isa` allows on this CPU (vq_select_x86.cpp: AVX2 where the CPU has it;
// vq_select_arm64.cpp), else the portable one.
TileOps tile_ops(Isa isa);
// Every tile work this build holds that this CPU can run, the portable one first; the tests
// hold each one to the portable results.
struct NamedTileOps {
  const char* name;
  TileOps ops;
};
std::vector<NamedTileOps> tile_ops_variants();

namespace detail {
TileOps tile_ops_portable();
}  // namespace detail

}  // namespace waste
