#include "prompt_templates/reply_parser.h"

#include <algorithm>

#include "engine/base/error.h"

namespace waste {

void ReplyParser::emit(std::vector<ReplyEvent>& out, ReplyEvent e) {
  using K = ReplyEvent::Kind;
  const bool is_text =
      e.kind == K::kReasoning || e.kind == K::kContent || e.kind == K::kToolCallArguments;
  if (is_text && e.text.empty()) return;
  switch (e.kind) {
    case K::kReasoning:
      reply_.reasoning += e.text;
      break;
    case K::kContent:
      reply_.content += e.text;
      break;
    case K::kToolCallStart:
      reply_.tool_calls.push_back({e.id, e.name, ""});
      break;
    case K::kToolCallArguments:
      reply_.tool_calls[e.tool_index].arguments += e.text;
      break;
    case K::kToolCallEnd:
      break;
    case K::kEnd:
      reply_.ended = true;
      reply_.end_of_message = e.end_of_message;
      break;
  }
  out.push_back(std::move(e));
}

std::string_view arguments_text(std::string_view text, bool& started) {
  if (started) return text;
  const std::size_t b = text.find_first_not_of(" \t\r\n");  // JSON's whitespace
  if (b == std::string_view::npos) return {};
  started = true;
  return text.substr(b);
}

TokenId require_special(const Tokenizer& tok, std::string_view text) {
  std::optional<TokenId> id = tok.find_special(text);
  if (!id) fail<FormatError>("tokenizer: no special token {} (not the expected tokenizer?)", text);
  return *id;
}

TextReplyParser::TextReplyParser(const Tokenizer& tok, std::vector<TokenId> end_ids,
                                 bool keep_specials)
    : tok_(&tok), end_ids_(std::move(end_ids)), keep_specials_(keep_specials), decoder_(tok) {}

std::vector<ReplyEvent> TextReplyParser::push(TokenId id) {
  std::vector<ReplyEvent> out;
  if (reply().ended) return out;
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) {
    end(true, out);
    return out;
  }
  if (!keep_specials_ && tok_->is_special(id)) return out;
  ReplyEvent content;
  content.text = decoder_.push(id);
  emit(out, std::move(content));
  return out;
}

std::vector<ReplyEvent> TextReplyParser::finish() {
  std::vector<ReplyEvent> out;
  if (!reply().ended) end(false, out);
  return out;
}

void TextReplyParser::end(bool end_of_message, std::vector<ReplyEvent>& out) {
  ReplyEvent content;
  content.text = decoder_.flush();
  emit(out, std::move(content));
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kEnd;
  e.end_of_message = end_of_message;
  emit(out, std::move(e));
}

}  // namespace waste
