// How a reply is to be generated, whatever API asked for it: sampling, limits, stop strings and
// streaming. Each API's parser fills it from its own field names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "engine/base/sampler_params.h"

namespace waste {

struct GenerationParams {
  std::string model;  // the model the client named; empty when it named none
  SamplerParams sampler;
  std::optional<int64_t> max_tokens;  // unset: the server's default
  std::vector<std::string> stop;      // stop strings, each non-empty
  bool stream = false;
  bool include_usage = false;  // a final usage chunk in a stream
  int n = 1;                   // replies to generate from the one prompt
  // Log-probabilities go in sampler.logprobs (-1: none; else the alternatives per token).
};

// What the server allows a request, for every API's parser.
struct RequestLimits {
  int vocab = 0;               // logit_bias and prompt ids must lie below it (0: not checked)
  int64_t max_tokens_cap = 0;  // 0: no cap beyond the context
  int max_n = 8;               // the most replies `n` may ask for
};

}  // namespace waste
