// The OpenAI chat body → ChatRequest parser. Every refusal names the offending field the way a
// client would write it (messages[2].content[0].type), so a 400 can point at it.

#include "prompt_templates/segments.h"

#include <algorithm>
#include <cctype>

#include <simdjson.h>

#include "engine/error.h"
#include "prompt_templates/python_json.h"

namespace waste {

std::vector<TokenId> tokenize_segments(const Tokenizer& tok, const std::vector<Segment>& segments) {
  std::vector<TokenId> out;
  for (const Segment& s : segments) {
    std::vector<TokenId> ids = s.is_markup ? tok.encode_markup(s.text) : tok.encode_text(s.text);
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

[[noreturn]] void bad(const std::string& field, std::string_view why) {
  fail<UsageError>("{}: {}", field, why);
}

std::string kind_of(element e) {
  switch (e.type()) {
    case simdjson::dom::element_type::ARRAY:
      return "an array";
    case simdjson::dom::element_type::OBJECT:
      return "an object";
    case simdjson::dom::element_type::STRING:
      return "a string";
    case simdjson::dom::element_type::BOOL:
      return "a boolean";
    case simdjson::dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "a number";
  }
}

// A field that is absent or null: OpenAI clients use the two interchangeably.
std::optional<element> get(object obj, std::string_view key) {
  element e;
  if (obj.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

std::string as_string(element e, const std::string& field) {
  std::string_view s;
  if (e.get(s) != simdjson::SUCCESS) bad(field, "must be a string, not " + kind_of(e));
  return std::string(s);
}

object as_object(element e, const std::string& field) {
  object o;
  if (e.get(o) != simdjson::SUCCESS) bad(field, "must be an object, not " + kind_of(e));
  return o;
}

array as_array(element e, const std::string& field) {
  array a;
  if (e.get(a) != simdjson::SUCCESS) bad(field, "must be an array, not " + kind_of(e));
  return a;
}

bool as_bool(element e, const std::string& field) {
  bool b;
  if (e.get(b) != simdjson::SUCCESS) bad(field, "must be a boolean, not " + kind_of(e));
  return b;
}

std::optional<std::string> get_string(object obj, std::string_view key, const std::string& base) {
  std::optional<element> e = get(obj, key);
  if (!e) return std::nullopt;
  return as_string(*e, base.empty() ? std::string(key) : base + "." + std::string(key));
}

std::string compact_json(element e) {
  return py_dumps(py_from_dom(e), {.sort_keys = false, .compact = true, .ensure_ascii = false});
}

// An array of objects, each kept as compact JSON (tool declarations).
std::vector<std::string> object_list(element e, const std::string& field) {
  std::vector<std::string> out;
  array items = as_array(e, field);
  std::size_t i = 0;
  for (element item : items) {
    as_object(item, fmt::format("{}[{}]", field, i++));
    out.push_back(compact_json(item));
  }
  return out;
}

Role parse_role(object msg, const std::string& base) {
  std::optional<std::string> role = get_string(msg, "role", base);
  if (!role) bad(base + ".role", "missing");
  if (*role == "system" || *role == "developer") return Role::kSystem;
  if (*role == "user") return Role::kUser;
  if (*role == "assistant") return Role::kAssistant;
  if (*role == "tool") return Role::kTool;
  bad(base + ".role",
      fmt::format("unknown role \"{}\" (expected system, developer, user, assistant or tool)",
                  *role));
}

// An image part's reference: the value under its type's key (or the other image key); for an
// object, its url, else path, else data.
std::string image_ref(object part, const std::string& type, const std::string& base) {
  const std::string other = type == "image" ? "image_url" : "image";
  std::optional<element> v = get(part, type);
  std::string key = type;
  if (!v) {
    v = get(part, other);
    key = other;
  }
  const std::string field = base + "." + key;
  if (!v) bad(base + "." + type, "missing the image reference");
  if (v->is_string()) return as_string(*v, field);
  object o = as_object(*v, field);
  for (std::string_view k : {"url", "path", "data"}) {
    if (std::optional<std::string> s = get_string(o, k, field); s && !s->empty()) return *s;
  }
  bad(field + ".url", "missing the image reference");
}

ContentPart parse_part(element e, const std::string& base) {
  object part = as_object(e, base);
  std::optional<std::string> type = get_string(part, "type", base);
  if (!type) bad(base + ".type", "missing");
  ContentPart out;
  if (*type == "text") {
    std::optional<std::string> text = get_string(part, "text", base);
    if (!text) bad(base + ".text", "missing");
    out.text = std::move(*text);
  } else if (*type == "image_url" || *type == "image") {
    out.kind = ContentPart::Kind::kImage;
    out.image_ref = image_ref(part, *type, base);
  } else {
    bad(base + ".type",
        fmt::format("unsupported content part type \"{}\" (expected text, image_url or image)",
                    *type));
  }
  return out;
}

MessageContent parse_content(object msg, const std::string& base) {
  std::optional<element> e = get(msg, "content");
  const std::string field = base + ".content";
  if (!e) return std::monostate{};
  if (e->is_string()) return as_string(*e, field);
  if (!e->is_array()) {
    bad(field, "must be a string, an array of content parts or null, not " + kind_of(*e));
  }
  std::vector<ContentPart> parts;
  array items = as_array(*e, field);
  std::size_t i = 0;
  for (element item : items) parts.push_back(parse_part(item, fmt::format("{}[{}]", field, i++)));
  return parts;
}

ToolCall parse_tool_call(element e, const std::string& base) {
  object call = as_object(e, base);
  ToolCall out;
  out.id = get_string(call, "id", base);
  // OpenAI nests name and arguments under `function`; a flat call carries them itself.
  object fn = call;
  std::string fbase = base;
  if (std::optional<element> f = get(call, "function")) {
    fbase = base + ".function";
    fn = as_object(*f, fbase);
  }
  std::optional<std::string> name = get_string(fn, "name", fbase);
  if (!name) bad(fbase + ".name", "missing");
  out.name = std::move(*name);
  if (std::optional<element> args = get(fn, "arguments")) {
    if (args->is_string()) {
      out.form = ToolCall::ArgumentsForm::kString;
      out.arguments = as_string(*args, fbase + ".arguments");
    } else if (args->is_object()) {
      out.form = ToolCall::ArgumentsForm::kObject;
      out.arguments = compact_json(*args);
    } else {
      bad(fbase + ".arguments", "must be a JSON string or an object, not " + kind_of(*args));
    }
  }
  return out;
}

// reasoning_content, falling back to the alias `reasoning` when it is empty (the encoder's
// `reasoning_content or reasoning`).
std::string parse_reasoning(object msg, const std::string& base) {
  std::optional<std::string> content = get_string(msg, "reasoning_content", base);
  std::optional<std::string> alias = get_string(msg, "reasoning", base);
  if (content && !content->empty()) return *content;
  return alias.value_or("");
}

void parse_tool_calls(object msg, ChatMessage& out, const std::string& base) {
  std::optional<element> calls = get(msg, "tool_calls");
  if (!calls) return;
  const std::string field = base + ".tool_calls";
  array items = as_array(*calls, field);
  if (items.size() > 0 && out.role != Role::kAssistant) {
    bad(field, "only assistant messages carry tool calls");
  }
  std::size_t i = 0;
  for (element item : items) {
    out.tool_calls.push_back(parse_tool_call(item, fmt::format("{}[{}]", field, i++)));
  }
}

ChatMessage parse_message(element e, const std::string& base) {
  object msg = as_object(e, base);
  ChatMessage out;
  out.role = parse_role(msg, base);
  out.content = parse_content(msg, base);
  out.name = get_string(msg, "name", base);
  parse_tool_calls(msg, out, base);
  out.reasoning_content = parse_reasoning(msg, base);
  out.tool_call_id = get_string(msg, "tool_call_id", base);
  std::optional<std::string> id = get_string(msg, "id", base);
  if (!out.tool_call_id && out.role == Role::kTool) out.tool_call_id = id;
  out.tool = get_string(msg, "tool", base);
  if (std::optional<element> tools = get(msg, "tools"); tools && out.role == Role::kSystem) {
    out.tools = object_list(*tools, base + ".tools");
  }
  return out;
}

std::vector<ChatMessage> parse_messages(object root) {
  std::optional<element> e = get(root, "messages");
  if (!e) bad("messages", "missing");
  array items = as_array(*e, "messages");
  if (items.size() == 0) bad("messages", "must not be empty");
  std::vector<ChatMessage> out;
  std::size_t i = 0;
  for (element item : items) out.push_back(parse_message(item, fmt::format("messages[{}]", i++)));
  return out;
}

ToolChoice parse_tool_choice(object root) {
  ToolChoice out;
  std::optional<element> e = get(root, "tool_choice");
  if (!e) return out;
  if (e->is_string()) {
    const std::string s = as_string(*e, "tool_choice");
    if (s == "auto") return out;
    if (s == "none")
      out.kind = ToolChoice::Kind::kNone;
    else if (s == "required")
      out.kind = ToolChoice::Kind::kRequired;
    else
      bad("tool_choice", fmt::format("unknown value \"{}\" (expected none, auto or required)", s));
    return out;
  }
  object o = as_object(*e, "tool_choice");
  std::optional<std::string> type = get_string(o, "type", "tool_choice");
  if (type != "function") bad("tool_choice.type", "must be \"function\"");
  std::optional<element> fn = get(o, "function");
  if (!fn) bad("tool_choice.function", "missing");
  std::optional<std::string> name =
      get_string(as_object(*fn, "tool_choice.function"), "name", "tool_choice.function");
  if (!name) bad("tool_choice.function.name", "missing");
  out.kind = ToolChoice::Kind::kNamed;
  out.name = std::move(*name);
  return out;
}

// json_schema.schema, else json_schema.json_schema, else json_schema itself (a key that is
// present but null still counts, as dict.get does).
std::string response_schema(object rf) {
  element js;
  if (rf.at_key("json_schema").get(js) != simdjson::SUCCESS || js.is_null()) return "null";
  object o;
  if (js.get(o) != simdjson::SUCCESS) return compact_json(js);
  for (std::string_view key : {"schema", "json_schema"}) {
    element inner;
    if (o.at_key(key).get(inner) == simdjson::SUCCESS) return compact_json(inner);
  }
  return compact_json(js);
}

ResponseFormat parse_response_format(object root) {
  ResponseFormat out;
  std::optional<element> e = get(root, "response_format");
  if (!e) return out;
  std::string type;
  std::optional<object> rf;
  if (e->is_string()) {
    type = as_string(*e, "response_format");
  } else {
    rf = as_object(*e, "response_format");
    std::optional<std::string> t = get_string(*rf, "type", "response_format");
    if (!t) bad("response_format.type", "missing");
    type = *t;
  }
  if (type == "text") return out;
  if (type == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
  } else if (type == "json_schema") {
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.schema = rf ? response_schema(*rf) : "null";
  } else {
    bad(rf ? "response_format.type" : "response_format",
        fmt::format("unknown type \"{}\" (expected text, json_object or json_schema)", type));
  }
  return out;
}

// `thinking` as a bool or as {"type": "enabled" | "disabled", ...}.
std::optional<bool> thinking_switch(element e, const std::string& field) {
  if (e.is_bool()) return as_bool(e, field);
  object o;
  if (e.get(o) != simdjson::SUCCESS) {
    bad(field, "must be a boolean or an object, not " + kind_of(e));
  }
  std::optional<std::string> type = get_string(o, "type", field);
  if (!type) return std::nullopt;
  if (*type == "enabled") return true;
  if (*type == "disabled") return false;
  bad(field + ".type", fmt::format("unknown value \"{}\" (expected enabled or disabled)", *type));
}

std::optional<bool> find_thinking(object root, std::optional<object> kwargs) {
  if (kwargs) {
    for (std::string_view key : {"thinking", "enable_thinking"}) {
      if (std::optional<element> e = get(*kwargs, key)) {
        return as_bool(*e, "chat_template_kwargs." + std::string(key));
      }
    }
  }
  if (std::optional<element> e = get(root, "thinking")) {
    if (std::optional<bool> on = thinking_switch(*e, "thinking")) return on;
  }
  if (std::optional<element> e = get(root, "enable_thinking")) {
    return as_bool(*e, "enable_thinking");
  }
  return std::nullopt;
}

struct EffortField {
  std::string field;
  std::string value;
};

std::optional<EffortField> find_effort(object root, std::optional<object> kwargs) {
  if (kwargs) {
    if (auto v = get_string(*kwargs, "thinking_effort", "chat_template_kwargs")) {
      return EffortField{"chat_template_kwargs.thinking_effort", *v};
    }
  }
  for (std::string_view key : {"reasoning_effort", "thinking_effort"}) {
    if (auto v = get_string(root, key, "")) return EffortField{std::string(key), *v};
  }
  for (std::string_view key : {"reasoning", "thinking"}) {
    std::optional<element> e = get(root, key);
    object o;
    if (!e || e->get(o) != simdjson::SUCCESS) continue;
    const std::string field = std::string(key) + ".effort";
    if (auto v = get_string(o, "effort", std::string(key))) return EffortField{field, *v};
  }
  return std::nullopt;
}

void parse_thinking(object root, ChatRequest& out) {
  std::optional<object> kwargs;
  if (std::optional<element> e = get(root, "chat_template_kwargs")) {
    kwargs = as_object(*e, "chat_template_kwargs");
  }
  out.thinking = find_thinking(root, kwargs);
  std::optional<EffortField> effort = find_effort(root, kwargs);
  if (!effort) return;
  std::string v = effort->value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "none") {
    out.thinking = false;  // an explicit "no reasoning" wins over a thinking switch
  } else if (v == "low" || v == "high" || v == "max") {
    out.thinking_effort = v;
  } else if (v == "medium") {
    bad(effort->field,
        "\"medium\" is not supported: K3's prompt mentions it but its encoder rejects it; use "
        "low, high or max (or none to turn thinking off)");
  } else {
    bad(effort->field,
        fmt::format("unknown effort \"{}\" (expected none, low, high or max)", effort->value));
  }
}

}  // namespace

ChatRequest parse_chat_request(std::string_view json) {
  simdjson::dom::parser parser;
  element root_el;
  if (auto err = parser.parse(json.data(), json.size()).get(root_el)) {
    fail<UsageError>("request body: not valid JSON ({})", simdjson::error_message(err));
  }
  object root;
  if (root_el.get(root) != simdjson::SUCCESS) bad("request body", "must be a JSON object");
  ChatRequest out;
  out.messages = parse_messages(root);
  if (std::optional<element> tools = get(root, "tools")) out.tools = object_list(*tools, "tools");
  out.tool_choice = parse_tool_choice(root);
  out.response_format = parse_response_format(root);
  parse_thinking(root, out);
  return out;
}

}  // namespace waste
