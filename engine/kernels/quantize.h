// Writers of the trunk formats (docs/FORMAT.md §3 recipes): per group of 128 inputs,
// amax = max|x| (at least 1e-8); Q8G scale amax/127, codes in [-127, 127]; Q4G scale amax/7,
// codes in [-8, 7] stored biased by 8, low nibble first. Scales are f16.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/kernels/matrix.h"

namespace waste {

// Appends the quantized payload of a rows x cols row-major matrix to `payload` and its f16 scales
// to `scales`. F32 appends the raw floats to `payload`.
void quantize_matrix(TensorFormat fmt, const float* w, int64_t rows, int64_t cols,
                     std::vector<uint8_t>* payload, std::vector<uint8_t>* scales);

}  // namespace waste
