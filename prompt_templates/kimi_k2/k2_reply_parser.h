// Reading a Kimi K2 reply back, token by token (docs/PROMPT_FORMAT.md §4.5).
#pragma once

#include <memory>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/reply_parser.h"

namespace waste {

// K2's reply: an optional think channel (`<think>…</think>`, read only where the vocabulary has
// both as special tokens) gives reasoning; text gives content; each
// <|tool_call_begin|>ID<|tool_call_argument_begin|>JSON<|tool_call_end|> gives one tool call
// whose id is ID as the model wrote it (`functions.NAME:INDEX`, which the next prompt renders
// back verbatim) and whose name is read out of it. Arguments stream verbatim as they arrive
// (leading whitespace dropped; none at all become `{}`). A call whose id names no function is
// dropped. The turn ends at one of `end_ids`; other special tokens carry no text.
class K2ReplyParser final : public ReplyParser {
 public:
  // Throws FormatError if the tokenizer lacks one of K2's tool-call markers.
  K2ReplyParser(const Tokenizer& tok, std::vector<TokenId> end_ids);
  ~K2ReplyParser() override;
  std::vector<ReplyEvent> push(TokenId id) override;
  std::vector<ReplyEvent> finish() override;

 private:
  class State;
  std::unique_ptr<State> state_;
};

// The function name a K2 call id carries: `functions.NAME:INDEX` gives NAME; an id without the
// prefix or the index gives what is left. Surrounding whitespace is ignored.
std::string k2_function_name(std::string_view id);

}  // namespace waste
