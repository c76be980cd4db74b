// The bodies of POST /v1/chat/completions and POST /v1/completions, parsed once into typed
// values. Fields this server does not use (user, metadata, ...) are accepted and ignored; every
// bad field is an ApiError (400) naming it, e.g. "messages[1].content[0].type: ...", with `param`
// set to that path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/conversation.h"
#include "protocol/generation_params.h"

namespace waste {

struct ChatCompletionRequest {
  Conversation conversation;
  GenerationParams params;
  // The request declared the legacy `functions` (and `function_call`) instead of tools: they
  // are read as tools (one call at most), and the reply answers with `function_call`.
  bool legacy_functions = false;
};

// Thinking is read from `chat_template_kwargs.thinking` / `.enable_thinking`, then `thinking` (a
// bool, or an object whose `type` is "enabled" / "disabled"), then `enable_thinking`. The effort
// from `chat_template_kwargs.thinking_effort`, `reasoning_effort`, `thinking_effort`,
// `reasoning.effort`, then `thinking.effort`: "none" turns thinking off; "minimal" and "low" become
// K3's low, "medium" and "high" its high, "max" its max. Any effort but "none" also turns
// thinking on unless the request's own switch says off (the server's default does not count).
//
// `logprobs: true` reports each content token's log-probability, `top_logprobs` (0-20) that many
// alternatives; `n` (1 to the limit) asks for that many replies.
//
// Legacy function calling maps onto tools: `functions` onto `tools`, `function_call` ("none",
// "auto" or {"name"}) onto `tool_choice`, an assistant's `function_call` onto its one tool call,
// and `role: "function"` messages onto tool results naming the function.
ChatCompletionRequest parse_chat_completion(std::string_view body, const RequestLimits& limits);

// /v1/completions: the prompt is text (a string or a list of one string) or token ids.
// `logprobs` is an integer here (the alternatives per token, 0-20); `echo` puts the prompt before
// the reply (and, with logprobs, the prompt's tokens before the reply's), and then allows
// max_tokens 0: only the prompt is scored.
struct CompletionRequest {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  GenerationParams params;
  bool echo = false;
};
CompletionRequest parse_completion(std::string_view body, const RequestLimits& limits);

}  // namespace waste
