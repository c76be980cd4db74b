#include "protocol/anthropic/messages_request.h"

#include <fmt/format.h>

#include "protocol/api_error.h"
#include "protocol/json/json_reader.h"
#include "protocol/json/json_writer.h"
#include "protocol/request_body.h"

namespace waste {

namespace {

using json::Field;

std::string type_of(const Field& block) {
  block.expect_object();
  return block.required("type").string();
}

[[noreturn]] void unknown_type(const Field& block, const std::string& type, const char* expected) {
  block.required("type").refuse(
      fmt::format("unsupported block type \"{}\" (expected {})", type, expected));
}

// `system`: a string, or a list of text blocks (their cache_control is accepted and ignored).
// A system prompt: a string or text blocks (joined by newlines), as `system` and a message of
// role "system" (which Claude Code sends mid-conversation) both hold it.
ChatMessage system_message(const Field& f) {
  ChatMessage m;
  m.role = Role::kSystem;
  if (f.is_string()) {
    m.content = f.string();
    return m;
  }
  std::string text;
  for (const Field& b : f.items()) {
    const std::string type = type_of(b);
    if (type != "text") unknown_type(b, type, "text");
    if (!text.empty()) text += "\n";
    text += b.required("text").string();
  }
  m.content = text;
  return m;
}

std::optional<ChatMessage> parse_system(const Field& root) {
  std::optional<Field> f = root.get("system");
  if (!f) return std::nullopt;
  return system_message(*f);
}

// An image block's source as the image reference chat parts carry: a data: URL, or a URL.
ContentPart parse_image(const Field& block) {
  Field source = block.required("source");
  const std::string type = type_of(source);
  ContentPart p;
  p.kind = ContentPart::Kind::kImage;
  if (type == "base64") {
    p.image_ref = fmt::format("data:{};base64,{}", source.required("media_type").string(),
                              source.required("data").string());
  } else if (type == "url") {
    p.image_ref = source.required("url").string();
  } else {
    unknown_type(source, type, "base64 or url");
  }
  return p;
}

ContentPart parse_text(const Field& block) {
  ContentPart p;
  p.text = block.required("text").string();
  return p;
}

// A tool_result's content: a string, or text and image blocks.
MessageContent tool_result_content(const Field& block) {
  std::optional<Field> f = block.get("content");
  if (!f) return std::string();
  if (f->is_string()) return f->string();
  std::vector<ContentPart> parts;
  for (const Field& b : f->items()) {
    const std::string type = type_of(b);
    if (type == "text")
      parts.push_back(parse_text(b));
    else if (type == "image")
      parts.push_back(parse_image(b));
    else
      unknown_type(b, type, "text or image");
  }
  return parts;
}

ChatMessage tool_result(const Field& block) {
  ChatMessage m;
  m.role = Role::kTool;
  m.tool_call_id = block.required("tool_use_id").string();
  m.content = tool_result_content(block);
  std::optional<Field> error = block.get("is_error");
  if (!error || !error->boolean()) return m;
  // The model sees that the call failed, as a client's error text would say.
  if (std::string* s = std::get_if<std::string>(&m.content)) {
    *s = "Error: " + *s;
  } else if (auto* parts = std::get_if<std::vector<ContentPart>>(&m.content)) {
    ContentPart p;
    p.text = "Error: ";
    parts->insert(parts->begin(), std::move(p));
  }
  return m;
}

// A user message; its tool_result blocks come first, as tool messages.
void parse_user(const Field& msg, std::vector<ChatMessage>& out) {
  Field content = msg.required("content");
  ChatMessage user;
  if (content.is_string()) {
    user.content = content.string();
    out.push_back(std::move(user));
    return;
  }
  std::vector<ContentPart> parts;
  for (const Field& b : content.items()) {
    const std::string type = type_of(b);
    if (type == "text")
      parts.push_back(parse_text(b));
    else if (type == "image")
      parts.push_back(parse_image(b));
    else if (type == "tool_result")
      out.push_back(tool_result(b));
    else
      unknown_type(b, type, "text, image or tool_result");
  }
  if (parts.empty() && !content.items().empty()) return;  // only tool results
  user.content = std::move(parts);
  out.push_back(std::move(user));
}

ToolCall tool_use(const Field& block) {
  ToolCall c;
  c.id = block.required("id").string();
  c.name = block.required("name").string();
  Field input = block.required("input");
  input.expect_object();
  c.form = ToolCall::ArgumentsForm::kObject;
  c.arguments = input.compact_json();
  return c;
}

ChatMessage parse_assistant(const Field& msg) {
  ChatMessage m;
  m.role = Role::kAssistant;
  Field content = msg.required("content");
  if (content.is_string()) {
    m.content = content.string();
    return m;
  }
  std::string text;
  for (const Field& b : content.items()) {
    const std::string type = type_of(b);
    if (type == "text")
      text += b.required("text").string();
    else if (type == "thinking")
      m.reasoning_content += b.required("thinking").string();
    else if (type == "tool_use")
      m.tool_calls.push_back(tool_use(b));
    else if (type != "redacted_thinking")  // opaque to this server: nothing to show the model
      unknown_type(b, type, "text, thinking, redacted_thinking or tool_use");
  }
  m.content = text;
  return m;
}

std::vector<ChatMessage> parse_messages(const Field& root) {
  std::vector<ChatMessage> out;
  if (std::optional<ChatMessage> system = parse_system(root)) out.push_back(std::move(*system));
  Field list = root.required("messages");
  std::vector<Field> items = list.items();
  if (items.empty()) list.refuse("must not be empty");
  for (const Field& msg : items) {
    msg.expect_object();
    Field role = msg.required("role");
    const std::string r = role.string();
    if (r == "user")
      parse_user(msg, out);
    else if (r == "assistant")
      out.push_back(parse_assistant(msg));
    else if (r == "system")
      out.push_back(system_message(msg.required("content")));
    else
      role.refuse(fmt::format("unknown role \"{}\" (expected user, assistant or system)", r));
  }
  return out;
}

// A custom tool, declared to the model as OpenAI's function wrapper would hold it.
Tool parse_tool(const Field& f) {
  f.expect_object();
  if (std::optional<Field> type = f.get("type"); type && type->string() != "custom")
    type->refuse(fmt::format("server tools (\"{}\") are not available here; declare custom tools",
                             type->string()));
  Tool t;
  Field name = f.required("name");
  t.name = name.string();
  if (!is_function_name(t.name))
    name.refuse(fmt::format("'{}' is not a valid tool name (letters, digits, _ - . only)", t.name));
  if (std::optional<Field> d = f.get("description")) t.description = d->string();
  Field schema = f.required("input_schema");
  schema.expect_object();
  t.parameters = schema.compact_json();
  JsonWriter w;
  w.begin_object().key("type").value("function").key("function").begin_object();
  w.key("name").value(t.name);
  if (!t.description.empty()) w.key("description").value(t.description);
  w.key("parameters").raw(t.parameters).end_object();
  t.declaration = w.end_object().str();
  return t;
}

ToolChoice parse_tool_choice(const Field& root) {
  ToolChoice out;
  std::optional<Field> f = root.get("tool_choice");
  if (!f) return out;
  const std::string type = type_of(*f);
  if (std::optional<Field> d = f->get("disable_parallel_tool_use")) out.parallel = !d->boolean();
  if (type == "auto") return out;
  if (type == "none")
    out.kind = ToolChoice::Kind::kNone;
  else if (type == "any")
    out.kind = ToolChoice::Kind::kRequired;
  else if (type == "tool")
    out.kind = ToolChoice::Kind::kNamed, out.name = f->required("name").string();
  else
    unknown_type(*f, type, "auto, any, tool or none");
  return out;
}

// `thinking`: {"type": "enabled", "budget_tokens": N} or {"type": "adaptive"} turns K3's think
// channel on (the budget is checked, not enforced: K3 has no budget, only efforts; adaptive is
// how K3 thinks anyway), {"type": "disabled"} off. `display`: "summarized" (the default; K3's
// reasoning is returned as it is) or "omitted" (thinking blocks come back empty).
void parse_thinking(const Field& root, Conversation& c, bool* omit) {
  std::optional<Field> f = root.get("thinking");
  if (!f) return;
  const std::string type = type_of(*f);
  if (type == "enabled") {
    f->required("budget_tokens").integer(1, INT32_MAX);
    c.thinking = true;
  } else if (type == "adaptive") {
    c.thinking = true;
  } else if (type == "disabled") {
    c.thinking = false;
  } else {
    unknown_type(*f, type, "enabled, adaptive or disabled");
  }
  if (std::optional<Field> d = f->get("display")) {
    const std::string v = d->string();
    if (v != "summarized" && v != "omitted")
      d->refuse(fmt::format("'{}' is not summarized or omitted", v));
    *omit = v == "omitted";
  }
}

Conversation parse_conversation(const Field& root, bool* omit_thinking) {
  Conversation c;
  c.messages = parse_messages(root);
  if (std::optional<Field> tools = root.get("tools"))
    for (const Field& t : tools->items()) c.tools.push_back(parse_tool(t));
  c.tool_choice = parse_tool_choice(root);
  parse_thinking(root, c, omit_thinking);
  return c;
}

std::vector<std::string> parse_stops(const Field& root) {
  std::vector<std::string> out;
  std::optional<Field> f = root.get("stop_sequences");
  if (!f) return out;
  for (const Field& s : f->items()) {
    out.push_back(s.string());
    if (out.back().empty()) s.refuse("must not be empty");
  }
  return out;
}

GenerationParams parse_params(const Field& root, const RequestLimits& limits) {
  GenerationParams g;
  g.model = root.required("model").string();
  int64_t cap = limits.max_tokens_cap > 0 ? limits.max_tokens_cap : INT32_MAX;
  g.max_tokens = root.required("max_tokens").integer(1, cap);
  SamplerParams& sp = g.sampler;
  sp.temperature = (float)root.get_number("temperature", 0, 1).value_or(sp.temperature);
  sp.top_p = (float)root.get_number("top_p", 0, 1).value_or(sp.top_p);
  if (!(sp.top_p > 0)) throw ApiError(400, "top_p: must be greater than 0", "top_p");
  sp.top_k = (int)root.get_integer("top_k", 0, 1 << 24).value_or(sp.top_k);
  g.stop = parse_stops(root);
  g.stream = root.get_boolean("stream").value_or(false);
  g.include_usage = true;  // Anthropic streams always carry usage
  return g;
}

}  // namespace

MessagesRequest parse_messages_request(std::string_view body, const RequestLimits& limits) {
  return parse_body(body, [&](const Field& root) {
    MessagesRequest out;
    out.conversation = parse_conversation(root, &out.omit_thinking);
    out.params = parse_params(root, limits);
    return out;
  });
}

MessagesRequest parse_count_tokens_request(std::string_view body) {
  return parse_body(body, [&](const Field& root) {
    MessagesRequest out;
    out.conversation = parse_conversation(root, &out.omit_thinking);
    out.params.model = root.required("model").string();
    return out;
  });
}

}  // namespace waste
