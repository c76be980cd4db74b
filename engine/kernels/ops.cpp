#include "engine/kernels/ops.h"

#include <cstring>
#include <vector>

#include "engine/base/f16.h"
#include "engine/base/stopwatch.h"

namespace waste {

void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  float inv = 1.0f / std::sqrt(ss / (float)n + eps);
  for (int64_t i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

void dequantize_row(const Matrix& w, int64_t r, float* out) {
  if (w.fmt == TensorFormat::kF32) {
    std::memcpy(out, static_cast<const float*>(w.data) + r * w.cols, (size_t)w.cols * 4);
    return;
  }
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes();
  const uint16_t* sc = w.scales + r * w.groups();
  for (int64_t i = 0; i < w.cols; i++) {
    int q = w.fmt == TensorFormat::kQ8G ? (int)(int8_t)row[i]
                                        : (int)((row[i / 2] >> (4 * (i & 1))) & 15) - 8;
    out[i] = (float)q * f16_to_f32(sc[i / kQuantGroup]);
  }
}

void Compute::linear(const Matrix& w, const float* x, int64_t n, float* y) const {
  linear_rows(w, 0, w.rows, x, n, y, w.rows);
}

void Compute::linear_rows(const Matrix& w, int64_t r0, int64_t r1, const float* x, int64_t n,
                          float* y, int64_t y_stride) const {
  const SteadyClock::time_point t0 = SteadyClock::now();
  pool->parallel_for(r1 - r0, 64, [&](int64_t b, int64_t e) {
    if (n == 1)
      k->matvec(w, x, y, r0 + b, r0 + e);
    else
      k->matmul(w, x, n, w.cols, y, y_stride, r0 + b, r0 + e);
  });
  if (clock) clock->trunk += seconds_since(t0);
}

}  // namespace waste
