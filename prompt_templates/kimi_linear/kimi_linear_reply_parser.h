// Kimi-Linear's reply: everything up to <|im_end|> is content. Its tool-call format is not
// documented (docs/PROMPT_FORMAT.md §4.3), so no tool calls are read; other special tokens are
// dropped.
#pragma once

#include <optional>

#include "prompt_templates/kimi_linear/kimi_linear_markup.h"
#include "prompt_templates/reply_parser.h"

namespace waste {

class KimiLinearReplyParser final : public TextReplyParser {
 public:
  // `end_id` defaults to the tokenizer's <|im_end|>; throws FormatError if there is none.
  explicit KimiLinearReplyParser(const Tokenizer& tok, std::optional<TokenId> end_id = {})
      : TextReplyParser(tok, {end_id ? *end_id : require_special(tok, kimi_linear::kEnd)}) {}
};

}  // namespace waste
