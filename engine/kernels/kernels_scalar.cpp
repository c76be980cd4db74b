// The scalar reference kernels: plain loops in the order docs/FORMAT.md §8.2 and §8.4 describe.
// The SIMD tables are tested against these, and these against a double-precision dot.
#include <cmath>
#include <vector>

#include "engine/base/f16.h"
#include "engine/kernels/kernels.h"

namespace waste {

namespace {

// Inputs that group g of a row covers (the last group may be partial).
int64_t group_len(const Matrix& w, int64_t g) {
  int64_t n = w.cols - g * kQuantGroup;
  return n < kQuantGroup ? n : kQuantGroup;
}

// The integer codes of group g of row r as floats (exact), ready for the partial dot.
void decode_group(const Matrix& w, int64_t r, int64_t g, float* out) {
  const uint8_t* row = (const uint8_t*)w.data + r * w.row_bytes();
  int64_t n = group_len(w, g), c0 = g * kQuantGroup;
  if (w.fmt == TensorFormat::kQ8G) {
    for (int64_t i = 0; i < n; i++) out[i] = (float)(int8_t)row[c0 + i];
    return;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t c = c0 + i;
    int code = c & 1 ? row[c >> 1] >> 4 : row[c >> 1] & 15;
    out[i] = (float)(code - 8);
  }
}

float dot(const float* w, const float* x, int64_t n) {
  float p = 0.0f;
  for (int64_t i = 0; i < n; i++) p += w[i] * x[i];
  return p;
}

float f32_row(const Matrix& w, int64_t r, const float* x) {
  return dot((const float*)w.data + r * w.cols, x, w.cols);
}

float group_scale(const Matrix& w, int64_t r, int64_t g) {
  return f16_to_f32(w.scales[r * w.groups() + g]);
}

void matvec(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1) {
  if (w.fmt == TensorFormat::kF32) {
    for (int64_t r = r0; r < r1; r++) y[r] = f32_row(w, r, x);
    return;
  }
  float wg[kQuantGroup];
  for (int64_t r = r0; r < r1; r++) {
    float acc = 0.0f;
    for (int64_t g = 0; g < w.groups(); g++) {
      decode_group(w, r, g, wg);
      acc += group_scale(w, r, g) * dot(wg, x + g * kQuantGroup, group_len(w, g));
    }
    y[r] = acc;
  }
}

// Decodes each group once and applies it to every token with matvec's arithmetic, so token t's
// output is bit-identical to matvec on token t.
void matmul(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
            int64_t y_stride, int64_t r0, int64_t r1) {
  if (w.fmt == TensorFormat::kF32) {
    for (int64_t r = r0; r < r1; r++)
      for (int64_t t = 0; t < n; t++) y[t * y_stride + r] = f32_row(w, r, x + t * x_stride);
    return;
  }
  float wg[kQuantGroup];
  std::vector<float> acc(n);
  for (int64_t r = r0; r < r1; r++) {
    for (float& a : acc) a = 0.0f;
    for (int64_t g = 0; g < w.groups(); g++) {
      decode_group(w, r, g, wg);
      float s = group_scale(w, r, g);
      const float* xg = x + g * kQuantGroup;
      for (int64_t t = 0; t < n; t++) acc[t] += s * dot(wg, xg + t * x_stride, group_len(w, g));
    }
    for (int64_t t = 0; t < n; t++) y[t * y_stride + r] = acc[t];
  }
}

// The eight lanes of a VQ row's accumulator, reduced in kernels.h's tree.
float reduce8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

void vq_rows(const VqBooks& books, const float* x, int64_t n, int64_t x_stride, const VqMatrix& m,
             float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  const int stages = books.stages;
  for (int64_t t = 0; t < n; t++) {
    const float* xt = x + t * x_stride;
    for (int64_t r = r0; r < r1; r++) {
      const uint8_t* run = m.idx + (r / kVqRowBlock) * m.nv * kVqRowBlock * stages;
      run += (r % kVqRowBlock) * stages;
      float a[kVqDim] = {};
      for (int64_t v = 0; v < m.nv; v++) {
        const uint8_t* i = run + v * kVqRowBlock * stages;
        for (int d = 0; d < kVqDim; d++) {
          float w = books.stage[0][i[0] * kVqDim + d];
          for (int s = 1; s < stages; s++) w += books.stage[s][i[s] * kVqDim + d];
          a[d] = std::fma(w, xt[v * kVqDim + d], a[d]);
        }
      }
      y[t * y_stride + r] = f16_to_f32(m.scales[r]) * reduce8(a);
    }
  }
}

float dot16(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) lane[l] = std::fma(a[i + l], b[i + l], lane[l]);
  for (int l = 0; i < n; i++, l++) lane[l] = std::fma(a[i], b[i], lane[l]);
  for (int w = 8; w > 0; w /= 2)
    for (int l = 0; l < w; l++) lane[l] += lane[l + w];
  return lane[0];
}

void dots(const float* q, const float* keys, int64_t n, int64_t stride, int64_t len, float scale,
          float* out) {
  for (int64_t s = 0; s < n; s++) out[s] = dot16(q, keys + s * stride, len) * scale;
}

void axpys(const float* a, const float* rows, int64_t n, int64_t stride, int64_t len, float* out) {
  for (int64_t s = 0; s < n; s++)
    for (int64_t j = 0; j < len; j++) out[j] = std::fma(a[s], rows[s * stride + j], out[j]);
}

void delta_rule(float* S, const float* q, const float* k, const float* v, const float* decay,
                float beta, int64_t d, float* o) {
  std::vector<float> p(d, 0.0f);
  for (int64_t i = 0; i < d; i++) {
    float* row = S + i * d;
    for (int64_t j = 0; j < d; j++) {
      row[j] *= decay[i];
      p[j] = std::fma(row[j], k[i], p[j]);
    }
  }
  for (int64_t j = 0; j < d; j++) p[j] = beta * (v[j] - p[j]);
  std::fill(o, o + d, 0.0f);
  for (int64_t i = 0; i < d; i++) {
    float* row = S + i * d;
    for (int64_t j = 0; j < d; j++) {
      row[j] = std::fma(k[i], p[j], row[j]);
      o[j] = std::fma(row[j], q[i], o[j]);
    }
  }
}

}  // namespace

namespace detail {

const Kernels& scalar_kernels() {
  static constexpr Kernels k{Isa::kScalar, matvec, matmul, vq_rows, dots, axpys, delta_rule};
  return k;
}

}  // namespace detail

}  // namespace waste
