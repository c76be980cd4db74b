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

#include "engine/tokenizer/tokenizer.h"

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
  bool cut = false;  // kToolCallEnd: the reply ended inside the call and finish() closed it

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

// What a call's JSON arguments keep of `text`, the next piece of them: the whitespace before
// their first character is dropped, and `started` turns true at that character.
std::string_view arguments_text(std::string_view text, bool& started);

// The id of a special token the parser needs; FormatError naming it when the tokenizer has none.
TokenId require_special(const Tokenizer& tok, std::string_view text);

// A reply that is all content (Kimi-Linear, the raw family, plain completions): text up to one
// of `end_ids`, decoded in whole UTF-8 characters. Special tokens other than the ends are
// dropped unless `keep_specials` (a completion shows what the model wrote).
class TextReplyParser : public ReplyParser {
 public:
  TextReplyParser(const Tokenizer& tok, std::vector<TokenId> end_ids, bool keep_specials = false);
  std::vector<ReplyEvent> push(TokenId id) override;
  std::vector<ReplyEvent> finish() override;

 private:
  void end(bool end_of_message, std::vector<ReplyEvent>& out);

  const Tokenizer* tok_;
  std::vector<TokenId> end_ids_;
  bool keep_specials_;
  StreamDecoder decoder_;
};

}  // namespace waste
