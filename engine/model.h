// A loaded model: the container's weights resolved for the forward pass, the kernels and the
// thread pool. Immutable after construction except for the expert store's cache and counters;
// per-conversation state lives in Session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/container.h"
#include "engine/expert_store.h"
#include "engine/layer_weights.h"
#include "engine/ops.h"
#include "engine/session.h"

namespace waste {

struct ModelOptions {
  int threads = 0;             // 0 = one per hardware thread
  int chunk = 64;              // prompt tokens per prefill pass
  Isa isa = detect_isa();
};

class Model {
 public:
  Model(const Container& c, const ModelOptions& opt = {});
  ~Model();

  const ModelConfig& config() const { return c_.config(); }
  const Container& container() const { return c_; }
  uint64_t fingerprint() const { return fingerprint_; }
  int threads() const { return pool_->size(); }
  const ExpertStats& expert_stats() const { return store_->stats(); }

  Session new_session(int64_t ctx) const;

  // Feeds `tokens` after the session's history (in chunks) and writes the logits of the last
  // one (vocab floats) when `logits` is not null. Bad input (empty, ids out of range, no room)
  // throws UsageError and leaves the session as it was.
  void forward(Session& s, std::span<const int32_t> tokens, float* logits);

 private:
  struct Chunk;
  void check_input(const Session& s, std::span<const int32_t> tokens) const;
  void run_chunk(Session& s, std::span<const int32_t> tokens, float* logits);
  void attention(int layer, Session& s, Chunk& ch, const float* h, float* out);
  void ffn(int layer, Chunk& ch, const float* u, float* out);
  void kda(int layer, Session& s, int64_t T, const float* u, float* out);
  void mla(int layer, Session& s, int64_t T, const float* u, float* out);
  void dense_ffn(const FfnWeights& w, int64_t T, const float* u, float* out);
  void moe(int layer, int64_t T, const float* u, float* out);
  void logits_of(const float* x, float* logits);

  const Container& c_;
  ModelOptions opt_;
  ModelWeights w_;
  std::unique_ptr<ThreadPool> pool_;
  Compute cp_;
  Activation act_;
  std::unique_ptr<ExpertStore> store_;
  uint64_t fingerprint_ = 0;
};

}  // namespace waste
