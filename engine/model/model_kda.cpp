// Kimi Delta Attention, one token at a time per head (docs/MODEL.md §4). Projections run batched
// over the chunk; the recurrence walks the tokens in order.
#include <cmath>
#include <vector>

#include "engine/model/model.h"

namespace waste {

namespace {

// Short causal depthwise conv over the ring of previous inputs, then SiLU; advances the ring.
void short_conv(const float* z, const float* w, float* ring, int64_t C, int K, float* out) {
  for (int64_t c = 0; c < C; c++) {
    float* r = ring + c * (K - 1);
    const float* wc = w + c * K;
    float y = 0.0f;
    for (int j = 0; j < K - 1; j++) y += r[j] * wc[j];
    y += z[c] * wc[K - 1];
    for (int j = 0; j + 1 < K - 1; j++) r[j] = r[j + 1];
    if (K > 1) r[K - 2] = z[c];
    out[c] = silu(y);
  }
}

void l2_normalize(float* x, int64_t n, float scale) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  float inv = scale / std::sqrt(ss + 1e-12f);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

// One head's delta-rule update: decay first, then the delta against the decayed state.
void delta_step(float* S, const float* q, const float* k, const float* v, const float* g,
                float beta, int64_t D, float* o) {
  std::vector<float> pred(D, 0.0f);
  for (int64_t i = 0; i < D; i++) {
    float decay = std::exp(g[i]);
    float* row = S + i * D;
    for (int64_t j = 0; j < D; j++) {
      row[j] *= decay;
      pred[j] += row[j] * k[i];
    }
  }
  for (int64_t j = 0; j < D; j++) pred[j] = beta * (v[j] - pred[j]);
  std::fill(o, o + D, 0.0f);
  for (int64_t i = 0; i < D; i++) {
    float* row = S + i * D;
    for (int64_t j = 0; j < D; j++) {
      row[j] += k[i] * pred[j];
      o[j] += row[j] * q[i];
    }
  }
}

}  // namespace

void Model::kda(int layer, Session& s, int64_t T, const float* u, float* out) {
  const ModelConfig& c = config();
  const KdaWeights& w = w_.layers[layer].kda_w;
  const int64_t C = c.kda_channels(), D = c.kda_dim, H = c.kda_heads;
  const int K = c.conv_k;
  std::vector<float> qkv[3], f(T * D), gate(T * C), beta(T * H), og(T * C), o(T * C);
  const Matrix* proj[3] = {&w.q, &w.k, &w.v};
  for (int i = 0; i < 3; i++) {
    qkv[i].resize(T * C);
    cp_.linear(*proj[i], u, T, qkv[i].data());
  }
  cp_.linear(w.f_a, u, T, f.data());
  cp_.linear(w.f_b, f.data(), T, gate.data());
  cp_.linear(w.b, u, T, beta.data());
  if (c.kda_full_rank_gate) {
    cp_.linear(w.g, u, T, og.data());
  } else {
    cp_.linear(w.g_a, u, T, f.data());
    cp_.linear(w.g_b, f.data(), T, og.data());
  }
  KdaState& st = s.kda[layer];
  std::vector<float> conv_out[3];
  for (auto& v : conv_out) v.resize(C);
  for (int64_t t = 0; t < T; t++) {
    for (int i = 0; i < 3; i++)
      short_conv(qkv[i].data() + t * C, w.conv[i], st.conv.data() + i * C * (K - 1), C, K,
                 conv_out[i].data());
    float* g = gate.data() + t * C;
    for (int64_t ch = 0; ch < C; ch++) {
      float a = std::exp(w.A_log[ch / D]);
      float z = g[ch] + w.dt_bias[ch];
      g[ch] = c.gate_lower_bound < 0 ? c.gate_lower_bound * sigmoid(a * z) : -a * softplus(z);
    }
    pool_->parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
      for (int64_t h = h0; h < h1; h++) {
        float* qh = conv_out[0].data() + h * D;
        float* kh = conv_out[1].data() + h * D;
        l2_normalize(qh, D, 1.0f / std::sqrt((float)D));
        l2_normalize(kh, D, 1.0f);
        float* oh = o.data() + t * C + h * D;
        delta_step(st.S.data() + h * D * D, qh, kh, conv_out[2].data() + h * D, g + h * D,
                   sigmoid(beta[t * H + h]), D, oh);
        rmsnorm(oh, w.o_norm, D, c.rms_eps, oh);
        for (int64_t j = 0; j < D; j++) oh[j] *= sigmoid(og[t * C + h * D + j]);
      }
    });
  }
  cp_.linear(w.o, o.data(), T, out);
}

}  // namespace waste
