// Multi-head latent attention with kv_b_proj absorbed (docs/MODEL.md §5): the cache holds one
// normalized 512-wide latent plus the 64 shared key channels per position, nothing per head.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/model.h"

namespace waste {

namespace {

struct MlaDims {
  int64_t heads, nope, rope, v, kv_lora, latent;  // latent = kv_lora + rope
};

// q~ = W_kb(h)^T q_nope for T tokens ([T][heads][nope + rope] in, [T][kv_lora] out): each row
// of W_kb is dequantized once for all of them; every token's sums run over i ascending, as one
// token's would.
void absorbed_queries(const MlaDims& d, const Matrix& kv_b, const float* q, int64_t T, int64_t h,
                      float* kb_row, float* qt) {
  const int64_t rows_per_head = d.nope + d.v, qd = d.nope + d.rope;
  std::fill(qt, qt + T * d.kv_lora, 0.0f);
  for (int64_t i = 0; i < d.nope; i++) {
    dequantize_row(kv_b, h * rows_per_head + i, kb_row);
    for (int64_t t = 0; t < T; t++) {
      const float qi = q[(t * d.heads + h) * qd + i];
      float* row = qt + t * d.kv_lora;
      for (int64_t j = 0; j < d.kv_lora; j++) row[j] += qi * kb_row[j];
    }
  }
}

// One head at one position, its absorbed query `qt` given: scores over the cache's first
// `n_pos` positions, softmax, value projection.
void mla_head(const MlaDims& d, const Matrix& kv_b, const Kernels& k, const float* qt,
              const float* q, const float* cache, int64_t n_pos, int64_t h, float* vb_out,
              float* o) {
  const int64_t rows_per_head = d.nope + d.v;
  std::vector<float> scores(n_pos), ctx(d.kv_lora, 0.0f);
  const float* q_rope = q + d.nope;
  float scale = 1.0f / std::sqrt((float)(d.nope + d.rope));
  float best = -INFINITY;
  for (int64_t s = 0; s < n_pos; s++) {
    const float* c = cache + s * d.latent;
    float dot = 0.0f, dot_rope = 0.0f;
    for (int64_t j = 0; j < d.kv_lora; j++) dot += qt[j] * c[j];
    for (int64_t j = 0; j < d.rope; j++) dot_rope += q_rope[j] * c[d.kv_lora + j];
    scores[s] = (dot + dot_rope) * scale;
    best = std::max(best, scores[s]);
  }
  float sum = 0.0f;
  for (float& sc : scores) sum += (sc = std::exp(sc - best));
  for (int64_t s = 0; s < n_pos; s++) {
    float a = scores[s] / sum;
    const float* c = cache + s * d.latent;
    for (int64_t j = 0; j < d.kv_lora; j++) ctx[j] += a * c[j];
  }
  int64_t r0 = h * rows_per_head + d.nope;
  k.matvec(kv_b, ctx.data(), vb_out, r0, r0 + d.v);  // o_h = W_vb(h) c~
  std::copy(vb_out + r0, vb_out + r0 + d.v, o);
}

}  // namespace

void Model::mla(int layer, Session& s, int64_t T, const float* u, float* out) {
  const ModelConfig& c = config();
  const MlaWeights& w = w_.layers[layer].mla_w;
  const MlaDims d{c.n_heads, c.qk_nope, c.qk_rope, c.v_head, c.kv_lora, c.kv_lora + c.qk_rope};
  const int64_t qd = d.nope + d.rope;
  std::vector<float> q(T * d.heads * qd), ckv(T * d.latent), o(T * d.heads * d.v);
  if (c.q_lora > 0) {
    std::vector<float> qa(T * c.q_lora);
    cp_.linear(w.q_a, u, T, qa.data());
    for (int64_t t = 0; t < T; t++)
      rmsnorm(qa.data() + t * c.q_lora, w.q_a_norm, c.q_lora, c.rms_eps, qa.data() + t * c.q_lora);
    cp_.linear(w.q_b, qa.data(), T, q.data());
  } else {
    cp_.linear(w.q, u, T, q.data());
  }
  cp_.linear(w.kv_a, u, T, ckv.data());
  // Every position of the chunk joins the cache first; token t still attends to the positions
  // up to its own.
  std::vector<float>& cache = s.mla[layer].latents;
  const int64_t before = (int64_t)cache.size() / d.latent;
  for (int64_t t = 0; t < T; t++) {
    float* ct = ckv.data() + t * d.latent;
    rmsnorm(ct, w.kv_a_norm, d.kv_lora, c.rms_eps, ct);
    cache.insert(cache.end(), ct, ct + d.latent);
  }
  pool_->parallel_for(d.heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> kb_row(d.kv_lora), vb_out(w.kv_b.rows), qt(T * d.kv_lora);
    for (int64_t h = h0; h < h1; h++) {
      absorbed_queries(d, w.kv_b, q.data(), T, h, kb_row.data(), qt.data());
      for (int64_t t = 0; t < T; t++)
        mla_head(d, w.kv_b, *cp_.k, qt.data() + t * d.kv_lora, q.data() + (t * d.heads + h) * qd,
                 cache.data(), before + t + 1, h, vb_out.data(),
                 o.data() + (t * d.heads + h) * d.v);
    }
  });
  if (c.mla_output_gate) {
    std::vector<float> g(T * d.heads * d.v);
    cp_.linear(w.g, u, T, g.data());
    for (size_t i = 0; i < o.size(); i++) o[i] *= sigmoid(g[i]);
  }
  cp_.linear(w.o, o.data(), T, out);
}

}  // namespace waste
