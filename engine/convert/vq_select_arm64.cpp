// The converter's kernels on arm64: the NEON search unless the run asked for scalar (NEON is
// part of every arm64 CPU), and the portable tile work. Both give the bytes every x86 variant
// gives (the search returns nearest_scalar's indices; the tile work is the reference the x86 one
// is held to), so a container converted here is the one converted there. Compiled only for arm64
// (vq_select_x86.cpp is the x86-64 counterpart).
#include <vector>

#include "engine/convert/vq_encode_arm64.h"
#include "engine/convert/vq_tile.h"

namespace waste {

NearestFn nearest_kernel(Isa isa) {
  return isa == Isa::kScalar ? detail::nearest_scalar : detail::nearest_neon;
}

std::vector<NearestKernel> nearest_kernels() {
  return {{"scalar", detail::nearest_scalar}, {"neon", detail::nearest_neon}};
}

TileOps tile_ops(Isa) {
  return detail::tile_ops_portable();
}

std::vector<NamedTileOps> tile_ops_variants() {
  return {{"portable", detail::tile_ops_portable()}};
}

}  // namespace waste
