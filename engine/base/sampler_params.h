// What a sampler is asked to do, as plain values: every API's parser fills one from its own field
// names (protocol/), and the engine's Sampler (engine/model/sampler.h, which says what each step
// does and in what order) takes it. Here, on the floor both stand on, so there is one struct.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace waste {

struct SamplerParams {
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float presence_penalty = 0.0f, frequency_penalty = 0.0f, repetition_penalty = 1.0f;
  std::vector<std::pair<int, float>> logit_bias;  // (token id, bias in [-100, 100])
  std::optional<uint64_t> seed;                   // none: the server's seed, else a fresh one
  // -1: no log-probabilities; otherwise each draw reports its id's and the best `logprobs` ids'
  // (0-20, OpenAI's top_logprobs).
  int logprobs = -1;
};

}  // namespace waste
