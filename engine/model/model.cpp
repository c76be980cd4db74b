// The layer stack (docs/MODEL.md §3): embedding, attention and FFN per layer with plain residuals
// (Kimi-Linear) or Attention Residuals (K3), final norm and LM head. A chunk of tokens (a prefill
// window) moves through the stack layer by layer, so each layer's experts are read once for all
// of it; every per-token computation is the same as for one token.
#include "engine/model/model.h"

#include <algorithm>
#include <cmath>

#include "engine/base/error.h"
#include "engine/base/stopwatch.h"

namespace waste {

namespace {

// AR(B, p): softmax over the blocks and p of (proj . RMSNorm(v, norm)), then the weighted sum.
// `out` may alias `p`.
void attn_res(const std::vector<const float*>& blocks, const float* p, const float* norm,
              const float* proj, int64_t n, float eps, float* out) {
  std::vector<const float*> v(blocks);
  v.push_back(p);
  std::vector<float> s(v.size());
  float best = -INFINITY;
  for (size_t i = 0; i < v.size(); i++) {
    float ss = 0.0f, dot = 0.0f;
    for (int64_t j = 0; j < n; j++) {
      ss += v[i][j] * v[i][j];
      dot += v[i][j] * norm[j] * proj[j];
    }
    s[i] = dot / std::sqrt(ss / (float)n + eps);
    best = std::max(best, s[i]);
  }
  float sum = 0.0f;
  for (float& x : s) sum += (x = std::exp(x - best));
  std::vector<float> acc(n, 0.0f);
  for (size_t i = 0; i < v.size(); i++)
    for (int64_t j = 0; j < n; j++) acc[j] += (s[i] / sum) * v[i][j];
  std::copy(acc.begin(), acc.end(), out);
}

}  // namespace

// Per-chunk activations, [T][hidden] each.
struct Model::Chunk {
  int64_t T = 0;
  std::vector<float> x, p, h, a;
  std::vector<std::vector<float>> blocks;  // Attention Residuals history, per block [T][hid]
  bool p_empty = true;
};

Model::Model(const Container& c, const ModelOptions& opt) : c_(c), opt_(opt) {
  if (!c.has("lm_head.weight")) fail<UsageError>("the container was opened without its trunk");
  if (opt_.chunk < 1) fail<UsageError>("chunk size must be at least 1");
  w_ = resolve_weights(c);
  pool_ = std::make_unique<ThreadPool>(opt.threads);
  cp_.k = &kernels_for(opt.isa);
  cp_.pool = pool_.get();
  cp_.clock = &kernel_clock_;
  act_ = Activation{c.config().situ, c.config().situ_beta, c.config().situ_linear_beta};
  rot_ = mla_rotation(c.config());
  store_ = std::make_unique<ExpertStore>(c, opt.store);
  fingerprint_ = c.fingerprint();
  layer_seconds_.assign(c.config().n_layers, 0.0);
}

Model::~Model() = default;

Session Model::new_session(int64_t ctx) const {
  if (ctx < 1) fail<UsageError>("context length must be at least 1, not {}", ctx);
  return Session(config(), fingerprint_, ctx);
}

void Model::check_input(const Session& s, std::span<const int32_t> tokens,
                        std::span<const EmbeddingOverride> embeds) const {
  if (s.model_fingerprint() != fingerprint_)
    fail<UsageError>("the session belongs to a different model");
  if (s.broken) fail<UsageError>("the session is unusable after a failed step; restore a snapshot");
  if (tokens.empty()) fail<UsageError>("no tokens to process (empty prompt)");
  for (size_t i = 0; i < tokens.size(); i++)
    if (tokens[i] < 0 || tokens[i] >= config().vocab)
      fail<UsageError>("token id {} at index {} is out of range (vocabulary has {} ids)", tokens[i],
                       i, config().vocab);
  if ((int64_t)tokens.size() > s.room())
    fail<UsageError>("context length exceeded: {} tokens in the session + {} new > {}", s.pos(),
                     tokens.size(), s.ctx());
  for (size_t i = 0; i < embeds.size(); i++) {
    const EmbeddingOverride& e = embeds[i];
    if (e.index < 0 || e.index >= (int64_t)tokens.size() || !e.row)
      fail<UsageError>("embedding override {} names position {} of {} (or has no row)", i, e.index,
                       tokens.size());
    if (i > 0 && e.index <= embeds[i - 1].index)
      fail<UsageError>("embedding overrides must be in increasing position order (index {})", i);
  }
}

void Model::forward(Session& s, std::span<const int32_t> tokens, float* logits,
                    std::span<const EmbeddingOverride> embeds) {
  check_input(s, tokens, embeds);
  std::vector<EmbeddingOverride> local;  // one chunk's overrides, re-based to the chunk
  size_t next = 0;
  try {
    for (size_t at = 0; at < tokens.size(); at += (size_t)opt_.chunk) {
      size_t n = std::min(tokens.size() - at, (size_t)opt_.chunk);
      bool last = at + n == tokens.size();
      local.clear();
      for (; next < embeds.size() && embeds[next].index < (int64_t)(at + n); next++)
        local.push_back({embeds[next].index - (int64_t)at, embeds[next].row});
      const StepPiece piece{&s, tokens.subspan(at, n), last ? logits : nullptr, local};
      run_step({&piece, 1});
    }
  } catch (...) {
    s.broken = true;
    throw;
  }
}

void Model::step(std::span<const StepPiece> pieces) {
  if (pieces.empty()) fail<UsageError>("a step needs at least one piece");
  for (size_t i = 0; i < pieces.size(); i++) {
    if (!pieces[i].session) fail<UsageError>("step piece {} has no session", i);
    check_input(*pieces[i].session, pieces[i].tokens, pieces[i].embeds);
    for (size_t j = 0; j < i; j++)
      if (pieces[j].session == pieces[i].session)
        fail<UsageError>("step pieces {} and {} share one session", j, i);
  }
  try {
    run_step(pieces);
  } catch (...) {
    for (const StepPiece& p : pieces) p.session->broken = true;
    throw;
  }
}

void Model::attention(int layer, Session& s, int64_t T, const float* h, float* out) {
  // Attention reads no experts, so it gains nothing from a long window: pieces bound its
  // intermediates whatever the window.
  const int64_t hid = config().hidden;
  for (int64_t at = 0; at < T; at += kPieceTokens) {
    const int64_t n = std::min(kPieceTokens, T - at);
    if (w_.layers[layer].kda)
      kda(layer, s, n, h + at * hid, out + at * hid);
    else
      mla(layer, s, n, h + at * hid, out + at * hid);
  }
}

void Model::ffn(int layer, int64_t T, const float* u, float* out, bool predict) {
  if (w_.layers[layer].moe) {
    moe(layer, T, u, out, predict);
    return;
  }
  // A dense layer before the first MoE layer still predicts it: otherwise every token would
  // start that layer with all of its experts to read.
  if (predict) {
    std::vector<int> next = predict_next(layer, T, u);
    if (!next.empty()) store_->prefetch(layer + 1, next);
  }
  dense_ffn(w_.layers[layer].dense, T, u, out);
}

void Model::run_step(std::span<const StepPiece> pieces) {
  const ModelConfig& c = config();
  const int64_t hid = c.hidden;
  const bool ar = c.attn_res_block > 0;
  std::vector<int64_t> first;  // each piece's first row in the step, and the total
  int64_t T = 0;
  const bool decode = std::all_of(pieces.begin(), pieces.end(),
                                  [](const StepPiece& p) { return p.tokens.size() == 1; });
  for (const StepPiece& p : pieces) {
    first.push_back(T);
    T += (int64_t)p.tokens.size();
  }
  Chunk ch;
  ch.T = T;
  ch.x.resize(T * hid);
  ch.h.resize(T * hid);
  ch.a.resize(T * hid);
  for (size_t i = 0; i < pieces.size(); i++) {
    float* x = &ch.x[first[i] * hid];
    for (size_t t = 0; t < pieces[i].tokens.size(); t++)
      c_.embedding_row(pieces[i].tokens[t], x + t * hid);
    for (const EmbeddingOverride& e : pieces[i].embeds)
      std::copy(e.row, e.row + hid, x + e.index * hid);
  }
  auto each = [&](auto&& fn) {
    for (int64_t t = 0; t < T; t++) fn(t * hid);
  };
  auto mix = [&](const float* norm, const float* proj) {  // x <- AR(B, p)
    std::vector<const float*> b(ch.blocks.size());
    each([&](int64_t o) {
      for (size_t i = 0; i < b.size(); i++) b[i] = ch.blocks[i].data() + o;
      attn_res(b, &ch.p[o], norm, proj, hid, c.rms_eps, &ch.x[o]);
    });
  };
  for (int l = 0; l < c.n_layers; l++) {
    const auto t0 = SteadyClock::now();
    const LayerWeights& w = w_.layers[l];
    if (ar) {
      ch.p = ch.x;
      if (!ch.blocks.empty()) mix(w.attn_res_norm, w.attn_res_proj);
      if (l % c.attn_res_block == 0) {
        ch.blocks.push_back(ch.p);
        ch.p_empty = true;
      }
    }
    each([&](int64_t o) { rmsnorm(&ch.x[o], w.input_norm, hid, c.rms_eps, &ch.h[o]); });
    for (size_t i = 0; i < pieces.size(); i++)  // each piece over its own history
      attention(l, *pieces[i].session, (int64_t)pieces[i].tokens.size(), &ch.h[first[i] * hid],
                &ch.a[first[i] * hid]);
    if (ar) {
      if (ch.p_empty)
        ch.p = ch.a;
      else
        for (int64_t i = 0; i < T * hid; i++) ch.p[i] += ch.a[i];
      ch.p_empty = false;
      mix(w.mlp_res_norm, w.mlp_res_proj);
    } else {
      for (int64_t i = 0; i < T * hid; i++) ch.x[i] += ch.a[i];
    }
    each([&](int64_t o) { rmsnorm(&ch.x[o], w.post_norm, hid, c.rms_eps, &ch.h[o]); });
    ffn(l, T, ch.h.data(), ch.a.data(), decode);
    float* target = ar ? ch.p.data() : ch.x.data();
    for (int64_t i = 0; i < T * hid; i++) target[i] += ch.a[i];
    if (ar) ch.x = ch.p;
    layer_seconds_[l] += seconds_since(t0);
  }
  // The pieces that want logits share one pass over the LM head (matmul gives matvec's bits).
  std::vector<size_t> want;
  for (size_t i = 0; i < pieces.size(); i++) {
    const StepPiece& p = pieces[i];
    p.session->tokens.insert(p.session->tokens.end(), p.tokens.begin(), p.tokens.end());
    if (p.logits) want.push_back(i);
  }
  if (want.empty()) return;
  std::vector<float> last(want.size() * hid);  // [pieces wanting logits][hidden]
  for (size_t k = 0; k < want.size(); k++) {
    const int64_t row = first[want[k]] + (int64_t)pieces[want[k]].tokens.size() - 1;
    float* x = &ch.x[row * hid];
    if (ar && !ch.blocks.empty()) {
      std::vector<const float*> b;
      for (auto& blk : ch.blocks) b.push_back(blk.data() + row * hid);
      attn_res(b, x, w_.out_res_norm, w_.out_res_proj, hid, c.rms_eps, x);
    }
    rmsnorm(x, w_.final_norm, hid, c.rms_eps, &last[k * hid]);
  }
  if (want.size() == 1) {
    cp_.linear(w_.lm_head, last.data(), 1, pieces[want[0]].logits);
    return;
  }
  const int64_t V = c.vocab;
  std::vector<float> logits(want.size() * V);  // [pieces wanting logits][vocab]
  cp_.linear(w_.lm_head, last.data(), (int64_t)want.size(), logits.data());
  for (size_t k = 0; k < want.size(); k++) std::copy_n(&logits[k * V], V, pieces[want[k]].logits);
}

}  // namespace waste
