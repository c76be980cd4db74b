// Encodes responses in the OpenAI wire format: chat completions and their stream chunks, text
// completions, model lists, usage.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
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

// One token's log-probability. `token` is its bytes as text when they are whole UTF-8 characters,
// else "bytes:" and each byte as \xNN (OpenAI's spelling); `bytes` lists them either way.
struct TokenLogprobOut {
  std::string bytes;
  std::optional<double> logprob;  // none only for an echoed prompt's first token (legacy shape)
  std::vector<std::pair<std::string, double>> top;  // (bytes, logprob), most likely first
};

struct ResponseHeader {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  std::string system_fingerprint;
};

struct ChatChoiceOut {
  ChatMessageOut message;
  std::string finish_reason;
  // The content tokens' log-probabilities, when the request asked for them.
  std::optional<std::vector<TokenLogprobOut>> logprobs;
};

// The choices are written in order, their indexes counting from 0.
std::string chat_completion_json(const ResponseHeader& h, std::span<const ChatChoiceOut> choices,
                                 const Usage& u);

// One chat.completion.chunk. Set exactly what the chunk carries; empty optionals are omitted.
struct ChatDelta {
  int index = 0;      // the choice
  bool role = false;  // a choice's first chunk announces the assistant role
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
  std::optional<std::vector<TokenLogprobOut>> logprobs;  // the tokens of `content`
};
std::string chat_chunk_json(const ResponseHeader& h, const ChatDelta& d);
// The usage chunk of stream_options.include_usage: empty choices.
std::string chat_usage_chunk_json(const ResponseHeader& h, const Usage& u);

// A text completion's choice. Legacy logprobs: parallel lists of tokens, their log-probabilities,
// their alternatives (an object from token to log-probability) and `text_offset`, each token's
// offset in code points from the start of `text`.
struct CompletionChoiceOut {
  std::string text;
  std::string finish_reason;  // empty in a stream's chunks before the last
  std::optional<std::vector<TokenLogprobOut>> logprobs;
  int64_t text_offset = 0;  // code points of text written before this chunk's (streams)
};
std::string completion_json(const ResponseHeader& h, std::span<const CompletionChoiceOut> choices,
                            const Usage& u);
std::string completion_chunk_json(const ResponseHeader& h, int index,
                                  const CompletionChoiceOut& chunk);
std::string completion_usage_chunk_json(const ResponseHeader& h, const Usage& u);

std::string models_json(const std::string& id, int64_t created, int64_t context_length);
// One model object, as GET /v1/models/{id} answers.
std::string model_json(const std::string& id, int64_t created, int64_t context_length);

}  // namespace waste
