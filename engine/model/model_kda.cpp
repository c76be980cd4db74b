// Kimi Delta Attention (docs/MODEL.md §4). Projections, the short convolutions and the gates run
// batched over the window; each head's recurrence walks the tokens in order.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/model.h"

namespace waste {

namespace {

// Short causal depthwise conv, then SiLU, on channels [c0, c1) of z ([T][C]) in place; each
// channel's ring of previous inputs advances one token at a time.
void short_conv(float* z, int64_t T, int64_t C, const float* w, float* ring, int K, int64_t c0,
                int64_t c1) {
  for (int64_t t = 0; t < T; t++) {
    float* zt = z + t * C;
    for (int64_t c = c0; c < c1; c++) {
      float* r = ring + c * (K - 1);
      const float* wc = w + c * K;
      float y = 0.0f;
      for (int j = 0; j < K - 1; j++) y += r[j] * wc[j];
      y += zt[c] * wc[K - 1];
      for (int j = 0; j + 1 < K - 1; j++) r[j] = r[j + 1];
      if (K > 1) r[K - 2] = zt[c];
      zt[c] = silu(y);
    }
  }
}

void l2_normalize(float* x, int64_t n, float scale) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
  float inv = scale / std::sqrt(ss + 1e-12f);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
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
  // Everything but the recurrence is per channel or per element: it runs for the whole window
  // at once. Each head's recurrence then walks the window's tokens in order on its own state.
  pool_->parallel_for(3 * C, 64, [&](int64_t b, int64_t e) {
    for (int64_t i = b / C; i <= (e - 1) / C; i++)
      short_conv(qkv[i].data(), T, C, w.conv[i], st.conv.data() + i * C * (K - 1), K,
                 std::max(b, i * C) - i * C, std::min(e, (i + 1) * C) - i * C);
  });
  std::vector<float> a(H);  // exp(A_log), one per head
  for (int64_t h = 0; h < H; h++) a[h] = std::exp(w.A_log[h]);
  pool_->parallel_for(T * C, 4096, [&](int64_t b, int64_t e) {
    for (int64_t at = b; at < e; at++) {
      const int64_t ch = at % C;
      const float z = gate[at] + w.dt_bias[ch];
      gate[at] = c.gate_lower_bound < 0 ? c.gate_lower_bound * sigmoid(a[ch / D] * z)
                                        : -a[ch / D] * softplus(z);
    }
  });
  pool_->parallel_for(H, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> decay(D);
    for (int64_t h = h0; h < h1; h++)
      for (int64_t t = 0; t < T; t++) {
        const int64_t at = t * C + h * D;
        float *qh = qkv[0].data() + at, *kh = qkv[1].data() + at, *oh = o.data() + at;
        l2_normalize(qh, D, 1.0f / std::sqrt((float)D));
        l2_normalize(kh, D, 1.0f);
        for (int64_t i = 0; i < D; i++) decay[i] = std::exp(gate[at + i]);
        cp_.k->delta_rule(st.S.data() + h * D * D, qh, kh, qkv[2].data() + at, decay.data(),
                          sigmoid(beta[t * H + h]), D, oh);
        rmsnorm(oh, w.o_norm, D, c.rms_eps, oh);
        for (int64_t j = 0; j < D; j++) oh[j] *= sigmoid(og[at + j]);
      }
  });
  cp_.linear(w.o, o.data(), T, out);
}

}  // namespace waste
