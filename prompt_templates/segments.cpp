#include "prompt_templates/segments.h"

namespace waste {

std::vector<TokenId> tokenize_segments(const Tokenizer& tok, const std::vector<Segment>& segments) {
  std::vector<TokenId> out;
  for (const Segment& s : segments) {
    std::vector<TokenId> ids = s.is_markup ? tok.encode_markup(s.text) : tok.encode_text(s.text);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

}  // namespace waste
