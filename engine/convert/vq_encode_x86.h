// The converter's x86-64 kernels: each is defined in the file named for its instruction set and
// compiled for it alone (vq_encode_avx2.cpp, vq_encode_avx512.cpp, vq_encode_avx512vnni.cpp,
// vq_encode_avxvnni.cpp, vq_tile_avx2.cpp), and only vq_select_x86.cpp, which checks the CPU
// first, calls them. Every search kernel returns nearest_scalar's indices bit for bit and the
// tile work the portable results.
#pragma once

#include <cstdint>

#include "engine/convert/vq_encode.h"
#include "engine/convert/vq_tile.h"

namespace waste::detail {

void nearest_avx2(const SearchView&, const float*, int64_t, uint8_t*);
void nearest_avx512(const SearchView&, const float*, int64_t, uint8_t*);
// The integer screens (vq_screen.h): AVX-512 F/BW/VL/DQ + VNNI + VBMI2, and AVX2 + AVX-VNNI.
void nearest_vnni(const SearchView&, const float*, int64_t, uint8_t*);
void nearest_avxvnni(const SearchView&, const float*, int64_t, uint8_t*);

TileOps tile_ops_avx2();

}  // namespace waste::detail
