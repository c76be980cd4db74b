#include "protocol/openai/responses_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "protocol/api_error.h"
#include "protocol/json/json_reader.h"
#include "protocol/json/json_writer.h"
#include "protocol/openai/request_fields.h"
#include "protocol/request_body.h"

namespace waste {

namespace {

using json::Field;

Role message_role(const Field& item) {
  Field f = item.required("role");
  const std::string r = f.string();
  if (r == "user") return Role::kUser;
  if (r == "assistant") return Role::kAssistant;
  if (r == "system" || r == "developer") return Role::kSystem;
  f.refuse(fmt::format("unknown role \"{}\" (expected user, assistant, system or developer)", r));
}

ContentPart message_part(const Field& part) {
  part.expect_object();
  Field type = part.required("type");
  const std::string t = type.string();
  ContentPart p;
  if (t == "input_text" || t == "output_text" || t == "text") {
    p.text = part.required("text").string();
  } else if (t == "refusal") {
    p.text = part.required("refusal").string();
  } else if (t == "input_image") {
    p.kind = ContentPart::Kind::kImage;
    std::optional<std::string> url = part.get_string("image_url");
    if (!url) part.required("image_url").refuse("missing (file_id images are not available here)");
    p.image_ref = *url;
  } else {
    type.refuse(fmt::format(
        "unsupported content type \"{}\" (expected input_text, input_image or output_text)", t));
  }
  return p;
}

MessageContent message_content(const Field& item) {
  Field f = item.required("content");
  if (f.is_string()) return f.string();
  std::vector<ContentPart> parts;
  for (const Field& p : f.items()) parts.push_back(message_part(p));
  return parts;
}

// The assistant turn that function_call and reasoning items add to: the last message when it is
// an assistant's that has not been answered yet, else a new one.
ChatMessage& assistant_turn(std::vector<ChatMessage>& out) {
  if (out.empty() || out.back().role != Role::kAssistant) {
    ChatMessage m;
    m.role = Role::kAssistant;
    out.push_back(std::move(m));
  }
  return out.back();
}

std::string reasoning_text(const Field& item) {
  std::string text;
  for (std::string_view key : {"content", "summary"}) {
    std::optional<Field> list = item.get(key);
    if (!list) continue;
    for (const Field& p : list->items()) {
      p.expect_object();
      text += p.required("text").string();
    }
    if (!text.empty()) break;  // content is the full text; a summary only stands in for it
  }
  return text;
}

void parse_item(const Field& item, std::vector<ChatMessage>& out, std::string& reasoning) {
  item.expect_object();
  std::optional<Field> type_field = item.get("type");
  const std::string type = type_field ? type_field->string() : "message";
  if (type == "message") {
    ChatMessage m;
    m.role = message_role(item);
    m.content = message_content(item);
    if (m.role == Role::kAssistant) m.reasoning_content = std::exchange(reasoning, "");
    out.push_back(std::move(m));
  } else if (type == "function_call") {
    ChatMessage& a = assistant_turn(out);
    if (a.reasoning_content.empty()) a.reasoning_content = std::exchange(reasoning, "");
    ToolCall c;
    c.id = item.required("call_id").string();
    c.name = item.required("name").string();
    c.form = ToolCall::ArgumentsForm::kString;
    c.arguments = item.required("arguments").string();
    a.tool_calls.push_back(std::move(c));
  } else if (type == "function_call_output") {
    ChatMessage m;
    m.role = Role::kTool;
    m.tool_call_id = item.required("call_id").string();
    Field output = item.required("output");
    if (output.is_string()) {
      m.content = output.string();
    } else {
      std::vector<ContentPart> parts;
      for (const Field& p : output.items()) parts.push_back(message_part(p));
      m.content = std::move(parts);
    }
    out.push_back(std::move(m));
  } else if (type == "reasoning") {
    reasoning += reasoning_text(item);
  } else {
    type_field->refuse(fmt::format(
        "unsupported item type \"{}\" (expected message, function_call, function_call_output or "
        "reasoning)",
        type));
  }
}

std::vector<ChatMessage> parse_input(const Field& root, const std::string& instructions) {
  std::vector<ChatMessage> out;
  if (!instructions.empty()) {
    ChatMessage m;
    m.role = Role::kSystem;
    m.content = instructions;
    out.push_back(std::move(m));
  }
  Field input = root.required("input");
  if (input.is_string()) {
    ChatMessage m;
    m.content = input.string();
    out.push_back(std::move(m));
    return out;
  }
  std::vector<Field> items = input.items();
  if (items.empty()) input.refuse("must not be empty");
  std::string reasoning;
  for (const Field& item : items) parse_item(item, out, reasoning);
  return out;
}

// Tools the provider runs itself (search, code, computers): nothing here can run them, so the
// model is not offered them; the reply can still call every function tool.
bool hosted_tool(const std::string& type) {
  static const char* const kHosted[] = {
      "web_search",       "web_search_preview",   "file_search", "code_interpreter",
      "image_generation", "computer_use_preview", "mcp",         "local_shell"};
  for (const char* h : kHosted)
    if (type == h || type.starts_with(std::string(h) + "_")) return true;
  return false;
}

// A flat function tool, shown to the model in chat's nested shape.
Tool function_tool(const Field& f) {
  Tool t = parse_tool(f);
  std::string inner = "{\"name\":" + f.required("name").compact_json();
  if (std::optional<Field> d = f.get("description"))
    inner += ",\"description\":" + d->compact_json();
  if (std::optional<Field> p = f.get("parameters")) inner += ",\"parameters\":" + p->compact_json();
  t.declaration = "{\"type\":\"function\",\"function\":" + inner + "}}";
  return t;
}

// Function tools, and the function tools of namespaces (groups of them, as Codex sends its
// sub-agent tools), under their own names.
void add_tools(const Field& list, bool in_namespace, std::vector<Tool>& out) {
  for (const Field& f : list.items()) {
    f.expect_object();
    Field type = f.required("type");
    const std::string t = type.string();
    if (t == "function")
      out.push_back(function_tool(f));
    else if (t == "namespace" && !in_namespace)
      add_tools(f.required("tools"), true, out);
    else if (!hosted_tool(t) || in_namespace)
      type.refuse(fmt::format(
          "unsupported tool type \"{}\" (function and namespace tools are served; hosted tools "
          "such as web_search are left out)",
          t));
  }
}

std::vector<Tool> parse_tools(const Field& root) {
  std::vector<Tool> out;
  if (std::optional<Field> list = root.get("tools")) add_tools(*list, false, out);
  return out;
}

// text.format: text, json_object, or json_schema with the schema beside its name.
ResponseFormat parse_text_format(const Field& root) {
  ResponseFormat out;
  std::optional<Field> text = root.get("text");
  if (!text) return out;
  std::optional<Field> format = text->get("format");
  if (!format) return out;
  Field type = format->required("type");
  const std::string t = type.string();
  if (t == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
  } else if (t == "json_schema") {
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.schema = format->required("schema").compact_json();
  } else if (t != "text") {
    type.refuse(fmt::format("unknown type \"{}\" (expected text, json_object or json_schema)", t));
  }
  return out;
}

GenerationParams parse_params(const Field& root, const RequestLimits& limits) {
  GenerationParams g;
  if (std::optional<std::string> m = root.get_string("model")) g.model = *m;
  SamplerParams& sp = g.sampler;
  sp.temperature = (float)root.get_number("temperature", 0, 2).value_or(sp.temperature);
  sp.top_p = (float)root.get_number("top_p", 0, 1).value_or(sp.top_p);
  if (!(sp.top_p > 0)) throw ApiError(400, "top_p: must be greater than 0", "top_p");
  int64_t cap = limits.max_tokens_cap > 0 ? limits.max_tokens_cap : INT64_MAX;
  g.max_tokens = root.get_integer("max_output_tokens", 1, cap);
  g.stream = root.get_boolean("stream").value_or(false);
  g.include_usage = true;
  return g;
}

// The field as it was sent (compact JSON), or `absent` when it was not.
std::string sent(const Field& root, std::string_view key, std::string absent) {
  std::optional<Field> f = root.get(key);
  return f ? f->compact_json() : absent;
}

std::string string_or_null(const Field& root, std::string_view key) {
  std::optional<Field> f = root.get(key);
  if (f) f->string();
  return sent(root, key, "null");
}

// One of `allowed`, as sent; `absent` when it was not.
std::string choice(const Field& root, std::string_view key, std::vector<std::string> allowed,
                   std::string absent) {
  std::optional<Field> f = root.get(key);
  if (!f) return absent;
  const std::string v = f->string();
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end())
    f->refuse(fmt::format("unknown value \"{}\" (expected {})", v, fmt::join(allowed, " or ")));
  return f->compact_json();
}

// metadata: string values under string keys, within OpenAI's bounds (16 pairs, keys of 64
// characters, values of 512).
std::string metadata(const Field& root) {
  std::optional<Field> f = root.get("metadata");
  if (!f) return "{}";
  std::vector<std::pair<std::string, Field>> pairs = f->members();
  if (pairs.size() > 16) f->refuse(fmt::format("has {} keys (16 at most)", pairs.size()));
  for (const auto& [key, value] : pairs) {
    if (key.size() > 64) value.refuse("the key is longer than 64 characters");
    if (value.string().size() > 512) value.refuse("longer than 512 characters");
  }
  return f->compact_json();
}

// text: the format in force (text when none was sent) beside whatever else was sent.
std::string text_echo(const Field& root) {
  std::optional<Field> text = root.get("text");
  JsonWriter w;
  w.begin_object().key("format");
  std::optional<Field> format = text ? text->get("format") : std::nullopt;
  format ? w.raw(format->compact_json()) : w.raw(R"({"type":"text"})");
  if (text)
    for (const auto& [key, value] : text->members())
      if (key != "format") w.key(key).raw(value.compact_json());
  return w.end_object().str();
}

// reasoning: the effort and summary as sent, null when not.
std::string reasoning_echo(const Field& root) {
  std::optional<Field> r = root.get("reasoning");
  if (r) r->expect_object();
  JsonWriter w;
  w.begin_object().key("effort").raw(r ? sent(*r, "effort", "null") : "null");
  w.key("summary").raw(r ? choice(*r, "summary", {"auto", "concise", "detailed"}, "null") : "null");
  return w.end_object().str();
}

// What the response object repeats. The fields that act are read and checked elsewhere (the
// conversation, the generation parameters); the rest are checked here, and all kept as sent.
ResponseEcho parse_echo(const Field& root) {
  ResponseEcho e;
  e.tools = sent(root, "tools", e.tools);
  e.tool_choice = sent(root, "tool_choice", e.tool_choice);
  e.parallel_tool_calls = sent(root, "parallel_tool_calls", e.parallel_tool_calls);
  e.metadata = metadata(root);
  e.temperature = sent(root, "temperature", e.temperature);
  e.top_p = sent(root, "top_p", e.top_p);
  e.max_output_tokens = sent(root, "max_output_tokens", e.max_output_tokens);
  root.get_integer("top_logprobs", 0, 20);
  e.top_logprobs = sent(root, "top_logprobs", e.top_logprobs);
  e.text = text_echo(root);
  e.reasoning = reasoning_echo(root);
  e.truncation = choice(root, "truncation", {"auto", "disabled"}, e.truncation);
  root.get_boolean("store");
  e.store = sent(root, "store", e.store);
  e.user = string_or_null(root, "user");
  e.prompt_cache_key = string_or_null(root, "prompt_cache_key");
  e.safety_identifier = string_or_null(root, "safety_identifier");
  return e;
}

}  // namespace

ResponsesRequest parse_responses_request(std::string_view body, const RequestLimits& limits) {
  return parse_body(body, [&](const Field& root) {
    ResponsesRequest out;
    if (std::optional<Field> prev = root.get("previous_response_id"))
      prev->refuse("this server keeps no responses; send the whole conversation as input");
    out.instructions = root.get_string("instructions").value_or("");
    Conversation& c = out.conversation;
    c.messages = parse_input(root, out.instructions);
    c.tools = parse_tools(root);
    c.tool_choice = parse_tool_choice(root);
    c.response_format = parse_text_format(root);
    parse_thinking(root, c);  // reasoning.effort
    out.params = parse_params(root, limits);
    out.echo = parse_echo(root);
    return out;
  });
}

}  // namespace waste
