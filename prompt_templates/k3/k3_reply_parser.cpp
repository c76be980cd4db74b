#include "prompt_templates/k3/k3_reply_parser.h"

#include <algorithm>

#include "engine/base/error.h"
#include "engine/tokenizer/pretokenizer.h"
#include "prompt_templates/k3/k3_markup.h"
#include "protocol/json/python_json.h"

namespace waste {

namespace {

std::string json_string(std::string_view s) {
  return py_dumps(PyJson::string(std::string(s)), {});
}

// A string's JSON escaping without the quotes, for streaming its inside piece by piece (pieces
// are whole characters, so escaping them one at a time gives the same text).
std::string json_string_body(std::string_view s) {
  std::string quoted = json_string(s);
  return quoted.substr(1, quoted.size() - 2);
}

bool is_blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; });
}

// `&quot;` then `&amp;`, the reverse of the encoder's escaping. The two patterns cannot
// overlap, so one left-to-right pass gives the same text as two replace passes.
std::string unescape_attr(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    if (s.substr(i, 6) == "&quot;") {
      out += '"';
      i += 6;
    } else if (s.substr(i, 5) == "&amp;") {
      out += '&';
      i += 5;
    } else {
      out += s[i++];
    }
  }
  return out;
}

struct Header {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;

  const std::string* attr(std::string_view key) const {
    for (const auto& [k, v] : attrs) {
      if (k == key) return &v;
    }
    return nullptr;
  }
};

// `name key="value" key=value ...`; tolerant of anything (an unterminated quote runs to the
// end, a key without '=' is skipped).
Header parse_header(std::string_view raw_bytes) {
  const std::string text = replace_invalid_utf8(raw_bytes);
  std::string_view s = text;
  const std::string_view ws = " \t\r\n";
  Header h;
  std::size_t pos = s.find_first_not_of(ws);
  if (pos == std::string_view::npos) return h;
  std::size_t end = std::min(s.find_first_of(ws, pos), s.size());
  h.name = std::string(s.substr(pos, end - pos));
  pos = end;
  while ((pos = s.find_first_not_of(ws, pos)) != std::string_view::npos) {
    const std::size_t eq = s.find('=', pos);
    if (eq == std::string_view::npos) break;
    std::string_view key = s.substr(pos, eq - pos);
    key = key.substr(0, std::min(key.find_last_not_of(ws) + 1, key.size()));
    std::size_t vstart = eq + 1, vend;
    if (vstart < s.size() && s[vstart] == '"') {
      vstart++;
      vend = std::min(s.find('"', vstart), s.size());
      pos = std::min(vend + 1, s.size());
    } else {
      vend = std::min(s.find_first_of(ws, vstart), s.size());
      pos = vend;
    }
    if (key.find_first_of(ws) == std::string_view::npos && !key.empty()) {
      h.attrs.push_back({std::string(key), unescape_attr(s.substr(vstart, vend - vstart))});
    }
  }
  return h;
}

// What a typed argument's text becomes in the arguments JSON (the rule vLLM and SGLang apply).
std::string argument_json(const std::string& text) {
  try {
    return py_dumps(py_loads(text), {});
  } catch (const UsageError&) {
    return json_string(text);
  }
}

std::string new_call_id(Rng& rng) {
  static constexpr std::string_view kAlnum =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id = "call_";
  for (int i = 0; i < 24; i++) id += kAlnum[rng.below((uint32_t)kAlnum.size())];
  return id;
}

}  // namespace

// The K3 state machine. Elements are kept on a stack; text is routed by the innermost element
// that gives it a meaning.
class K3ReplyParser::State {
 public:
  State(const Tokenizer& tok, const K3ReplyOptions& options, Rng rng, K3ReplyParser& owner)
      : tok_(tok),
        open_(require_special(tok, k3::kOpen)),
        close_(require_special(tok, k3::kClose)),
        sep_(require_special(tok, k3::kSep)),
        end_(require_special(tok, k3::kEndOfMsg)),
        rng_(rng),
        owner_(owner),
        decoder_(tok),
        stack_{std::string(k3::kMessage),
               std::string(options.thinking ? k3::kThink : k3::kResponse)} {}

  void push(TokenId id, std::vector<ReplyEvent>& out);
  void finish(bool end_of_message, std::vector<ReplyEvent>& out);

 private:
  struct Call {
    bool open = false;
    bool dropped = false;  // no name: its content is ignored
    std::size_t index = 0;
    enum class Mode { kEmpty, kTyped, kRaw } mode = Mode::kEmpty;
  };
  struct Argument {
    bool open = false;
    bool streaming = false;  // a string value, written as it arrives
    std::string type;
    std::string text;  // non-string values, converted at the close
  };

  void emit(std::vector<ReplyEvent>& out, ReplyEvent e) { owner_.emit(out, std::move(e)); }
  void text_event(std::vector<ReplyEvent>& out, ReplyEvent::Kind kind, std::string text) {
    ReplyEvent e;
    e.kind = kind;
    e.text = std::move(text);
    e.tool_index = call_.index;
    emit(out, std::move(e));
  }
  void marker(TokenId id, std::vector<ReplyEvent>& out);
  void flush_text(std::vector<ReplyEvent>& out) { route(decoder_.flush(), out); }
  void route(const std::string& text, std::vector<ReplyEvent>& out);
  void loose_text(const std::string& text, std::vector<ReplyEvent>& out);
  void raw_arguments(const std::string& text, std::vector<ReplyEvent>& out);
  void apply_header(std::vector<ReplyEvent>& out);
  void open_element(const Header& h, std::vector<ReplyEvent>& out);
  void close_element(const std::string& name, std::vector<ReplyEvent>& out);
  void pop(std::vector<ReplyEvent>& out);
  void close_if_open(std::string_view name, std::vector<ReplyEvent>& out);
  void open_call(const Header& h, std::vector<ReplyEvent>& out);
  void open_argument(const Header& h, std::vector<ReplyEvent>& out);
  void close_argument(std::vector<ReplyEvent>& out);
  void close_call(std::vector<ReplyEvent>& out);
  bool on_stack(std::string_view name) const {
    return std::find(stack_.begin(), stack_.end(), name) != stack_.end();
  }

  const Tokenizer& tok_;
  const TokenId open_, close_, sep_, end_;
  Rng rng_;
  K3ReplyParser& owner_;
  StreamDecoder decoder_;
  std::vector<std::string> stack_;
  std::optional<std::string> header_;  // bytes after <|open|> / <|close|>, until <|sep|>
  bool header_closes_ = false;
  std::string loose_;  // whitespace outside any channel, held until text follows it
  Call call_;
  Argument arg_;
  bool raw_started_ = false;  // a raw json block has written past its leading whitespace
  std::size_t calls_ = 0;
  bool done_ = false;
};

void K3ReplyParser::State::push(TokenId id, std::vector<ReplyEvent>& out) {
  if (done_) return;
  if (id == open_ || id == close_ || id == sep_ || id == end_) {
    marker(id, out);
    return;
  }
  if (tok_.is_special(id)) return;
  if (header_) {
    header_->append(tok_.token_bytes(id));
    return;
  }
  route(decoder_.push(id), out);
}

void K3ReplyParser::State::marker(TokenId id, std::vector<ReplyEvent>& out) {
  flush_text(out);
  loose_.clear();
  if (id == end_) {
    finish(true, out);
  } else if (id == sep_) {
    if (header_) apply_header(out);  // a stray sep means nothing
  } else {
    header_ = std::string();  // a header left pending is abandoned
    header_closes_ = id == close_;
  }
}

void K3ReplyParser::State::route(const std::string& text, std::vector<ReplyEvent>& out) {
  if (text.empty()) return;
  for (auto it = stack_.rbegin(); it != stack_.rend(); ++it) {
    const std::string& el = *it;
    if (el == k3::kArgument) {
      if (!arg_.open) return;
      if (arg_.streaming) {
        text_event(out, ReplyEvent::Kind::kToolCallArguments, json_string_body(text));
      } else {
        arg_.text += text;
      }
      return;
    }
    if (el == k3::kJson) return raw_arguments(text, out);
    if (el == k3::kCall || el == k3::kTools) return;  // whitespace between elements
    if (el == k3::kThink) return text_event(out, ReplyEvent::Kind::kReasoning, text);
    if (el == k3::kResponse) return text_event(out, ReplyEvent::Kind::kContent, text);
    if (el == k3::kMessage) break;
    // An unknown element: its text belongs to whatever encloses it.
  }
  loose_text(text, out);
}

// Text outside any channel is most plausibly part of the answer, but a model's stray
// whitespace between elements is not.
void K3ReplyParser::State::loose_text(const std::string& text, std::vector<ReplyEvent>& out) {
  loose_ += text;
  if (is_blank(loose_)) return;
  text_event(out, ReplyEvent::Kind::kContent, std::move(loose_));
  loose_.clear();
}

void K3ReplyParser::State::raw_arguments(const std::string& text, std::vector<ReplyEvent>& out) {
  if (!call_.open || call_.dropped || call_.mode != Call::Mode::kRaw) return;
  const std::string_view piece = arguments_text(text, raw_started_);
  if (piece.empty()) return;
  text_event(out, ReplyEvent::Kind::kToolCallArguments, std::string(piece));
}

void K3ReplyParser::State::apply_header(std::vector<ReplyEvent>& out) {
  const Header h = parse_header(*header_);
  header_.reset();
  if (header_closes_) {
    close_element(h.name, out);
  } else if (!h.name.empty()) {
    open_element(h, out);
  }
}

void K3ReplyParser::State::open_element(const Header& h, std::vector<ReplyEvent>& out) {
  const std::string& name = h.name;
  // The answer or the calls begin: a think channel the model forgot to close ends here.
  if (name == k3::kResponse || name == k3::kTools) close_if_open(k3::kThink, out);
  const bool again = !stack_.empty() && stack_.back() == name;
  if ((name == k3::kThink || name == k3::kResponse) && again) return;
  if (name == k3::kCall) open_call(h, out);
  if (name == k3::kArgument) open_argument(h, out);
  if (name == k3::kJson && call_.open && call_.mode != Call::Mode::kTyped) {
    call_.mode = Call::Mode::kRaw;
  }
  stack_.push_back(name);
}

void K3ReplyParser::State::close_if_open(std::string_view name, std::vector<ReplyEvent>& out) {
  if (on_stack(name)) close_element(std::string(name), out);
}

// Pops down to and including the innermost `name`; a close with nothing to match is ignored.
void K3ReplyParser::State::close_element(const std::string& name, std::vector<ReplyEvent>& out) {
  if (!on_stack(name)) return;
  while (true) {
    const bool last = stack_.back() == name;
    pop(out);
    if (last) return;
  }
}

void K3ReplyParser::State::pop(std::vector<ReplyEvent>& out) {
  const std::string el = std::move(stack_.back());
  stack_.pop_back();
  if (el == k3::kArgument) close_argument(out);
  if (el == k3::kCall) close_call(out);
}

void K3ReplyParser::State::open_call(const Header& h, std::vector<ReplyEvent>& out) {
  close_if_open(k3::kCall, out);  // a call opened inside another ends the first
  call_ = Call{};
  call_.open = true;
  const std::string* name = h.attr("tool");
  if (!name) {
    call_.dropped = true;
    return;
  }
  call_.index = calls_++;
  raw_started_ = false;
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kToolCallStart;
  e.tool_index = call_.index;
  e.id = new_call_id(rng_);
  e.name = *name;
  emit(out, std::move(e));
}

void K3ReplyParser::State::open_argument(const Header& h, std::vector<ReplyEvent>& out) {
  close_if_open(k3::kArgument, out);
  arg_ = Argument{};
  const std::string* key = h.attr("key");
  if (!call_.open || call_.dropped || call_.mode == Call::Mode::kRaw || !key) return;
  const std::string* type = h.attr("type");
  arg_.open = true;
  arg_.type = type ? *type : "string";
  arg_.streaming = arg_.type == "string";
  std::string prefix = call_.mode == Call::Mode::kEmpty ? "{" : ", ";
  call_.mode = Call::Mode::kTyped;
  prefix += json_string(*key) + ": ";
  if (arg_.streaming) prefix += '"';
  text_event(out, ReplyEvent::Kind::kToolCallArguments, std::move(prefix));
}

void K3ReplyParser::State::close_argument(std::vector<ReplyEvent>& out) {
  if (!arg_.open) return;
  std::string tail = arg_.streaming ? "\"" : argument_json(arg_.text);
  arg_ = Argument{};
  text_event(out, ReplyEvent::Kind::kToolCallArguments, std::move(tail));
}

void K3ReplyParser::State::close_call(std::vector<ReplyEvent>& out) {
  if (!call_.open) return;
  if (!call_.dropped) {
    // Typed arguments close their object; a call with no arguments at all gets an empty one.
    const bool raw = call_.mode == Call::Mode::kRaw && raw_started_;
    const char* tail = call_.mode == Call::Mode::kTyped ? "}" : raw ? "" : "{}";
    text_event(out, ReplyEvent::Kind::kToolCallArguments, tail);
    ReplyEvent e;
    e.kind = ReplyEvent::Kind::kToolCallEnd;
    e.tool_index = call_.index;
    e.cut = done_;
    emit(out, std::move(e));
  }
  call_.open = false;
}

void K3ReplyParser::State::finish(bool end_of_message, std::vector<ReplyEvent>& out) {
  if (done_) return;
  done_ = true;  // what is still open now is closed by the reply's end, not by the model
  flush_text(out);
  header_.reset();  // a tag cut off before its <|sep|> says nothing usable
  while (!stack_.empty()) pop(out);
  ReplyEvent e;
  e.kind = ReplyEvent::Kind::kEnd;
  e.end_of_message = end_of_message;
  emit(out, std::move(e));
}

K3ReplyParser::K3ReplyParser(const Tokenizer& tok, const K3ReplyOptions& options, Rng rng)
    : state_(std::make_unique<State>(tok, options, rng, *this)) {}

K3ReplyParser::~K3ReplyParser() = default;

std::vector<ReplyEvent> K3ReplyParser::push(TokenId id) {
  std::vector<ReplyEvent> out;
  state_->push(id, out);
  return out;
}

std::vector<ReplyEvent> K3ReplyParser::finish() {
  std::vector<ReplyEvent> out;
  state_->finish(false, out);
  return out;
}

}  // namespace waste
