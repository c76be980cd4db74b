// What a chat template produces. A template turns a Conversation into Segments; each segment is
// tokenized on its own, markup with specials allowed and text with specials disabled, so client
// text can never forge a control token, and segments are never merged (BPE is not associative).
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace waste {

struct Segment {
  std::string text;
  bool is_markup = false;

  bool operator==(const Segment&) const = default;
};

// Each segment through its own entry point (encode_markup or encode_text), concatenated.
std::vector<TokenId> tokenize_segments(const Tokenizer& tok, const std::vector<Segment>& segments);

}  // namespace waste
