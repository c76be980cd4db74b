// The generation options of an OpenAI chat or completions request: sampling, limits, stops and
// streaming. Parsed from the untrusted body; every bad field is an ApiError naming it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"

namespace waste {

struct GenerationParams {
  std::string model;
  SamplerParams sampler;
  std::optional<int64_t> max_tokens;  // max_completion_tokens, else max_tokens
  std::vector<std::string> stop;      // up to 4 strings
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool parallel_tool_calls = true;
  bool logprobs = false;
};

struct LimitsForParams {
  int vocab = 0;
  int64_t max_tokens_cap = 0;  // 0 = no cap beyond the context
};

// Reads the fields shared by /v1/chat/completions and /v1/completions. Unknown fields are
// ignored (clients send many); n other than 1 is refused.
GenerationParams parse_generation_params(std::string_view body, const LimitsForParams& limits);

// /v1/completions: the prompt as text or as token ids (a string, a list of one string, or a list
// of ids). Throws ApiError naming `prompt`.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};
CompletionPrompt parse_completion_prompt(std::string_view body, int vocab);

}  // namespace waste
