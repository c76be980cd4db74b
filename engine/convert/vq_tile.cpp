#include "engine/convert/vq_tile.h"

#include <algorithm>

#include "engine/kernels/kernels.h"

namespace waste {

namespace {

constexpr int kLanes = 8;
constexpr int64_t kGroupFloats = kLanes * kVqDim;

void load(const float* w, int64_t cols, int64_t n, const float* amax, float* res) {
  std::fill(res, res + kTileFloats, 0.0f);
  for (int64_t i = 0; i < n; i++) {
    float* r = res + (i / kLanes) * kGroupFloats + i % kLanes;
#pragma GCC unroll 8
    for (int d = 0; d < kVqDim; d++) r[d * kLanes] = w[i * cols + d] / amax[i];
  }
}

// Read from the dimension-major book, each (row, d) element gets the single float operation an
// entry-major row at a time would give it; the order across elements does not matter.
void apply(const SearchView& sv, const uint8_t* ids, float* res, float* sum) {
  for (int64_t g = 0; g < kVqRowBlock / kLanes; g++)
    for (int d = 0; d < kVqDim; d++) {
      const float* td = sv.t + (size_t)d * sv.padded;
      float* r = res + g * kGroupFloats + d * kLanes;
      float* a = sum + g * kGroupFloats + d * kLanes;
#pragma GCC unroll 8
      for (int l = 0; l < kLanes; l++) {
        float c = td[ids[g * kLanes + l]];
        r[l] -= c;
        a[l] += c;
      }
    }
}

void add_error(const float* w, int64_t cols, int64_t n, const float* s16, const float* sum,
               TileError* te) {
  for (int64_t i = 0; i < n; i++) {
    const float* a = sum + (i / kLanes) * kGroupFloats + i % kLanes;
#pragma GCC unroll 8
    for (int d = 0; d < kVqDim; d++) {
      double ref = w[i * cols + d];
      double got = (double)s16[i] * (double)a[d * kLanes];
      te->err2[d] += (ref - got) * (ref - got);
      te->ref2[d] += ref * ref;
    }
  }
}

}  // namespace

EncodeError TileError::total() const {
  EncodeError e;
  for (int d = 0; d < kVqDim; d++) {
    e.err2 += err2[d];
    e.ref2 += ref2[d];
  }
  return e;
}

namespace detail {
TileOps tile_ops_portable() {
  return {load, apply, add_error};
}
}  // namespace detail

TileOps tile_ops(Isa isa) {
  // vq_tile_avx2.cpp is compiled for x86_64 targets alone (cmake/waste_library.cmake).
#if defined(__x86_64__)
  if (isa != Isa::kScalar && cpu_supports(Isa::kAvx2)) return detail::tile_ops_avx2();
#endif
  return detail::tile_ops_portable();
}

}  // namespace waste
