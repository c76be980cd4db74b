// Encodes responses in the OpenAI wire format: chat completions and their stream chunks, text
// completions, model lists, usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace waste {

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens restored from a snapshot instead of prefilled
};

struct ToolCallOut {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ChatMessageOut {
  std::string content;
  std::string reasoning;  // reasoning_content; omitted when empty
  std::vector<ToolCallOut> tool_calls;
  // The request used the legacy `functions`: the (single) call is written as `function_call`.
  bool legacy_function_call = false;
};

struct ResponseHeader {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

std::string chat_completion_json(const ResponseHeader& h, const ChatMessageOut& m,
                                 const std::string& finish_reason, const Usage& u);

// One chat.completion.chunk. Set exactly what the chunk carries; empty optionals are omitted.
struct ChatDelta {
  bool role = false;  // the first chunk announces the assistant role
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  // A tool call's start (id and name, empty arguments) or a piece of its arguments.
  struct Tool {
    int index = 0;
    std::optional<std::string> id, name;
    std::string arguments;
  };
  std::optional<Tool> tool;
  bool legacy_function_call = false;  // `tool` is written as the legacy `function_call` delta
  std::optional<std::string> finish_reason;
};
std::string chat_chunk_json(const ResponseHeader& h, const ChatDelta& d);
// The usage chunk of stream_options.include_usage: empty choices.
std::string chat_usage_chunk_json(const ResponseHeader& h, const Usage& u);

std::string completion_json(const ResponseHeader& h, const std::string& text,
                            const std::string& finish_reason, const Usage& u);
std::string completion_chunk_json(const ResponseHeader& h, const std::string& text,
                                  const std::optional<std::string>& finish_reason);
std::string completion_usage_chunk_json(const ResponseHeader& h, const Usage& u);

std::string models_json(const std::string& id, int64_t created, int64_t context_length);

}  // namespace waste
