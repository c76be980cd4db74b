#include "engine/kernels/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/base/f16.h"

namespace waste {

namespace {

void put_f16(std::vector<uint8_t>* out, float v) {
  uint16_t h = f32_to_f16(v);
  out->push_back((uint8_t)(h & 0xff));
  out->push_back((uint8_t)(h >> 8));
}

// One row: codes for every group, padded with zero codes to whole groups.
void quantize_row(TensorFormat fmt, const float* x, int64_t cols, std::vector<uint8_t>* payload,
                  std::vector<uint8_t>* scales) {
  const bool q8 = fmt == TensorFormat::kQ8G;
  const float qmax = q8 ? 127.0f : 7.0f, qmin = q8 ? -127.0f : -8.0f;
  int64_t groups = (cols + kQuantGroup - 1) / kQuantGroup;
  std::vector<int> codes((size_t)(groups * kQuantGroup), 0);
  for (int64_t g = 0; g < groups; g++) {
    int64_t a = g * kQuantGroup, b = std::min(cols, a + kQuantGroup);
    float amax = 1e-8f;
    for (int64_t i = a; i < b; i++) amax = std::max(amax, std::fabs(x[i]));
    float scale = amax / qmax;
    put_f16(scales, scale);
    for (int64_t i = a; i < b; i++)
      codes[(size_t)i] = (int)std::clamp(std::nearbyint(x[i] / scale), qmin, qmax);
  }
  if (q8) {
    for (int c : codes) payload->push_back((uint8_t)(int8_t)c);
  } else {
    for (size_t i = 0; i < codes.size(); i += 2)
      payload->push_back((uint8_t)(((codes[i] + 8) & 15) | (((codes[i + 1] + 8) & 15) << 4)));
  }
}

}  // namespace

void quantize_matrix(TensorFormat fmt, const float* w, int64_t rows, int64_t cols,
                     std::vector<uint8_t>* payload, std::vector<uint8_t>* scales) {
  if (fmt == TensorFormat::kF32) {
    size_t n = (size_t)(rows * cols) * 4;
    size_t at = payload->size();
    payload->resize(at + n);
    std::memcpy(payload->data() + at, w, n);
    return;
  }
  for (int64_t r = 0; r < rows; r++) quantize_row(fmt, w + r * cols, cols, payload, scales);
}

}  // namespace waste
