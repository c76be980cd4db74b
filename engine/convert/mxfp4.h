// MXFP4 as K3 ships its routed experts (docs/CONVERTER.md §2.2): per row, two E2M1 codes per byte
// (low nibble = even element) and one E8M0 scale byte 2^(e-127) per 32 elements. Decoding is
// exact in f32. As the original converter does, e = 0 decodes as scale 0; e = 255 (NaN in the
// OCP spec) is refused.
#pragma once

#include <cstdint>
#include <string>

namespace waste {

constexpr int kMxfp4Group = 32;

// The 16 E2M1 values, sign in bit 3.
extern const float kE2m1Values[16];

// Decodes `cols` values (a multiple of 32) of one row. `what` names the tensor in the error.
void mxfp4_decode_row(const uint8_t* packed, const uint8_t* scales, int64_t cols, float* out,
                      const std::string& what, int64_t row);

// Encodes one row as the release's quantizer does: per group, e = ceil(log2(amax / 6)) + 127 and
// codes rounded to the nearest E2M1 value. For synthetic checkpoints in tests and benchmarks.
void mxfp4_encode_row(const float* x, int64_t cols, uint8_t* packed, uint8_t* scales);

}  // namespace waste
