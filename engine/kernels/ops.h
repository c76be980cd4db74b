// The small numeric primitives of the model math (docs/MODEL.md §2), in single precision with
// sums accumulated in a fixed order, plus the threaded matrix products the layers use.
#pragma once

#include <cmath>
#include <cstdint>

#include "engine/base/thread_pool.h"
#include "engine/kernels/kernels.h"

namespace waste {

inline float sigmoid(float z) {
  return 1.0f / (1.0f + std::exp(-z));
}
inline float silu(float a) {
  return a / (1.0f + std::exp(-a));
}
inline float softplus(float z) {
  return z > 20.0f ? z : std::log1p(std::exp(z));
}

// out = x * w / sqrt(mean(x^2) + eps); out may alias x.
void rmsnorm(const float* x, const float* w, int64_t n, float eps, float* out);

// The gated activation of an FFN: SiLU(g) * u, or K3's SiTU (docs/MODEL.md §2).
struct Activation {
  bool situ = false;
  float beta = 1.0f;
  float linear_beta = 0.0f;
  float operator()(float g, float u) const {
    if (!situ) return silu(g) * u;
    float gate = beta * std::tanh(g / beta) * sigmoid(g);
    float up = linear_beta > 0 ? linear_beta * std::tanh(u / linear_beta) : u;
    return gate * up;
  }
};

// Row r of a trunk matrix as f32.
void dequantize_row(const Matrix& w, int64_t r, float* out);

// Wall seconds spent in the matrix kernels, by kind: the batched kernels' own share of a
// prefill, which `waste eval` reports beside the total (docs/PERFORMANCE.md's compute floor).
struct KernelClock {
  double trunk = 0;    // Compute::linear: projections, dense and shared FFNs, routers, lm_head
  double experts = 0;  // routed experts applied to their tokens, tables included
};

// Everything a layer needs to run its products: the kernels, the pool and the clock.
struct Compute {
  const Kernels* k = nullptr;
  ThreadPool* pool = nullptr;
  KernelClock* clock = nullptr;  // not null: linear's time is added to clock->trunk

  // y[t][r] = w[r] . x[t] for t < n; x is [n][w.cols], y is [n][w.rows]. Bit-identical for any
  // n and thread count (rows are split across threads; tokens never are).
  void linear(const Matrix& w, const float* x, int64_t n, float* y) const;
  // Rows [r0, r1) only, written at their own index: y[t*y_stride + r].
  void linear_rows(const Matrix& w, int64_t r0, int64_t r1, const float* x, int64_t n, float* y,
                   int64_t y_stride) const;
};

}  // namespace waste
