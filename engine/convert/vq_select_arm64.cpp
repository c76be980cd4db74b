// The converter's kernels on arm64: the portable search and tile work, whatever the Isa. They
// give the bytes every x86 variant gives (the search is nearest_scalar itself; the tile work is
// the reference the x86 one is held to), so a container converted here is the one converted
// there. Compiled only for arm64 (vq_select_x86.cpp is the x86-64 counterpart).
#include <vector>

#include "engine/convert/vq_encode.h"
#include "engine/convert/vq_tile.h"

namespace waste {

NearestFn nearest_kernel(Isa) {
  return detail::nearest_scalar;
}

std::vector<NearestKernel> nearest_kernels() {
  return {{"scalar", detail::nearest_scalar}};
}

TileOps tile_ops(Isa) {
  return detail::tile_ops_portable();
}

std::vector<NamedTileOps> tile_ops_variants() {
  return {{"portable", detail::tile_ops_portable()}};
}

}  // namespace waste
