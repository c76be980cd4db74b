#include "prompt_templates/kimi_k2/k2_reply_parser.h"

#include <algorithm>
#include <utility>

#include "engine/base/ascii.h"
#include "engine/tokenizer/pretokenizer.h"
#include "prompt_templates/kimi_k2/k2_markup.h"

namespace waste {

std::string k2_function_name(std::string_view id) {
  std::string_view s = trim(id);
  if (s.starts_with(k2::kIdPrefix)) s.remove_prefix(k2::kIdPrefix.size());
  if (const std::size_t colon = s.rfind(':'); colon != std::string_view::npos) {
    const std::string_view index = s.substr(colon + 1);
    if (!index.empty() &&
        std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
      s = s.substr(0, colon);
  }
  return std::string(s);
}

// Where text goes: the think channel, the answer, a call's id or its arguments. Structure is
// read from marker ids only.
class K2ReplyParser::State {
 public:
  State(const Tokenizer& tok, std::vector<TokenId> end_ids, K2ReplyParser& owner)
      : tok_(tok),
        end_ids_(std::move(end_ids)),
        section_begin_(require_special(tok, k2::kSectionBegin)),
        section_end_(require_special(tok, k2::kSectionEnd)),
        call_begin_(require_special(tok, k2::kCallBegin)),
        argument_begin_(require_special(tok, k2::kArgumentBegin)),
        call_end_(require_special(tok, k2::kCallEnd)),
        think_open_(tok.find_special(k2::kThinkOpen)),
        think_close_(tok.find_special(k2::kThinkClose)),
        owner_(owner),
        decoder_(tok) {
    if (!think_open_ || !think_close_) think_open_ = think_close_ = std::nullopt;
  }

  void push(TokenId id, std::vector<ReplyEvent>& out);
  void finish(bool end_of_message, std::vector<ReplyEvent>& out);

 private:
  enum class Where { kContent, kReasoning, kSection, kId, kArguments };

  void emit(std::vector<ReplyEvent>& out, ReplyEvent e) { owner_.emit(out, std::move(e)); }
  void text_event(std::vector<ReplyEvent>& out, ReplyEvent::Kind kind, std::string text) {
    ReplyEvent e;
    e.kind = kind;
    e.text = std::move(text);
    e.tool_index = index_;
    emit(out, std::move(e));
  }
  bool marker(TokenId id, std::vector<ReplyEvent>& out);
  void route(const std::string& text, std::vector<ReplyEvent>& out);
  void start_call(std::vector<ReplyEvent>& out);
  void end_call(std::vector<ReplyEvent>& out);

  const Tokenizer& tok_;
  const std::vector<TokenId> end_ids_;
  const TokenId section_begin_, section_end_, call_begin_, argument_begin_, call_end_;
  std::optional<TokenId> think_open_, think_close_;
  K2ReplyParser& owner_;
  StreamDecoder decoder_;
  Where where_ = Where::kContent;
  bool first_ = true;       // nothing read yet: a <think> here opens the think channel
  std::string id_;          // the call id's bytes, until <|tool_call_argument_begin|>
  bool call_open_ = false;  // a call was started and not yet ended
  bool wrote_arguments_ = false;
  std::size_t index_ = 0;  // the open call's position in this reply
  std::size_t calls_ = 0;
  bool done_ = false;
};

void K2ReplyParser::State::push(TokenId id, std::vector<ReplyEvent>& out) {
  if (done_) return;
  const bool first = std::exchange(first_, false);
  if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return finish(true, out);
  if (first && think_open_ && id == *think_open_) {
    where_ = Where::kReasoning;
    return;
  }
  if (marker(id, out) || tok_.is_special(id)) return;
  if (where_ == Where::kId) {
    id_.append(tok_.token_bytes(id));
    return;
  }
  route(decoder_.push(id), out);
}

// A structural marker: true when `id` was one.
bool K2ReplyParser::State::marker(TokenId id, std::vector<ReplyEvent>& out) {
  const bool known = id == section_begin_ || id == section_end_ || id == call_begin_ ||
                     id == argument_begin_ || id == call_end_ ||
                     (think_close_ && id == *think_close_);
  if (!known) return false;
  if (where_ != Where::kId) route(decoder_.flush(), out);
  if (think_close_ && id == *think_close_) {
    if (where_ == Where::kReasoning) where_ = Where::kContent;
  } else if (id == section_begin_) {
    if (where_ == Where::kContent || where_ == Where::kReasoning) where_ = Where::kSection;
  } else if (id == call_begin_) {
    end_call(out);  // a call begun inside another ends the first
    id_.clear();
    where_ = Where::kId;
  } else if (id == argument_begin_) {
    if (where_ == Where::kId) start_call(out);
  } else if (id == call_end_) {
    if (where_ == Where::kId) start_call(out);
    end_call(out);
    where_ = Where::kSection;
  } else {  // section end
    if (where_ == Where::kId) start_call(out);
    end_call(out);
    where_ = Where::kContent;
  }
  return true;
}

void K2ReplyParser::State::route(const std::string& text, std::vector<ReplyEvent>& out) {
  if (text.empty()) return;
  switch (where_) {
    case Where::kContent:
      return text_event(out, ReplyEvent::Kind::kContent, text);
    case Where::kReasoning:
      return text_event(out, ReplyEvent::Kind::kReasoning, text);
    case Where::kArguments: {
      if (!call_open_) return;
      const std::string_view piece = arguments_text(text, wrote_arguments_);
      if (piece.empty()) return;
      return text_event(out, ReplyEvent::Kind::kToolCallArguments, std::string(piece));
    }
    case Where::kSection:
    case Where::kId:
      return;  // whitespace between calls is not the answer
  }
}

void K2ReplyParser::State::start_call(std::vector<ReplyEvent>& out) {
  const std::string id(trim(replace_invalid_utf8(id_)));
  id_.clear();
  where_ = Where::kArguments;
  wrote_arguments_ = false;
  std::string name = k2_function_name(id);
  if (name.empty()) return;  // no function to call: the call is dropped
  call_open_ = true;
  index_ = calls_++;
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kToolCallStart;
  e.tool_index = index_;
  e.id = id;
  e.name = std::move(name);
  emit(out, std::move(e));
}

void K2ReplyParser::State::end_call(std::vector<ReplyEvent>& out) {
  if (!call_open_) return;
  call_open_ = false;
  if (!wrote_arguments_) text_event(out, ReplyEvent::Kind::kToolCallArguments, "{}");
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kToolCallEnd;
  e.tool_index = index_;
  e.cut = done_;
  emit(out, std::move(e));
}

void K2ReplyParser::State::finish(bool end_of_message, std::vector<ReplyEvent>& out) {
  if (done_) return;
  done_ = true;  // what is still open now is closed by the reply's end, not by the model
  if (where_ == Where::kId) {
    start_call(out);  // cut off before its arguments: the call is still named
  } else {
    route(decoder_.flush(), out);
  }
  end_call(out);
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kEnd;
  e.end_of_message = end_of_message;
  emit(out, std::move(e));
}

K2ReplyParser::K2ReplyParser(const Tokenizer& tok, std::vector<TokenId> end_ids)
    : state_(std::make_unique<State>(tok, std::move(end_ids), *this)) {}

K2ReplyParser::~K2ReplyParser() = default;

std::vector<ReplyEvent> K2ReplyParser::push(TokenId id) {
  std::vector<ReplyEvent> out;
  state_->push(id, out);
  return out;
}

std::vector<ReplyEvent> K2ReplyParser::finish() {
  std::vector<ReplyEvent> out;
  state_->finish(false, out);
  return out;
}

}  // namespace waste
