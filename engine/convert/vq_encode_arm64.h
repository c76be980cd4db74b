// The converter's arm64 kernels: each is defined in the file named for its instruction set
// (vq_encode_neon.cpp), and only vq_select_arm64.cpp calls them. Every search kernel returns
// nearest_scalar's indices bit for bit.
#pragma once

#include <cstdint>

#include "engine/convert/vq_encode.h"

namespace waste::detail {

void nearest_neon(const SearchView&, const float*, int64_t, uint8_t*);

}  // namespace waste::detail
