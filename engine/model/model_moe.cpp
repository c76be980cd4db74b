// The routed MoE block (docs/MODEL.md §6) and the dense FFN. A chunk routes every token first,
// then reads each distinct expert once and applies it to all the tokens that chose it at once;
// the expert kernel's outputs never depend on which tokens share a call, and per-token sums run
// in selection order, so a chunk computes exactly what token-by-token decode does.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "engine/base/error.h"
#include "engine/base/stopwatch.h"
#include "engine/model/model.h"

namespace waste {

namespace {

struct Route {
  std::vector<int> ids;        // selection order
  std::vector<float> weights;  // after renormalization and scaling
};

// Grouped top-k: a group's score is the sum of its two best ranks (its one, in groups of one);
// the experts outside the topk_group best groups are marked taken, so they are never chosen.
// Ties go to the lowest group.
void exclude_groups(const ModelConfig& c, const std::vector<float>& rank,
                    std::vector<bool>* taken) {
  const int G = c.n_group, per = c.n_experts / G;
  std::vector<float> group(G);
  for (int g = 0; g < G; g++) {
    std::vector<float> r(rank.begin() + g * per, rank.begin() + (g + 1) * per);
    std::partial_sort(r.begin(), r.begin() + std::min(per, 2), r.end(), std::greater<>());
    group[g] = per > 1 ? r[0] + r[1] : r[0];
  }
  std::vector<bool> kept(G, false);
  for (int j = 0; j < c.topk_group; j++) {
    int best = -1;
    for (int g = 0; g < G; g++)
      if (!kept[g] && (best < 0 || group[g] > group[best])) best = g;
    kept[best] = true;
  }
  for (int e = 0; e < c.n_experts; e++)
    if (!kept[e / per]) (*taken)[e] = true;
}

// Sigmoid scores; the correction bias only ranks; ties go to the lowest id.
Route route(const ModelConfig& c, const float* logits, const float* bias) {
  const int E = c.n_experts, K = c.top_k;
  std::vector<float> score(E), rank(E);
  for (int e = 0; e < E; e++) {
    score[e] = sigmoid(logits[e]);
    rank[e] = score[e] + (bias ? bias[e] : 0.0f);
  }
  Route r;
  std::vector<bool> taken(E, false);
  if (c.topk_group < c.n_group) exclude_groups(c, rank, &taken);
  for (int j = 0; j < K; j++) {
    int best = -1;
    for (int e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || rank[e] > rank[best])) best = e;
    taken[best] = true;
    r.ids.push_back(best);
    r.weights.push_back(score[best]);
  }
  if (c.renormalize && K > 1) {
    float sum = 0.0f;
    for (float w : r.weights) sum += w;
    for (float& w : r.weights) w /= (sum + 1e-20f);
  }
  for (float& w : r.weights) w *= c.routed_scale;
  return r;
}

}  // namespace

// In pieces: a dense FFN reads no experts, so a long window gains nothing here, and pieces bound
// the intermediates whatever the window.
void Model::dense_ffn(const FfnWeights& w, int64_t T, const float* u, float* out) {
  const int64_t inter = w.gate.rows, in = w.gate.cols, hid = w.down.rows;
  std::vector<float> g(std::min(T, kPieceTokens) * inter), up(g.size());
  for (int64_t at = 0; at < T; at += kPieceTokens) {
    const int64_t n = std::min(kPieceTokens, T - at);
    cp_.linear(w.gate, u + at * in, n, g.data());
    cp_.linear(w.up, u + at * in, n, up.data());
    for (int64_t i = 0; i < n * inter; i++) g[i] = act_(g[i], up[i]);
    cp_.linear(w.down, g.data(), n, out + at * hid);
  }
}

void Model::moe(int layer, int64_t T, const float* u, float* out, bool predict) {
  const ModelConfig& c = config();
  const MoeWeights& w = w_.layers[layer].moe_w;
  const int64_t E = c.n_experts, K = c.top_k, width = c.expert_in(), inter = c.moe_inter;
  const int64_t hid = c.hidden;
  const int64_t base = c_.manifest().banks.at(layer).codebook_base;

  std::vector<float> logits(T * E);
  cp_.linear(w.router, u, T, logits.data());
  std::vector<Route> routes;
  for (int64_t t = 0; t < T; t++) routes.push_back(route(c, logits.data() + t * E, w.bias));
  if (!predicted_.empty()) {  // a prediction is right when any token of the step chose it
    for (int e : predicted_)
      lookahead_.correct += std::any_of(routes.begin(), routes.end(), [e](const Route& r) {
        return std::find(r.ids.begin(), r.ids.end(), e) != r.ids.end();
      });
    predicted_.clear();
  }
  // The next layer's likely experts, read behind this layer's own so they arrive while it computes.
  std::vector<int> next = predict ? predict_next(layer, T, u) : std::vector<int>{};

  // Who uses which expert: distinct ids ascending, each with its (token, slot) pairs.
  std::vector<int> distinct;
  for (const Route& r : routes) distinct.insert(distinct.end(), r.ids.begin(), r.ids.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  sharing_uses_ += (uint64_t)(T * K);
  sharing_distinct_ += distinct.size();
  // users[i]: the slots t * K + j that chose distinct[i], ascending.
  std::vector<std::vector<int64_t>> users(distinct.size());
  for (int64_t t = 0; t < T; t++)
    for (int64_t j = 0; j < K; j++) {
      auto at = std::lower_bound(distinct.begin(), distinct.end(), routes[t].ids[j]);
      users[at - distinct.begin()].push_back(t * K + j);
    }

  // Everything below that needs no expert record runs while the misses are being read.
  std::vector<float> xi_buf;
  const float* xi = u;
  const VqBooks gate_books = c_.books(base, 0), up_books = c_.books(base, 1);
  const VqBooks down_books = c_.books(base, 2);
  std::vector<float> shared;
  auto expert_free_work = [&] {
    if (c.latent > 0) {
      xi_buf.resize(T * width);
      cp_.linear(w.latent_down, u, T, xi_buf.data());
      xi = xi_buf.data();
    }
    if (w.has_shared) {
      shared.resize(T * hid);
      dense_ffn(w.shared, T, u, shared.data());
    }
  };

  std::vector<float> y(T * K * width);  // per token and slot
  // One expert's users: [n][width] in and out, [n][inter] between.
  std::vector<float> xs, gs, us, ys;
  store_->fetch(
      layer, distinct,
      [&](size_t i, const ExpertView& ev) {
        const SteadyClock::time_point t0 = SteadyClock::now();
        const std::vector<int64_t>& slots = users[i];
        const int64_t n = (int64_t)slots.size();
        xs.resize(n * width);
        gs.resize(n * inter);
        us.resize(n * inter);
        ys.resize(n * width);
        for (int64_t k = 0; k < n; k++)
          std::copy_n(xi + slots[k] / K * width, width, &xs[k * width]);
        // Threads split rows only: every output's sums are its own (kernels.h).
        pool_->parallel_for(inter, kVqRowBlock, [&](int64_t b, int64_t e) {
          cp_.k->vq_rows(gate_books, xs.data(), n, width, ev.gate, gs.data(), inter, b, e);
          cp_.k->vq_rows(up_books, xs.data(), n, width, ev.up, us.data(), inter, b, e);
          for (int64_t k = 0; k < n; k++)
            for (int64_t x = b; x < e; x++)
              gs[k * inter + x] = act_(gs[k * inter + x], us[k * inter + x]);
        });
        pool_->parallel_for(width, kVqRowBlock, [&](int64_t b, int64_t e) {
          cp_.k->vq_rows(down_books, gs.data(), n, inter, ev.down, ys.data(), width, b, e);
        });
        for (int64_t k = 0; k < n; k++) std::copy_n(&ys[k * width], width, &y[slots[k] * width]);
        kernel_clock_.experts += seconds_since(t0);
      },
      layer + 1, next, expert_free_work);

  // Each token's weighted sum of its experts' outputs, slots in selection order.
  std::vector<float> sum(T * width, 0.0f);
  pool_->parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++)
      cp_.k->axpys(routes[t].weights.data(), &y[t * K * width], K, width, width, &sum[t * width]);
  });
  if (c.latent > 0) {
    if (w.latent_norm)
      for (int64_t t = 0; t < T; t++)
        rmsnorm(&sum[t * width], w.latent_norm, width, c.rms_eps, &sum[t * width]);
    cp_.linear(w.latent_up, sum.data(), T, out);
  } else {
    std::copy(sum.begin(), sum.end(), out);
  }
  for (size_t i = 0; i < shared.size(); i++) out[i] += shared[i];
}

// Runs the next layer's (resident) router on this layer's MoE input: each token's likely experts,
// their union to be prefetched. The real router still decides.
std::vector<int> Model::predict_next(int layer, int64_t T, const float* u) {
  const ModelConfig& c = config();
  int next = layer + 1;
  predicted_.clear();
  if (opt_.lookahead <= 0 || next >= c.n_layers || !w_.layers[next].moe) return {};
  const MoeWeights& w = w_.layers[next].moe_w;
  const int E = c.n_experts, n = std::min(opt_.lookahead, E);
  std::vector<float> logits(T * E);
  cp_.linear(w.router, u, T, logits.data());
  std::vector<int> order(E);
  std::vector<bool> seen(E, false);
  for (int64_t t = 0; t < T; t++) {
    float* lt = &logits[t * E];
    for (int e = 0; e < E; e++) {
      order[e] = e;
      lt[e] = sigmoid(lt[e]) + (w.bias ? w.bias[e] : 0.0f);
    }
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int a, int b) { return lt[a] > lt[b] || (lt[a] == lt[b] && a < b); });
    for (int j = 0; j < n; j++)  // each token's best first, so the likeliest are read first
      if (!seen[order[j]]) {
        seen[order[j]] = true;
        predicted_.push_back(order[j]);
      }
  }
  lookahead_.predicted += (uint64_t)predicted_.size();
  return predicted_;
}

}  // namespace waste
