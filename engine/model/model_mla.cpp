// Multi-head latent attention with kv_b_proj absorbed (docs/MODEL.md §5): the cache holds one
// normalized 512-wide latent plus the 64 shared key channels per position, nothing per head. On
// the DeepSeek-V3 architecture those key channels, and q's, are rotated to their position (§5.0).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/model/model.h"

namespace waste {

namespace {

struct MlaDims {
  int64_t heads, nope, rope, v, kv_lora, latent;  // latent = kv_lora + rope
  float scale;                                    // on the scores
};

// Floats per block of the score and context passes: a block of cached latents (36 KiB; 16
// positions of K3's 576 floats) stays in L1 while every (query, head) row of a work unit uses it,
// so the cache streams from memory once per unit of up to 64 rows rather than once per row
// (measured on AVX-512 at 32K positions of K2's shape: 16 positions beat 8, 32 and 64). Narrow
// latents get longer blocks, so that each kernel call still has work to amortize it.
constexpr int64_t kBlockFloats = 9216;

int64_t block_positions(const MlaDims& d) {
  return std::max<int64_t>(16, kBlockFloats / d.latent / 16 * 16);
}

// Per head, the query in latent space: [q~ = W_kb(h)^T q_nope, q_rope], [T][heads][latent]
// out. W_kb(h) is dequantized once for all T tokens into kb ([nope][kv_lora]); each token's sums
// run over i ascending (axpys), as one token's would.
void absorbed_queries(const MlaDims& d, const Kernels& k, const Matrix& kv_b, const float* q,
                      int64_t T, int64_t h, float* kb, float* qt) {
  const int64_t rows_per_head = d.nope + d.v, qd = d.nope + d.rope;
  for (int64_t i = 0; i < d.nope; i++)
    dequantize_row(kv_b, h * rows_per_head + i, kb + i * d.kv_lora);
  for (int64_t t = 0; t < T; t++) {
    float* row = qt + (t * d.heads + h) * d.latent;
    const float* qh = q + (t * d.heads + h) * qd;
    std::fill(row, row + d.kv_lora, 0.0f);
    k.axpys(qh, kb, d.nope, d.kv_lora, d.kv_lora, row);
    std::copy(qh + d.nope, qh + qd, row + d.kv_lora);
  }
}

// One unit of attention work: queries [t0, t1) of the piece (its first at position `before`)
// and heads [h0, h1). Query t scores the cache's first before + t + 1 positions (causal), then
// softmax, then the attended latent c~ = sum_s a_s c_s (s ascending). Each block of positions
// is walked once per pass and serves every (query, head) row of the unit while it sits in L1.
struct Unit {
  int64_t before, t0, t1, h0, h1;
  int64_t positions(int64_t t) const { return before + t + 1; }
};

// Every row's operations are a decode token's own, in the same order: dots and axpys give each
// position's result whatever block it arrives in (kernels.h), the softmax runs over a row alone,
// and each ctx element sums over s ascending however the blocks split it. So a window's bits are
// decode's. qt is the piece's [T][heads][latent] queries, ctx its [T][heads][kv_lora] output;
// scores is scratch of (t1 - t0) * (h1 - h0) * positions(t1 - 1) floats.
void attend_latents(const MlaDims& d, const Kernels& k, const Unit& u, const float* qt,
                    const float* cache, float* scores, float* ctx) {
  const int64_t H = u.h1 - u.h0, stride = u.positions(u.t1 - 1), block = block_positions(d);
  auto row = [&](int64_t t, int64_t h) { return scores + ((t - u.t0) * H + h - u.h0) * stride; };
  for (int64_t b = 0; b < stride; b += block)
    for (int64_t t = std::max(u.t0, b - u.before); t < u.t1; t++) {
      const int64_t e = std::min(u.positions(t), b + block);
      for (int64_t h = u.h0; h < u.h1; h++)
        k.dots(qt + (t * d.heads + h) * d.latent, cache + b * d.latent, e - b, d.latent, d.latent,
               d.scale, row(t, h) + b);
    }
  for (int64_t t = u.t0; t < u.t1; t++)
    for (int64_t h = u.h0; h < u.h1; h++) {
      float* sc = row(t, h);
      const int64_t n = u.positions(t);
      const float best = *std::max_element(sc, sc + n);
      float sum = 0.0f;
      for (int64_t s = 0; s < n; s++) sum += (sc[s] = std::exp(sc[s] - best));
      for (int64_t s = 0; s < n; s++) sc[s] /= sum;
      float* c = ctx + (t * d.heads + h) * d.kv_lora;
      std::fill(c, c + d.kv_lora, 0.0f);
    }
  for (int64_t b = 0; b < stride; b += block)
    for (int64_t t = std::max(u.t0, b - u.before); t < u.t1; t++) {
      const int64_t e = std::min(u.positions(t), b + block);
      for (int64_t h = u.h0; h < u.h1; h++)
        k.axpys(row(t, h) + b, cache + b * d.latent, e - b, d.latent, d.kv_lora,
                ctx + (t * d.heads + h) * d.kv_lora);
    }
}

}  // namespace

void Model::mla(int layer, Session& s, int64_t T, const float* u, float* out) {
  const ModelConfig& c = config();
  const MlaWeights& w = w_.layers[layer].mla_w;
  const int64_t qd = c.qk_nope + c.qk_rope;
  const MlaDims d{c.n_heads,
                  c.qk_nope,
                  c.qk_rope,
                  c.v_head,
                  c.kv_lora,
                  c.kv_lora + c.qk_rope,
                  rot_.att_mul / std::sqrt((float)qd)};
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
  // Room for the whole context at once (pages are touched only as positions arrive): growing by
  // doubling would leave every outgrown copy behind in the heap, about as much again as the
  // cache itself by 8K positions, which the RAM plan does not count.
  if (cache.capacity() < (size_t)((before + T) * d.latent))
    cache.reserve((size_t)(std::max(s.ctx(), before + T) * d.latent));
  std::vector<float> cs(rot_.inv_freq.size()), sn(cs.size());
  for (int64_t t = 0; t < T; t++) {
    float* ct = ckv.data() + t * d.latent;
    rmsnorm(ct, w.kv_a_norm, d.kv_lora, c.rms_eps, ct);
    // Rotated before caching: a cached key keeps its own position for every later query, so a
    // position's cache entry is the same whichever chunk or snapshot wrote it.
    if (rot_.on()) {
      rot_.angles(before + t, cs.data(), sn.data());
      rot_.rotate(cs.data(), sn.data(), ct + d.kv_lora);
      for (int64_t h = 0; h < d.heads; h++)
        rot_.rotate(cs.data(), sn.data(), q.data() + (t * d.heads + h) * qd + d.nope);
    }
    cache.insert(cache.end(), ct, ct + d.latent);
  }
  std::vector<float> qt(T * d.heads * d.latent);  // [T][heads][latent]
  pool_->parallel_for(d.heads, 1, [&](int64_t h0, int64_t h1) {
    std::vector<float> kb(d.nope * d.kv_lora);
    for (int64_t h = h0; h < h1; h++)
      absorbed_queries(d, *cp_.k, w.kv_b, q.data(), T, h, kb.data(), qt.data());
  });
  // Work units of (a tile of at most kQueriesPerUnit queries, a group of at most kHeadsPerUnit
  // heads; planner.h counts a thread's scores for that many rows of the context). One decode
  // token's groups are smaller still so every thread has some.
  std::vector<float> ctx(T * d.heads * d.kv_lora);  // [T][heads][kv_lora]
  const int64_t groups = std::min<int64_t>(
      d.heads,
      std::max((d.heads + kHeadsPerUnit - 1) / kHeadsPerUnit, (2 * pool_->size() + T - 1) / T));
  const int64_t per_group = (d.heads + groups - 1) / groups;
  const int64_t per_tile = std::min(T, kQueriesPerUnit);
  const int64_t tiles = (T + per_tile - 1) / per_tile;
  pool_->parallel_for(tiles * groups, 1, [&](int64_t u0, int64_t u1) {
    std::vector<float> scores(per_tile * per_group * (before + T));
    for (int64_t i = u0; i < u1; i++) {
      const int64_t t0 = i / groups * per_tile, h0 = i % groups * per_group;
      const Unit unit{before, t0, std::min(T, t0 + per_tile), h0,
                      std::min(d.heads, h0 + per_group)};
      if (unit.h0 < unit.h1)
        attend_latents(d, *cp_.k, unit, qt.data(), cache.data(), scores.data(), ctx.data());
    }
  });
  // o_h = W_vb(h) c~_h for every token at once: [T][kv_b.rows] scratch, rows at their own index.
  std::vector<float> vb(T * w.kv_b.rows);
  const int64_t rows_per_head = d.nope + d.v;
  pool_->parallel_for(d.heads, 1, [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; h++) {
      const int64_t r0 = h * rows_per_head + d.nope;
      cp_.k->matmul(w.kv_b, ctx.data() + h * d.kv_lora, T, d.heads * d.kv_lora, vb.data(),
                    w.kv_b.rows, r0, r0 + d.v);
      for (int64_t t = 0; t < T; t++)
        std::copy(vb.data() + t * w.kv_b.rows + r0, vb.data() + t * w.kv_b.rows + r0 + d.v,
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
