// Reading K3's XTML reply back, token by token (docs/PROMPT_FORMAT.md §3).
#pragma once

#include <memory>

#include "engine/base/rng.h"
#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/reply_parser.h"

namespace waste {

struct K3ReplyOptions {
  // Whether the prompt ended inside the think channel (k3_thinking), else inside response.
  bool thinking = true;
};

// K3's XTML reply (docs/PROMPT_FORMAT.md §3). The think channel gives reasoning, the response
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

}  // namespace waste
