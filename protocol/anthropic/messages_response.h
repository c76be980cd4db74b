// Encodes replies in Anthropic's Messages wire format: the message body, the stream's events (each
// an SSE event named by its `type`), count_tokens' answer and the error shape. Field names follow
// the official SDK's types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace waste {

struct AnthropicUsage {
  int64_t input_tokens = 0;  // prompt tokens computed (not read from the cache)
  int64_t output_tokens = 0;
  int64_t cache_read_input_tokens = 0;  // prompt tokens restored from a snapshot
};

struct ContentBlockOut {
  enum class Kind { kThinking, kText, kToolUse };
  Kind kind = Kind::kText;
  std::string text;  // kText: the text; kThinking: the thinking
  std::string id, name;
  std::string input_json = "{}";  // kToolUse: the arguments, a JSON object's text
};

struct AnthropicHeader {
  std::string id;  // msg_...
  std::string model;
};

// "end_turn", "max_tokens", "stop_sequence" or "tool_use"; `stop_sequence` with the one matched.
struct StopOut {
  std::string reason;
  std::optional<std::string> sequence;
};

std::string anthropic_message_json(const AnthropicHeader& h,
                                   const std::vector<ContentBlockOut>& blocks, const StopOut& stop,
                                   const AnthropicUsage& u);

// The stream, in order: message_start, then per block content_block_start, its deltas and
// content_block_stop, then message_delta and message_stop; ping may come at any point.
std::string message_start_json(const AnthropicHeader& h, const AnthropicUsage& u);
// The block as it starts: empty text or thinking, or a tool_use with empty input.
std::string block_start_json(size_t index, const ContentBlockOut& block);
// A piece of block `index` of `kind`: text_delta, thinking_delta or input_json_delta.
std::string block_delta_json(size_t index, ContentBlockOut::Kind kind, const std::string& text);
std::string block_stop_json(size_t index);
std::string message_delta_json(const StopOut& stop, const AnthropicUsage& u);
std::string message_stop_json();
std::string ping_json();

std::string count_tokens_json(int64_t input_tokens);

// {"type": "error", "error": {"type", "message"}}, the type from the HTTP status as Anthropic
// maps them (400 invalid_request_error, 401 authentication_error, 404 not_found_error, 413
// request_too_large, 429 rate_limit_error, 503 overloaded_error, other 5xx api_error).
std::string anthropic_error_body(int status, const std::string& message);

}  // namespace waste
