// Reading the model's reply back, token id by token id: reasoning, content and tool calls, as
// incremental events for streaming and as a whole.
//
// Structure is recognised only by token id (a model that spells "<|sep|>" with ordinary tokens
// wrote text), text deltas are always whole UTF-8 characters, and nothing the model writes makes
// the parser throw: unclosed elements, stray closes, text outside elements and truncation all
// come out as the most plausible reading.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/rng.h"
#include "engine/tokenizer.h"

namespace waste {

struct ReplyEvent {
  enum class Kind {
    kReasoning,          // text: reasoning delta
    kContent,            // text: content delta
    kToolCallStart,      // tool_index, id, name
    kToolCallArguments,  // tool_index, text: a piece of the arguments JSON
    kToolCallEnd,        // tool_index: its arguments are complete
    kEnd,                // end_of_message: whether the model closed its turn itself
  };
  Kind kind = Kind::kContent;
  std::string text;
  std::size_t tool_index = 0;  // the call's 0-based position in this reply
  std::string id;
  std::string name;
  bool end_of_message = false;

  bool operator==(const ReplyEvent&) const = default;
};

struct ParsedToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text

  bool operator==(const ParsedToolCall&) const = default;
};

// The reply so far: exactly the concatenation of the events emitted.
struct ParsedReply {
  std::string reasoning;
  std::string content;
  std::vector<ParsedToolCall> tool_calls;
  bool ended = false;           // kEnd was emitted
  bool end_of_message = false;  // the model wrote its end token
};

class ReplyParser {
 public:
  virtual ~ReplyParser() = default;
  // One generated token. Tokens after the end token are ignored.
  virtual std::vector<ReplyEvent> push(TokenId id) = 0;
  // The output is over (end token, stop string, max_tokens, cancellation): emits held-back
  // text, closes whatever is still open and ends with kEnd. Calling it again emits nothing.
  virtual std::vector<ReplyEvent> finish() = 0;
  const ParsedReply& reply() const { return reply_; }

 protected:
  void emit(std::vector<ReplyEvent>& out, ReplyEvent e);

 private:
  ParsedReply reply_;
};

struct K3ReplyOptions {
  // Whether the prompt ended inside the think channel (k3_thinking), else inside response.
  bool thinking = true;
};

// K3's XTML reply (k3-release.md §5.9, §6). The think channel gives reasoning, the response
// channel content, and each tools/call element one tool call whose typed arguments are turned
// back into a JSON object (Python's json.dumps style, non-ASCII kept): a `string` argument (or
// one with no type) is its raw text; any other type is its text read as JSON, else that text as
// a string. A raw `json` element inside a call gives the arguments verbatim. Calls without a
// `tool` name are dropped. Ids are "call_" + 24 letters and digits drawn from `rng`.
// Arguments stream: a string value as it arrives, other values when their element closes.
// Special tokens other than the four markers carry no text and are dropped.
class K3ReplyParser final : public ReplyParser {
 public:
  // Throws FormatError if the tokenizer lacks one of K3's markers.
  K3ReplyParser(const Tokenizer& tok, const K3ReplyOptions& options, Rng rng);
  ~K3ReplyParser() override;
  std::vector<ReplyEvent> push(TokenId id) override;
  std::vector<ReplyEvent> finish() override;

 private:
  class State;
  std::unique_ptr<State> state_;
};

// Kimi-Linear: everything up to <|im_end|> is content. Its tool-call format is not documented
// (k3-release.md §3, §8), so no tool calls are read; other special tokens are dropped.
class KimiLinearReplyParser final : public ReplyParser {
 public:
  // `end_id` defaults to the tokenizer's <|im_end|>; throws FormatError if there is none.
  explicit KimiLinearReplyParser(const Tokenizer& tok, std::optional<TokenId> end_id = {});
  std::vector<ReplyEvent> push(TokenId id) override;
  std::vector<ReplyEvent> finish() override;

 private:
  const Tokenizer* tok_;
  TokenId end_id_;
  StreamDecoder decoder_;
};

// The whole reply at once (push every id, then finish).
ParsedReply parse_reply(ReplyParser& parser, std::span<const TokenId> ids);

}  // namespace waste
