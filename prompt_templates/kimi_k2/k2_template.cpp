#include "prompt_templates/kimi_k2/k2_template.h"

#include "engine/base/error.h"
#include "prompt_templates/kimi_k2/k2_markup.h"
#include "protocol/json/python_json.h"

namespace waste {
namespace {

// The release's default system turn, written when the conversation does not open with one.
constexpr std::string_view kDefaultSystem = "You are Kimi, an AI assistant created by Moonshot AI.";

// Segments cut only at special tokens: text appends to the text segment before it.
class Builder {
 public:
  explicit Builder(bool think_tokens) : think_tokens_(think_tokens) {}

  void markup(std::string_view s) { out_.push_back({std::string(s), true}); }
  void text(std::string_view s) {
    if (s.empty()) return;
    if (!out_.empty() && !out_.back().is_markup)
      out_.back().text.append(s);
    else
      out_.push_back({std::string(s), false});
  }
  // <think> / </think>: a token of their own only where the vocabulary has them.
  void think_marker(std::string_view s) { think_tokens_ ? markup(s) : text(s); }
  std::vector<Segment> take() { return std::move(out_); }

 private:
  bool think_tokens_;
  std::vector<Segment> out_;
};

// json.dumps(value, ensure_ascii=False): the template's `tojson` as the serving stacks define it
// (Python's default separators, keys in the order sent).
std::string template_json(std::string_view compact, std::string_view what) {
  return py_dumps(py_loads(compact, what), {});
}

// A declaration as the chat-completions wire holds it: {"type":"function","function":{...}}.
// A flat one (the Responses API's) is put in that wrapper, as the serving stacks do before
// templating.
PyJson chat_declaration(const Tool& t, std::size_t i) {
  PyJson d = py_loads(t.declaration, "tools[" + std::to_string(i) + "]");
  if (d.find("function")) return d;
  PyJson fn = PyJson::object();
  for (const PyMember& m : d.members)
    if (m.key != "type") fn.set(m.key, m.value);
  PyJson wrapped = PyJson::object();
  wrapped.set("type", PyJson::string("function"));
  wrapped.set("function", std::move(fn));
  return wrapped;
}

std::string tools_json(const std::vector<Tool>& tools) {
  PyJson list = PyJson::array();
  for (std::size_t i = 0; i < tools.size(); i++)
    list.items.push_back(chat_declaration(tools[i], i));
  return py_dumps(list, {});
}

void content(Builder& b, const MessageContent& c, std::size_t at) {
  if (const std::string* s = std::get_if<std::string>(&c)) return b.text(*s);
  if (const auto* parts = std::get_if<std::vector<ContentPart>>(&c)) {
    for (std::size_t j = 0; j < parts->size(); j++) {
      if ((*parts)[j].kind == ContentPart::Kind::kImage)
        fail<UsageError>("messages[{}].content[{}]: this model does not take images", at, j);
      b.text((*parts)[j].text);
    }
  }
}

// `<|im_ROLE|>NAME<|im_middle|>`: NAME is the message's `name`, else (absent or empty, as the
// template's `or` reads it) its role; every role but user and assistant opens as a system turn.
void open_turn(Builder& b, const ChatMessage& m) {
  std::string_view marker = k2::kSystem, role = "system";
  if (m.role == Role::kUser) {
    marker = k2::kUser;
    role = "user";
  } else if (m.role == Role::kAssistant) {
    marker = k2::kAssistant;
    role = "assistant";
  } else if (m.role == Role::kTool) {
    role = "tool";
  }
  b.markup(marker);
  b.text(m.name && !m.name->empty() ? std::string_view(*m.name) : role);
  b.markup(k2::kMiddle);
}

// A string is written as sent; an object as the template's tojson writes it.
std::string call_arguments(const ToolCall& c, std::size_t at, std::size_t j) {
  switch (c.form) {
    case ToolCall::ArgumentsForm::kString:
      return c.arguments;
    case ToolCall::ArgumentsForm::kObject:
      return template_json(c.arguments, "messages[" + std::to_string(at) + "].tool_calls[" +
                                            std::to_string(j) + "].function.arguments");
    case ToolCall::ArgumentsForm::kNone:
      break;
  }
  return "{}";  // no arguments sent: the call takes none
}

void tool_calls(Builder& b, const ChatMessage& m, std::size_t at) {
  b.markup(k2::kSectionBegin);
  for (std::size_t j = 0; j < m.tool_calls.size(); j++) {
    const ToolCall& c = m.tool_calls[j];
    b.markup(k2::kCallBegin);
    b.text(c.id.value_or(""));
    b.markup(k2::kArgumentBegin);
    b.text(call_arguments(c, at, j));
    b.markup(k2::kCallEnd);
  }
  b.markup(k2::kSectionEnd);
}

// One message. An assistant turn opens the think channel: empty in the history, with its
// reasoning after the last plain reply (`keep_reasoning`).
void message(Builder& b, const ChatMessage& m, std::size_t at, bool keep_reasoning) {
  open_turn(b, m);
  if (m.role == Role::kAssistant) {
    b.think_marker(k2::kThinkOpen);
    if (keep_reasoning) b.text(m.reasoning_content);
    b.think_marker(k2::kThinkClose);
    content(b, m.content, at);
    if (!m.tool_calls.empty()) tool_calls(b, m, at);
  } else if (m.role == Role::kTool) {
    b.text("## Return of " + m.tool_call_id.value_or("") + "\n");
    content(b, m.content, at);
  } else {
    content(b, m.content, at);
  }
  b.markup(k2::kEnd);
}

// The last assistant message without tool calls: its reasoning and everything before it is
// history; the turns after it (an agent's calls and results in progress) keep their reasoning.
std::ptrdiff_t last_plain_reply(const std::vector<ChatMessage>& ms) {
  for (std::size_t i = ms.size(); i-- > 0;)
    if (ms[i].role == Role::kAssistant && ms[i].tool_calls.empty()) return (std::ptrdiff_t)i;
  return -1;
}

}  // namespace

const std::vector<std::string_view>& k2_turn_markers() {
  static const std::vector<std::string_view> markers{k2::kSystem, k2::kUser, k2::kAssistant,
                                                     k2::kMiddle, k2::kEnd};
  return markers;
}

const std::vector<std::string_view>& k2_tool_markers() {
  static const std::vector<std::string_view> markers{
      k2::kSectionBegin, k2::kSectionEnd, k2::kCallBegin, k2::kArgumentBegin, k2::kCallEnd};
  return markers;
}

std::size_t k2_calls_so_far(const Conversation& request) {
  std::size_t n = 0;
  for (const ChatMessage& m : request.messages) n += m.tool_calls.size();
  return n;
}

std::vector<Segment> render_k2(const Conversation& request, const K2RenderOptions& options) {
  Builder b(options.think_tokens);
  if (!request.tools.empty()) {
    b.markup(k2::kSystem);
    b.text("tool_declare");
    b.markup(k2::kMiddle);
    b.text(tools_json(request.tools));
    b.markup(k2::kEnd);
  }
  const std::vector<ChatMessage>& ms = request.messages;
  if (ms.empty() || ms[0].role != Role::kSystem) {
    b.markup(k2::kSystem);
    b.text("system");
    b.markup(k2::kMiddle);
    b.text(kDefaultSystem);
    b.markup(k2::kEnd);
  }
  const std::ptrdiff_t last = last_plain_reply(ms);
  for (std::size_t i = 0; i < ms.size(); i++) {
    if (!ms[i].tools.empty())
      fail<UsageError>("messages[{}].tools: this model's format declares tools only up front", i);
    message(b, ms[i], i, (std::ptrdiff_t)i > last);
  }
  if (options.add_generation_prompt) {
    b.markup(k2::kAssistant);
    b.text("assistant");
    b.markup(k2::kMiddle);
  }
  return b.take();
}

}  // namespace waste
