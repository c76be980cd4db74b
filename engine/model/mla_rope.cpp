#include "engine/model/mla_rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace waste {

namespace {

// The pair index at which a wave of `rotations` turns over the original context length.
double correction_dim(double rotations, int dim, const MlaRope& r) {
  return dim * std::log(r.original_max / (rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(r.theta));
}

}  // namespace

MlaRotation mla_rotation(const ModelConfig& c) {
  MlaRotation m;
  const MlaRope& r = c.rope;
  const int dim = c.qk_rope, half = dim / 2;
  if (!r.on || c.n_mla_layers() == 0 || half == 0) return m;
  m.inv_freq.resize(half);
  for (int j = 0; j < half; j++)
    m.inv_freq[j] = (float)(1.0 / std::pow(r.theta, (double)(2 * j) / dim));
  if (r.factor <= 1.0) return m;
  // YaRN: fast-turning pairs keep their frequency, slow ones are divided by the factor, and a
  // linear ramp between the two correction dimensions blends them.
  double low = std::max(0.0, std::floor(correction_dim(r.beta_fast, dim, r)));
  double high = std::min((double)(dim - 1), std::ceil(correction_dim(r.beta_slow, dim, r)));
  if (low == high) high += 0.001;  // the release's guard against a zero-width ramp
  for (int j = 0; j < half; j++) {
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    const double keep = m.inv_freq[j];
    m.inv_freq[j] = (float)(keep / r.factor * ramp + keep * (1.0 - ramp));
  }
  if (r.mscale_all_dim != 0.0) {
    const double ms = 0.1 * r.mscale_all_dim * std::log(r.factor) + 1.0;
    m.att_mul = (float)(ms * ms);
  }
  return m;
}

void MlaRotation::angles(int64_t pos, float* cs, float* sn) const {
  for (size_t j = 0; j < inv_freq.size(); j++) {
    const float a = (float)pos * inv_freq[j];
    cs[j] = std::cos(a);
    sn[j] = std::sin(a);
  }
}

void MlaRotation::rotate(const float* cs, const float* sn, float* x) const {
  for (size_t j = 0; j < inv_freq.size(); j++) {
    const float e = x[2 * j], o = x[2 * j + 1];
    x[2 * j] = e * cs[j] - o * sn[j];
    x[2 * j + 1] = e * sn[j] + o * cs[j];
  }
}

}  // namespace waste
