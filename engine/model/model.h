// A loaded model: the container's weights resolved for the forward pass, the kernels and the
// thread pool. Immutable after construction except for the expert store's cache and counters;
// per-conversation state lives in Session.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/experts/expert_store.h"
#include "engine/experts/planner.h"
#include "engine/format/container.h"
#include "engine/kernels/ops.h"
#include "engine/model/layer_weights.h"
#include "engine/model/mla_rope.h"
#include "engine/model/session.h"

namespace waste {

struct ModelOptions {
  int threads = 0;    // 0 = one per hardware thread
  int chunk = 64;     // prompt tokens per prefill pass
  int lookahead = 6;  // next-layer experts prefetched during decode; 0 disables
  Isa isa = detect_isa();
  StoreOptions store;
};

// A position whose input embedding the caller supplies instead of a row of the embedding table
// (an image's tower output). `index` counts from the start of the tokens handed to forward();
// `row` holds `hidden` floats and must stay valid for the call.
struct EmbeddingOverride {
  int64_t index = 0;
  const float* row = nullptr;
};

// One conversation's part of a shared step (Model::step): `tokens` after `session`'s history,
// the last one's logits (vocab floats) written to `logits` when not null, `embeds` as forward()'s.
struct StepPiece {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  float* logits = nullptr;
  std::span<const EmbeddingOverride> embeds;
};

// How well the next layer's router, run one layer early, predicted the real routing.
struct LookaheadStats {
  uint64_t predicted = 0;  // experts prefetched on a prediction
  uint64_t correct = 0;    // of which the real router then chose
};

// How much the tokens of each pass shared their experts, over every MoE layer of every pass.
struct ExpertSharing {
  uint64_t uses = 0;      // (token, chosen expert) pairs: the records each token alone would read
  uint64_t distinct = 0;  // distinct experts per layer and pass: the records the passes needed
};

class Model {
 public:
  Model(const Container& c, const ModelOptions& opt = {});
  ~Model();

  const ModelConfig& config() const { return c_.config(); }
  const Container& container() const { return c_; }
  uint64_t fingerprint() const { return fingerprint_; }
  int threads() const { return pool_->size(); }
  ExpertStats expert_stats() const { return store_->stats(); }
  // The expert cache's demand counts, and warming it from an earlier run's (ExpertStore::warm).
  std::vector<ExpertUse> expert_usage() const { return store_->usage(); }
  size_t warm_experts(std::span<const ExpertUse> earlier) { return store_->warm(earlier); }
  const LookaheadStats& lookahead_stats() const { return lookahead_; }
  // Read from any thread.
  ExpertSharing expert_sharing() const { return {sharing_uses_, sharing_distinct_}; }
  // Seconds spent in each layer so far (its attention, its FFN and the waits for its experts),
  // for `waste bench`'s per-layer figures.
  const std::vector<double>& layer_seconds() const { return layer_seconds_; }
  // Seconds so far in the trunk's and the experts' matrix kernels.
  const KernelClock& kernel_clock() const { return kernel_clock_; }
  const ModelOptions& options() const { return opt_; }

  Session new_session(int64_t ctx) const;

  // Feeds `tokens` after the session's history (in chunks) and writes the logits of the last
  // one (vocab floats) when `logits` is not null. Bad input (empty, ids out of range, no room)
  // throws UsageError and leaves the session as it was. `embeds` (strictly increasing indexes)
  // replace the table rows of those positions; their token ids still enter the history. An empty
  // list is the plain text path, bit for bit.
  void forward(Session& s, std::span<const int32_t> tokens, float* logits,
               std::span<const EmbeddingOverride> embeds = {});

  // forward()'s refusals of bad input (UsageError), without running anything.
  void check_input(const Session& s, std::span<const int32_t> tokens,
                   std::span<const EmbeddingOverride> embeds = {}) const;

  // Several conversations' tokens through the layer stack in one pass, each layer's experts read
  // once for all of them; attention runs per piece over its own session. Every piece gets, bit
  // for bit, the logits and state forward() alone would give it: each token's arithmetic is the
  // same whoever shares its pass. No chunking: the caller bounds the step's tokens. Each piece
  // is checked as forward() checks it (a session may appear once) before anything runs; an
  // engine error marks every piece's session broken.
  void step(std::span<const StepPiece> pieces);

  // The compute threads, for work outside the layer stack (the vision tower) on the same thread
  // that calls forward().
  ThreadPool& pool() const { return *pool_; }

 private:
  struct Chunk;
  void run_step(std::span<const StepPiece> pieces);
  void attention(int layer, Session& s, int64_t T, const float* h, float* out);
  // `predict`: the pass is decode tokens (one per piece), whose next layer's experts are worth
  // prefetching on the router's guess; a prefill piece reads its own in bulk.
  void ffn(int layer, int64_t T, const float* u, float* out, bool predict);
  void kda(int layer, Session& s, int64_t T, const float* u, float* out);
  void mla(int layer, Session& s, int64_t T, const float* u, float* out);
  void dense_ffn(const FfnWeights& w, int64_t T, const float* u, float* out);
  void moe(int layer, int64_t T, const float* u, float* out, bool predict);
  std::vector<int> predict_next(int layer, int64_t T, const float* u);

  const Container& c_;
  ModelOptions opt_;
  ModelWeights w_;
  std::unique_ptr<ThreadPool> pool_;
  Compute cp_;
  Activation act_;
  MlaRotation rot_;
  std::unique_ptr<ExpertStore> store_;
  uint64_t fingerprint_ = 0;
  LookaheadStats lookahead_;
  std::atomic<uint64_t> sharing_uses_{0}, sharing_distinct_{0};
  std::vector<int> predicted_;  // for the layer after the one just routed
  std::vector<double> layer_seconds_;
  KernelClock kernel_clock_;
};

}  // namespace waste
