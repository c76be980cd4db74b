// The token sampler: turns one position's logits into a token id, with the OpenAI
// chat-completions parameters (temperature, top_p, presence/frequency penalty, logit_bias, seed)
// and the llama.cpp ones (top_k, min_p, repetition_penalty).
//
// Order of operations in Sampler::sample (each step sees the previous step's output):
//   1. copy the logits; NaN becomes -inf (never chosen), +inf the largest float;
//   2. logit_bias: add each bias (a pair repeated for one id adds twice); -100 effectively bans;
//   3. repetition penalty (llama.cpp/CTRL): each distinct id in `history` gets
//      logit > 0 ? logit / rp : logit * rp;
//   4. presence/frequency penalties (OpenAI): logit -= count * frequency + (count > 0) * presence,
//      count = occurrences of the id in `history` (the caller passes what it wants counted,
//      normally the tokens generated so far); results past the largest float are clamped to it;
//   5. constraint mask: disallowed ids become -inf (done during the copy, which is the same
//      thing: -inf stays -inf through steps 2-4);
//   6. temperature == 0: greedy argmax, ties to the lowest id; no random draw is consumed;
//   7. otherwise top-k by logit (ties to the lower id), then softmax of logit / temperature
//      (max-subtracted; weights in float within 1 ulp, every sum in double), then top-p (the
//      smallest prefix of descending-probability order, ties to the lower id, whose mass reaches
//      top_p; never empty), then min-p (drop ids with p < min_p * p_max), then renormalize and
//      take one uniform draw from the seeded Rng.
// Log-probabilities (SamplerParams::logprobs >= 0) are reported from the distribution of step 7
// before its cuts: softmax of the step-5 logits divided by the temperature (by 1 when greedy), so
// they count the bias, the penalties and the constraint mask but not top-k, top-p or min-p.
// Reporting never changes which id is drawn.
// Terms below e^-86 of the most likely token's weight count as zero probability. A seed gives the
// same tokens on every machine, x86-64 or arm64: every vector table computes the same bits
// (sampler_lanes.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine/base/rng.h"
#include "engine/base/sampler_params.h"

namespace waste {

struct SamplerKernels;

// One draw's report (see the header comment for the distribution).
struct TokenLogprobs {
  int32_t id = 0;
  float logprob = 0;                           // of `id`
  std::vector<std::pair<int32_t, float>> top;  // the most likely ids, best first (ties: lower id)
};

// Throws UsageError naming the first bad field: temperature < 0 or not finite, top_k < 0, top_p
// outside (0, 1], min_p outside [0, 1], repetition_penalty <= 0 or not finite, presence or
// frequency penalty outside [-2, 2], a logit_bias id outside [0, vocab) or bias outside
// [-100, 100], logprobs outside [-1, 20]. NaN fails every range.
void validate(const SamplerParams& p, int vocab);

// A fresh seed from the system's entropy source, as a Sampler draws when given none.
uint64_t random_seed();
// The seed of one reply, for its sampler and the call ids its parser draws alike: the request's,
// else `fallback` (a server's --seed), else a fresh random_seed().
uint64_t reply_seed(std::optional<uint64_t> requested, std::optional<uint64_t> fallback = {});

// One per request: it owns the request's random stream and scratch buffers sized for the
// vocabulary, so calls do not allocate after the first; not safe to share between threads.
class Sampler {
 public:
  // Validates `p` (see validate) and seeds the generator.
  explicit Sampler(SamplerParams p, int vocab);

  // `logits` must hold exactly `vocab` values. `history` ids must lie in [0, vocab); it is only
  // read when a penalty is active. `allowed_mask`, when given, holds ceil(vocab / 8) bytes with
  // one bit per id, least significant bit first within a byte; a set bit allows the id.
  // Throws UsageError when the mask allows no id ("constraint left no allowed token") or when no
  // allowed id has a finite logit.
  int sample(std::span<const float> logits, std::span<const int32_t> history,
             const uint8_t* allowed_mask = nullptr);
  // The report for `id` without drawing (scoring given text): the same distribution as sample()'s
  // report, with params().logprobs alternatives (none when it is -1).
  const TokenLogprobs& score(std::span<const float> logits, std::span<const int32_t> history,
                             int id);
  // The last sample()'s report; empty `top` and logprob 0 unless params().logprobs >= 0.
  const TokenLogprobs& last_logprobs() const { return report_; }

  // The seed in use: the request's, or the random one drawn for it, so it can be reported.
  uint64_t seed() const { return seed_; }
  const SamplerParams& params() const { return p_; }

 private:
  using Cand = std::pair<float, int>;  // (logit or weight, id)

  Cand prepare(std::span<const float> logits, std::span<const int32_t> history,
               const uint8_t* allowed_mask);
  int draw(Cand best);
  void report(int id, float max_logit);
  void set_logit(int id, float x);
  void apply_penalties(std::span<const int32_t> history);
  int sample_top_k(float max_logit, float inv_t);
  void cut_to_top_k();
  float top_k_floor(size_t k);
  std::span<Cand> collect_candidates(double total, int argmax);
  std::span<Cand> collect(float least);
  float top_p_floor(int argmax);
  std::optional<Cand> top_p_cut(std::span<const Cand> cands, double target);
  template <class Key>
  int first_bucket_reaching(std::span<const Cand> cands, Key key, int buckets, double target,
                            double& mass);
  int draw_from(std::span<Cand> cands, double total);
  int draw_dense(double total);

  SamplerParams p_;
  int vocab_;
  uint64_t seed_;
  Rng rng_;
  const SamplerKernels* k_;  // the vector passes, for this CPU
  // Scratch, padded to a whole number of blocks with -inf logits / zero weights.
  std::vector<float> logit_;   // working logits
  std::vector<float> weight_;  // exp((logit - max) / temperature), unnormalized; the top is 1
  std::vector<double> block_sum_;
  Cand best_;                   // the best (logit, id) in logit_ while it is prepared
  bool best_stale_ = false;     // a change lowered best_: it must be searched again
  std::vector<int32_t> count_;  // occurrences in history; all zero between calls
  std::vector<int32_t> seen_;   // ids whose count_ is nonzero during a call
  std::vector<Cand> cand_;      // top-p / min-p / large top-k candidates (vocabulary-sized)
  std::vector<Cand> heap_;      // top-k survivors
  std::vector<Cand> edge_;      // the top-p bucket that needs ordering
  std::vector<float> values_;   // sampled logits, for the large top_k estimate
  std::vector<double> bucket_mass_;
  std::vector<float> report_logit_;  // the step-5 logits, kept for the report while the draw cuts
  TokenLogprobs report_;
};

}  // namespace waste
