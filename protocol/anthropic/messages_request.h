// The bodies of POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API),
// parsed into the same Conversation and GenerationParams as chat completions. Field names follow
// the official SDK's types; every bad field is an ApiError (400) naming its path
// ("messages[2].content[0].type"), which the route answers in Anthropic's error shape.
//
// Translation: `system` (a string or text blocks) becomes the first system message; a user
// message's `tool_result` blocks become tool messages (in order, before the rest of its content);
// an assistant's `thinking` blocks become its reasoning and `tool_use` blocks its calls; tools
// are shown to the model as OpenAI-shaped function declarations (what K3 was trained on) with
// `input_schema` as the parameters; `tool_choice` `any` is required, `tool` names one.
#pragma once

#include <string_view>

#include "protocol/conversation.h"
#include "protocol/generation_params.h"

namespace waste {

struct MessagesRequest {
  Conversation conversation;
  GenerationParams params;
  bool omit_thinking = false;  // thinking.display "omitted": thinking blocks come back empty
};

// /v1/messages: `model`, `messages` and `max_tokens` are required, as Anthropic requires them.
MessagesRequest parse_messages_request(std::string_view body, const RequestLimits& limits);
// /v1/messages/count_tokens: the same conversation fields; no sampling fields or max_tokens.
MessagesRequest parse_count_tokens_request(std::string_view body);

}  // namespace waste
