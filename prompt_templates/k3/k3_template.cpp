#include "prompt_templates/k3/k3_template.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "engine/base/ascii.h"
#include "engine/base/error.h"
#include "prompt_templates/k3/k3_markup.h"
#include "protocol/json/python_json.h"

namespace waste {
namespace {

using k3::kClose;
using k3::kEndOfMsg;
using k3::kImageNeedle;
using k3::kOpen;
using k3::kSep;
constexpr std::string_view kFence = "```";

using Attrs = std::vector<std::pair<std::string, std::string>>;

// `&` first, so the ampersand of `&quot;` is not escaped again; nothing else is escaped.
std::string escape_attr(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// Which value kind an argument's `type` attribute names (bool before number, as in Python).
std::string_view xtml_type(const PyJson& v) {
  switch (v.type) {
    case PyJson::Type::kBool:
      return "boolean";
    case PyJson::Type::kNull:
      return "null";
    case PyJson::Type::kInt:
    case PyJson::Type::kFloat:
      return "number";
    case PyJson::Type::kString:
      return "string";
    case PyJson::Type::kObject:
      return "object";
    case PyJson::Type::kArray:
      return "array";
  }
  return "array";
}

struct TypedArgument {
  std::string key;
  std::string type;
  std::string text;
};

// Arguments given as an object: every non-string value is re-dumped with Python's default
// separators, keys in the order sent.
std::vector<TypedArgument> object_arguments(std::string_view json) {
  std::vector<TypedArgument> out;
  PyJson obj = py_loads(json, "tool call arguments");
  for (const PyMember& m : obj.members) {
    std::string text = m.value.type == PyJson::Type::kString ? m.value.text : py_dumps(m.value, {});
    out.push_back({m.key, std::string(xtml_type(m.value)), std::move(text)});
  }
  return out;
}

// Arguments given as a string, read one level deep (revision a590ce09): string values are
// decoded, every other value keeps the exact text the client wrote (1e2 stays 1e2), a repeated
// key keeps its first place and takes the last value, and text after the closing brace is
// ignored. nullopt when the string does not start with a well-formed object.
std::optional<std::vector<TypedArgument>> string_arguments(std::string_view s) {
  std::vector<TypedArgument> out;
  std::size_t pos = py_skip_whitespace(s, 0);
  if (pos >= s.size() || s[pos] != '{') return std::nullopt;
  pos = py_skip_whitespace(s, pos + 1);
  if (pos < s.size() && s[pos] == '}') return out;
  while (true) {
    pos = py_skip_whitespace(s, pos);
    if (pos >= s.size() || s[pos] != '"') return std::nullopt;
    std::optional<PyJson> key = py_parse_value(s, pos);
    pos = py_skip_whitespace(s, pos);
    if (!key || pos >= s.size() || s[pos] != ':') return std::nullopt;
    const std::size_t start = py_skip_whitespace(s, pos + 1);
    pos = start;
    std::optional<PyJson> value = py_parse_value(s, pos);
    if (!value) return std::nullopt;
    TypedArgument arg{key->text, std::string(xtml_type(*value)),
                      value->type == PyJson::Type::kString
                          ? value->text
                          : std::string(s.substr(start, pos - start))};
    auto same = [&](const TypedArgument& a) { return a.key == arg.key; };
    if (auto it = std::find_if(out.begin(), out.end(), same); it != out.end()) {
      *it = std::move(arg);
    } else {
      out.push_back(std::move(arg));
    }
    pos = py_skip_whitespace(s, pos);
    if (pos >= s.size()) return std::nullopt;
    if (s[pos] == '}') return out;
    if (s[pos] != ',') return std::nullopt;
    pos++;
  }
}

std::string tools_json(const std::vector<Tool>& tools) {
  std::string out = "[";
  for (std::size_t i = 0; i < tools.size(); i++) {
    if (i > 0) out += ',';
    out += canonical_json(tools[i].declaration);
  }
  return out + "]";
}

std::string tool_declare_body(const std::vector<Tool>& tools, bool dynamic) {
  const std::string head =
      dynamic ? "## New Tools Available\n"
                "The system dynamically extends the toolset via lazy-loading.\n"
                "You have access to all existing and extended tools.\n"
                "Here are the specs for the extended tools.\n\n"
              : "# Tools\nHere are the available tools, described in JSONSchema.\n\n";
  return fmt::format("{}{}json\n{}\n{}", head, kFence, tools_json(tools), kFence);
}

std::string effort_body(std::string_view effort) {
  return fmt::format(
      "`thinking_effort` guides on how much to think in your thinking channel (not including the "
      "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
      "Now the system is invoked with `thinking_effort={}`.",
      effort);
}

std::string tool_choice_body(ToolChoice::Kind kind) {
  if (kind == ToolChoice::Kind::kRequired) {
    return "The system is invoked with `tool_choice=required`.\n"
           "You MUST call tools in the next message.";
  }
  return "The system is invoked with `tool_choice=none`.\n"
         "You MUST NOT call any tools in the next message.";
}

std::string response_format_body(const ResponseFormat& rf) {
  const std::string_view type =
      rf.kind == ResponseFormat::Kind::kJsonObject ? "json_object" : "json_schema";
  std::string body = fmt::format(
      "The system is invoked with `response_format={}`.\n"
      "Your response must be raw JSON data without markdown code blocks ({}json) or any "
      "additional formatting.",
      type, kFence);
  if (rf.kind == ResponseFormat::Kind::kJsonSchema) {
    body += fmt::format("\nThe JSON data must match the following schema:\n{}json\n{}\n{}", kFence,
                        canonical_json(rf.schema), kFence);
  }
  return body;
}

// Builds the segment list; holds the image prompts handed out so far.
class K3Writer {
 public:
  K3Writer(const std::optional<std::vector<std::string>>& prompts, bool needles)
      : prompts_(prompts), needles_(needles) {}

  void control(std::string_view s) { out_.push_back({std::string(s), true}); }
  void text(std::string_view s) {
    if (!s.empty()) out_.push_back({std::string(s), false});
  }
  void open(std::string_view tag, const Attrs& attrs = {}) {
    control(kOpen);
    text(tag);
    for (const auto& [key, value] : attrs) {
      text(" " + key);
      text("=\"");
      text(escape_attr(value));
      text("\"");
    }
    control(kSep);
  }
  void close(std::string_view tag) {
    control(kClose);
    text(tag);
    control(kSep);
  }
  void end_message() {
    close(k3::kMessage);
    control(kEndOfMsg);
  }
  // An encoder note: a system message with a `type`, body stripped.
  void note(std::string_view type, std::string_view body) {
    open(k3::kMessage, {{"role", "system"}, {"type", std::string(type)}});
    text(std::string(trim(body)));  // as Python's str.strip(): a note's whitespace is ASCII
    end_message();
  }

  // Client text; with image prompts, each needle in it takes the next one.
  void client_text(std::string_view s) {
    if (!prompts_ || !needles_ || s.find(kImageNeedle) == std::string_view::npos) {
      text(s);
      return;
    }
    std::size_t at;
    while ((at = s.find(kImageNeedle)) != std::string_view::npos) {
      text(s.substr(0, at));
      image();
      s.remove_prefix(at + kImageNeedle.size());
    }
    text(s);
  }
  void image() {
    if (!prompts_) {
      control(kImageNeedle);
      return;
    }
    if (used_ >= prompts_->size()) fail<UsageError>("messages: more images than image prompts");
    control((*prompts_)[used_++]);
  }
  void content(const MessageContent& c) {
    if (const std::string* s = std::get_if<std::string>(&c)) {
      client_text(*s);
    } else if (const auto* parts = std::get_if<std::vector<ContentPart>>(&c)) {
      for (const ContentPart& p : *parts) {
        if (p.kind == ContentPart::Kind::kImage)
          image();
        else
          client_text(p.text);
      }
    }
  }

  std::vector<Segment> finish() {
    if (prompts_ && used_ != prompts_->size()) {
      fail<UsageError>("messages: {} image prompts given but {} images placed", prompts_->size(),
                       used_);
    }
    return std::move(out_);
  }

 private:
  const std::optional<std::vector<std::string>>& prompts_;
  bool needles_ = true;
  std::size_t used_ = 0;
  std::vector<Segment> out_;
};

void render_arguments(K3Writer& w, const ToolCall& call) {
  std::optional<std::vector<TypedArgument>> args;
  if (call.form == ToolCall::ArgumentsForm::kObject) {
    args = object_arguments(call.arguments);
  } else if (call.form == ToolCall::ArgumentsForm::kString && !call.arguments.empty()) {
    args = string_arguments(call.arguments);
    if (!args) {
      // Unusable as an object: the text goes back verbatim in a raw json element.
      w.open(k3::kJson, {{"type", "object"}});
      w.client_text(call.arguments);
      w.close(k3::kJson);
      return;
    }
  }
  for (const TypedArgument& a : args.value_or(std::vector<TypedArgument>{})) {
    w.open(k3::kArgument, {{"key", a.key}, {"type", a.type}});
    w.client_text(a.text);
    w.close(k3::kArgument);
  }
}

void render_tool_calls(K3Writer& w, const std::vector<ToolCall>& calls) {
  if (calls.empty()) return;
  w.open(k3::kTools);
  for (std::size_t i = 0; i < calls.size(); i++) {
    w.open(k3::kCall, {{"tool", calls[i].name}, {"index", std::to_string(i + 1)}});
    render_arguments(w, calls[i]);
    w.close(k3::kCall);
  }
  w.close(k3::kTools);
}

Attrs role_attrs(std::string_view role, const ChatMessage& m) {
  Attrs attrs{{"role", std::string(role)}};
  if (m.name && !m.name->empty()) attrs.push_back({"name", *m.name});
  return attrs;
}

void render_assistant(K3Writer& w, const ChatMessage& m, bool thinking) {
  w.open(k3::kMessage, role_attrs("assistant", m));
  if (thinking) {
    w.open(k3::kThink);
    w.client_text(m.reasoning_content);
    w.close(k3::kThink);
  }
  w.open(k3::kResponse);
  w.content(m.content);
  w.close(k3::kResponse);
  render_tool_calls(w, m.tool_calls);
  w.end_message();
}

// Tool messages count from 1 since the latest assistant message, whose calls also name a
// result that names no function itself.
struct ToolContext {
  const std::vector<ToolCall>* calls = nullptr;
  std::size_t index = 0;
};

void render_tool(K3Writer& w, const ChatMessage& m, ToolContext& ctx, std::size_t at) {
  ctx.index++;
  std::optional<std::string> name = m.tool ? m.tool : m.name;
  if (!name && ctx.calls && ctx.index <= ctx.calls->size()) name = (*ctx.calls)[ctx.index - 1].name;
  if (!name) {
    fail<UsageError>(
        "messages[{}]: tool message has no resolvable tool name (no tool_call_id matching a "
        "call, no tool or name field, and no call at position {})",
        at, ctx.index);
  }
  w.open(k3::kMessage, {{"role", "tool"}, {"tool", *name}, {"index", std::to_string(ctx.index)}});
  w.content(m.content);
  w.end_message();
}

void render_message(K3Writer& w, const ChatMessage& m, bool thinking, ToolContext& ctx,
                    std::size_t at) {
  switch (m.role) {
    case Role::kSystem:
      if (!m.tools.empty()) {
        w.note("tool-declare", tool_declare_body(m.tools, true));
        return;
      }
      [[fallthrough]];
    case Role::kUser:
      w.open(k3::kMessage, role_attrs(m.role == Role::kUser ? "user" : "system", m));
      w.content(m.content);
      w.end_message();
      return;
    case Role::kAssistant:
      ctx = {&m.tool_calls, 0};
      render_assistant(w, m, thinking);
      return;
    case Role::kTool:
      render_tool(w, m, ctx, at);
      return;
  }
}

std::optional<std::string> effective_effort(const Conversation& req, const K3RenderOptions& opt) {
  if (!k3_thinking(req, opt)) return std::nullopt;
  std::string effort = req.thinking_effort.value_or(opt.default_effort);
  if (effort.empty()) return std::nullopt;
  if (effort != "low" && effort != "high" && effort != "max") {
    fail<UsageError>("thinking_effort: unsupported value \"{}\" (K3 accepts low, high or max)",
                     effort);
  }
  return effort;
}

struct CallRef {
  std::size_t position;  // 1-based, counting every call
  const std::string* name;
};

std::map<std::string, CallRef> index_calls(const std::vector<ToolCall>& calls) {
  std::map<std::string, CallRef> out;
  for (std::size_t i = 0; i < calls.size(); i++) {
    if (calls[i].id) out.try_emplace(*calls[i].id, CallRef{i + 1, &calls[i].name});
  }
  return out;
}

// One run of tool messages [begin, end): sorted by call position if every one matches.
void reorder_run(const std::vector<ChatMessage>& in, std::size_t begin, std::size_t end,
                 const std::map<std::string, CallRef>& calls, std::vector<ChatMessage>& out,
                 std::vector<std::size_t>& origin) {
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (position, input index)
  for (std::size_t i = begin; i < end; i++) {
    const auto& id = in[i].tool_call_id;
    auto it = id ? calls.find(*id) : calls.end();
    if (it == calls.end()) {
      for (std::size_t k = begin; k < end; k++) {
        out.push_back(in[k]);
        origin.push_back(k);
      }
      return;
    }
    order.push_back({it->second.position, i});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [position, i] : order) {
    ChatMessage m = in[i];
    const std::string& name = *calls.at(*m.tool_call_id).name;
    m.tool = name;
    if (m.name) m.name = name;
    out.push_back(std::move(m));
    origin.push_back(i);
  }
}

}  // namespace

std::vector<ChatMessage> k3_reorder_tool_results(const std::vector<ChatMessage>& messages,
                                                 std::vector<std::size_t>* origin) {
  std::vector<ChatMessage> out;
  std::vector<std::size_t> from;
  std::map<std::string, CallRef> calls;
  for (std::size_t i = 0; i < messages.size();) {
    if (messages[i].role != Role::kTool) {
      if (messages[i].role == Role::kAssistant) calls = index_calls(messages[i].tool_calls);
      out.push_back(messages[i]);
      from.push_back(i++);
      continue;
    }
    std::size_t end = i;
    while (end < messages.size() && messages[end].role == Role::kTool) end++;
    reorder_run(messages, i, end, calls, out, from);
    i = end;
  }
  if (origin) *origin = std::move(from);
  return out;
}

bool k3_thinking(const Conversation& request, const K3RenderOptions& options) {
  return thinking_on(request, options.default_thinking, options.thinking_allowed);
}

std::string k3_image_prompt(int width, int height) {
  return fmt::format("{}image {}x{}{}{}{}", k3::kMediaBegin, width, height, k3::kMediaContent,
                     k3::kMediaPad, k3::kMediaEnd);
}

std::vector<Segment> render_k3(const Conversation& request, const K3RenderOptions& options) {
  const bool thinking = k3_thinking(request, options);
  const std::optional<std::string> effort = effective_effort(request, options);
  K3Writer w(options.image_prompts, options.text_placeholders_take_images);
  if (!request.tools.empty()) w.note("tool-declare", tool_declare_body(request.tools, false));
  if (effort) w.note("thinking-effort", effort_body(*effort));

  std::vector<std::size_t> origin;
  const std::vector<ChatMessage> messages = k3_reorder_tool_results(request.messages, &origin);
  ToolContext ctx;
  for (std::size_t i = 0; i < messages.size(); i++) {
    render_message(w, messages[i], thinking, ctx, origin[i]);
  }

  const ToolChoice::Kind choice = request.tool_choice.kind;
  if (choice == ToolChoice::Kind::kRequired || choice == ToolChoice::Kind::kNone) {
    w.note("tool-choice", tool_choice_body(choice));
  }
  if (request.response_format.kind != ResponseFormat::Kind::kText) {
    w.note("response-format", response_format_body(request.response_format));
  }
  if (options.add_generation_prompt) {
    w.open(k3::kMessage, {{"role", "assistant"}});
    w.open(thinking ? k3::kThink : k3::kResponse);
  }
  return w.finish();
}

}  // namespace waste
