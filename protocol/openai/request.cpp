#include "protocol/openai/request.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "protocol/api_error.h"
#include "protocol/json/json_reader.h"
#include "protocol/openai/request_fields.h"
#include "protocol/request_body.h"

namespace waste {

using json::Field;

namespace {

// ---- the conversation ------------------------------------------------------------------------

std::vector<Tool> parse_tools(const Field& list) {
  std::vector<Tool> out;
  for (const Field& f : list.items()) out.push_back(parse_tool(f));
  return out;
}

Role parse_role(const Field& msg) {
  Field f = msg.required("role");
  const std::string role = f.string();
  if (role == "system" || role == "developer") return Role::kSystem;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool" || role == "function") return Role::kTool;  // function: the legacy name
  f.refuse(fmt::format(
      "unknown role \"{}\" (expected system, developer, user, assistant, tool or function)", role));
}

// An image part's reference: the value under its type's key (or the other image key); for an
// object, its url, else path, else data.
std::string image_ref(const Field& part, const std::string& type) {
  std::optional<Field> v = part.get(type);
  if (!v) v = part.get(type == "image" ? "image_url" : "image");
  if (!v)
    throw ApiError(400, fmt::format("{}.{}: missing the image reference", part.path(), type),
                   part.path() + "." + type);
  if (v->is_string()) return v->string();
  v->expect_object();
  for (std::string_view k : {"url", "path", "data"})
    if (std::optional<std::string> s = v->get_string(k); s && !s->empty()) return *s;
  throw ApiError(400, fmt::format("{}.url: missing the image reference", v->path()),
                 v->path() + ".url");
}

ContentPart parse_part(const Field& part) {
  part.expect_object();
  Field type_field = part.required("type");
  const std::string type = type_field.string();
  ContentPart out;
  if (type == "text") {
    out.text = part.required("text").string();
  } else if (type == "image_url" || type == "image") {
    out.kind = ContentPart::Kind::kImage;
    out.image_ref = image_ref(part, type);
  } else {
    type_field.refuse(fmt::format(
        "unsupported content part type \"{}\" (expected text, image_url or image)", type));
  }
  return out;
}

MessageContent parse_content(const Field& msg) {
  std::optional<Field> f = msg.get("content");
  if (!f) return std::monostate{};
  if (f->is_string()) return f->string();
  if (!f->is_array())
    f->refuse(
        fmt::format("must be a string, an array of content parts or null, not {}", f->kind()));
  std::vector<ContentPart> parts;
  for (const Field& p : f->items()) parts.push_back(parse_part(p));
  return parts;
}

ToolCall parse_tool_call(const Field& call) {
  call.expect_object();
  ToolCall out;
  out.id = call.get_string("id");
  // OpenAI nests name and arguments under `function`; a flat call carries them itself.
  Field fn = call.get("function").value_or(call);
  out.name = fn.required("name").string();
  if (std::optional<Field> args = fn.get("arguments")) {
    if (args->is_string()) {
      out.form = ToolCall::ArgumentsForm::kString;
      out.arguments = args->string();
    } else if (args->is_object()) {
      out.form = ToolCall::ArgumentsForm::kObject;
      out.arguments = args->compact_json();
    } else {
      args->refuse(fmt::format("must be a JSON string or an object, not {}", args->kind()));
    }
  }
  return out;
}

ChatMessage parse_message(const Field& msg) {
  msg.expect_object();
  ChatMessage out;
  out.role = parse_role(msg);
  out.content = parse_content(msg);
  out.name = msg.get_string("name");
  if (std::optional<Field> calls = msg.get("tool_calls")) {
    std::vector<Field> items = calls->items();
    if (!items.empty() && out.role != Role::kAssistant)
      calls->refuse("only assistant messages carry tool calls");
    for (const Field& c : items) out.tool_calls.push_back(parse_tool_call(c));
  }
  if (std::optional<Field> call = msg.get("function_call")) {  // legacy: one call, no id
    if (out.role != Role::kAssistant) call->refuse("only assistant messages carry function calls");
    if (!out.tool_calls.empty()) call->refuse("give tool_calls or function_call, not both");
    out.tool_calls.push_back(parse_tool_call(*call));
  }
  // The encoder's `reasoning_content or reasoning`.
  std::optional<std::string> reasoning = msg.get_string("reasoning_content");
  std::optional<std::string> alias = msg.get_string("reasoning");
  out.reasoning_content = reasoning && !reasoning->empty() ? *reasoning : alias.value_or("");
  out.tool_call_id = msg.get_string("tool_call_id");
  std::optional<std::string> id = msg.get_string("id");
  if (!out.tool_call_id && out.role == Role::kTool) out.tool_call_id = id;
  out.tool = msg.get_string("tool");
  if (!out.tool && out.role == Role::kTool && msg.required("role").string() == "function")
    out.tool = out.name;  // a legacy function result names its function
  if (std::optional<Field> tools = msg.get("tools"); tools && out.role == Role::kSystem)
    out.tools = parse_tools(*tools);
  return out;
}

std::vector<ChatMessage> parse_messages(const Field& root) {
  Field list = root.required("messages");
  std::vector<Field> items = list.items();
  if (items.empty()) list.refuse("must not be empty");
  std::vector<ChatMessage> out;
  for (const Field& m : items) out.push_back(parse_message(m));
  return out;
}

// json_schema.schema, else json_schema.json_schema, else json_schema itself (a key that is
// present but null still counts, as dict.get does).
std::string response_schema(const Field& rf) {
  std::optional<Field> js = rf.get("json_schema");
  if (!js) return "null";
  if (!js->is_object()) return js->compact_json();
  for (std::string_view key : {"schema", "json_schema"}) {
    if (!js->has(key)) continue;
    std::optional<Field> inner = js->get(key);
    return inner ? inner->compact_json() : "null";
  }
  return js->compact_json();
}

ResponseFormat parse_response_format(const Field& root) {
  ResponseFormat out;
  std::optional<Field> f = root.get("response_format");
  if (!f) return out;
  std::optional<Field> type_field;
  if (f->is_string()) {
    type_field = f;
  } else {
    f->expect_object();
    type_field = f->required("type");
  }
  const std::string type = type_field->string();
  if (type == "text") return out;
  if (type == "json_object") {
    out.kind = ResponseFormat::Kind::kJsonObject;
  } else if (type == "json_schema") {
    out.kind = ResponseFormat::Kind::kJsonSchema;
    out.schema = f->is_object() ? response_schema(*f) : "null";
  } else {
    type_field->refuse(
        fmt::format("unknown type \"{}\" (expected text, json_object or json_schema)", type));
  }
  return out;
}

// `thinking` as a bool or as {"type": "enabled" | "disabled", ...}.
std::optional<bool> thinking_switch(const Field& f) {
  if (f.is_bool()) return f.boolean();
  if (!f.is_object()) f.refuse(fmt::format("must be a boolean or an object, not {}", f.kind()));
  std::optional<Field> type = f.get("type");
  if (!type) return std::nullopt;
  const std::string t = type->string();
  if (t == "enabled") return true;
  if (t == "disabled") return false;
  type->refuse(fmt::format("unknown value \"{}\" (expected enabled or disabled)", t));
}

std::optional<bool> find_thinking(const Field& root, const std::optional<Field>& kwargs) {
  if (kwargs)
    for (std::string_view key : {"thinking", "enable_thinking"})
      if (std::optional<Field> f = kwargs->get(key)) return f->boolean();
  if (std::optional<Field> f = root.get("thinking"))
    if (std::optional<bool> on = thinking_switch(*f)) return on;
  if (std::optional<Field> f = root.get("enable_thinking")) return f->boolean();
  return std::nullopt;
}

std::optional<Field> find_effort(const Field& root, const std::optional<Field>& kwargs) {
  if (kwargs)
    if (std::optional<Field> f = kwargs->get("thinking_effort")) return f;
  for (std::string_view key : {"reasoning_effort", "thinking_effort"})
    if (std::optional<Field> f = root.get(key)) return f;
  for (std::string_view key : {"reasoning", "thinking"}) {
    std::optional<Field> f = root.get(key);
    if (f && f->is_object())
      if (std::optional<Field> e = f->get("effort")) return e;
  }
  return std::nullopt;
}

// Legacy `functions`: flat function declarations, rendered as OpenAI's tool wrapper would
// hold them; `function_call` chooses among them as tool_choice does, one call at most.
void parse_legacy_functions(const Field& root, Conversation& out) {
  std::optional<Field> functions = root.get("functions");
  std::optional<Field> choice = root.get("function_call");
  if (!functions && !choice) return;
  if (root.get("tools") && functions) functions->refuse("give tools or functions, not both");
  if (root.get("tool_choice") && choice)
    choice->refuse("give tool_choice or function_call, not both");
  if (functions)
    for (const Field& f : functions->items()) {
      Tool t = parse_tool(f);
      t.declaration = "{\"type\":\"function\",\"function\":" + f.compact_json() + "}";
      out.tools.push_back(std::move(t));
    }
  out.tool_choice.parallel = false;
  if (!choice) return;
  if (choice->is_string()) {
    const std::string s = choice->string();
    if (s == "none")
      out.tool_choice.kind = ToolChoice::Kind::kNone;
    else if (s == "auto")
      out.tool_choice.kind = ToolChoice::Kind::kAuto;
    else
      choice->refuse(
          fmt::format("unknown value \"{}\" (expected none, auto or {{\"name\": ...}})", s));
    return;
  }
  choice->expect_object();
  out.tool_choice.kind = ToolChoice::Kind::kNamed;
  out.tool_choice.name = choice->required("name").string();
}

Conversation parse_conversation(const Field& root) {
  Conversation out;
  out.messages = parse_messages(root);
  if (std::optional<Field> tools = root.get("tools")) out.tools = parse_tools(*tools);
  out.tool_choice = parse_tool_choice(root);
  parse_legacy_functions(root, out);
  out.response_format = parse_response_format(root);
  parse_thinking(root, out);
  return out;
}

// ---- generation parameters -------------------------------------------------------------------

std::vector<std::string> parse_stops(const Field& root) {
  std::optional<Field> f = root.get("stop");
  if (!f) return {};
  std::vector<std::string> out;
  if (f->is_string()) {
    out.push_back(f->string());
  } else if (f->is_array()) {
    for (const Field& s : f->items()) {
      if (!s.is_string()) f->refuse("must be a string or a list of strings");
      out.push_back(s.string());
    }
  } else {
    f->refuse("must be a string or a list of strings");
  }
  if (out.size() > 4) f->refuse("at most 4 stop sequences");
  for (const std::string& s : out)
    if (s.empty()) f->refuse("stop sequences must not be empty");
  return out;
}

std::vector<std::pair<int, float>> parse_logit_bias(const Field& root, int vocab) {
  std::optional<Field> f = root.get("logit_bias");
  if (!f) return {};
  if (!f->is_object()) f->refuse("must be an object of token id to bias");
  std::vector<std::pair<int, float>> out;
  for (const auto& [key, v] : f->members()) {
    size_t used = 0;
    long id = -1;
    try {
      id = std::stol(key, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || (vocab > 0 && id >= vocab))
      f->refuse(fmt::format("'{}' is not a token id of this model", key));
    if (!v.is_number()) f->refuse(fmt::format("the bias of {} must be a number", key));
    double b = v.number(-HUGE_VAL, HUGE_VAL);
    if (!(b >= -100 && b <= 100)) f->refuse("biases must lie between -100 and 100");
    out.push_back({(int)id, (float)b});
  }
  return out;
}

// Chat's `logprobs` (a boolean) and `top_logprobs`, as SamplerParams::logprobs.
int chat_logprobs(const Field& root) {
  const bool on = root.get_boolean("logprobs").value_or(false);
  std::optional<int64_t> top = root.get_integer("top_logprobs", 0, 20);
  if (top && !on) throw ApiError(400, "top_logprobs: needs logprobs set to true", "top_logprobs");
  return on ? (int)top.value_or(0) : -1;
}

// `least_tokens` is the smallest max_tokens allowed (0 only for a scored echo).
GenerationParams parse_params(const Field& root, const RequestLimits& limits,
                              int64_t least_tokens = 1) {
  GenerationParams g;
  if (std::optional<std::string> m = root.get_string("model")) g.model = *m;
  SamplerParams& sp = g.sampler;
  sp.temperature = (float)root.get_number("temperature", 0, 2).value_or(1.0);
  sp.top_p = (float)root.get_number("top_p", 0, 1).value_or(1.0);
  if (!(sp.top_p > 0)) throw ApiError(400, "top_p: must be greater than 0", "top_p");
  sp.top_k = (int)root.get_integer("top_k", 0, 1 << 24).value_or(0);
  sp.min_p = (float)root.get_number("min_p", 0, 1).value_or(0.0);
  sp.presence_penalty = (float)root.get_number("presence_penalty", -2, 2).value_or(0);
  sp.frequency_penalty = (float)root.get_number("frequency_penalty", -2, 2).value_or(0);
  sp.repetition_penalty = (float)root.get_number("repetition_penalty", 0.01, 100).value_or(1);
  if (auto seed = root.get_integer("seed", INT64_MIN, INT64_MAX)) sp.seed = (uint64_t)*seed;
  sp.logit_bias = parse_logit_bias(root, limits.vocab);
  int64_t cap = limits.max_tokens_cap > 0 ? limits.max_tokens_cap : INT64_MAX;
  g.max_tokens = root.get_integer("max_completion_tokens", least_tokens, cap);
  if (!g.max_tokens) g.max_tokens = root.get_integer("max_tokens", least_tokens, cap);
  if (std::optional<int64_t> n = root.get_integer("n", 1, limits.max_n)) g.n = (int)*n;
  g.stop = parse_stops(root);
  g.stream = root.get_boolean("stream").value_or(false);
  if (std::optional<Field> so = root.get("stream_options"))
    g.include_usage = so->get_boolean("include_usage").value_or(false);
  return g;
}

}  // namespace

ToolChoice parse_tool_choice(const Field& root) {
  ToolChoice out;
  if (std::optional<Field> p = root.get("parallel_tool_calls")) out.parallel = p->boolean();
  std::optional<Field> f = root.get("tool_choice");
  if (!f) return out;
  if (f->is_string()) {
    const std::string s = f->string();
    if (s == "none")
      out.kind = ToolChoice::Kind::kNone;
    else if (s == "required")
      out.kind = ToolChoice::Kind::kRequired;
    else if (s != "auto")
      f->refuse(fmt::format("unknown value \"{}\" (expected none, auto or required)", s));
    return out;
  }
  f->expect_object();
  std::optional<Field> type = f->get("type");
  if (!type || type->string() != "function")
    throw ApiError(400, "tool_choice.type: must be \"function\"", "tool_choice.type");
  // Chat nests the name under `function`; the Responses API puts it beside the type.
  Field name = f->has("name") ? f->required("name") : f->required("function").required("name");
  out.kind = ToolChoice::Kind::kNamed;
  out.name = name.string();
  return out;
}
Tool parse_tool(const Field& f) {
  f.expect_object();
  // OpenAI nests the function under `function`; a flat declaration carries it itself.
  Field fn = f.get("function").value_or(f);
  Tool t;
  Field name = fn.required("name");
  t.name = name.string();
  if (!is_function_name(t.name))
    name.refuse(
        fmt::format("'{}' is not a valid function name (letters, digits, _ - . only)", t.name));
  t.description = fn.get_string("description").value_or("");
  if (std::optional<Field> p = fn.get("parameters")) t.parameters = p->compact_json();
  t.declaration = f.compact_json();
  return t;
}

void parse_thinking(const Field& root, Conversation& out) {
  std::optional<Field> kwargs = root.get("chat_template_kwargs");
  if (kwargs) kwargs->expect_object();
  out.thinking = find_thinking(root, kwargs);
  std::optional<Field> effort = find_effort(root, kwargs);
  if (!effort) return;
  const std::string given = effort->string();
  std::string v = given;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  // OpenAI's scale onto the efforts K3's encoder accepts (low, high, max): "minimal" is as low
  // as K3 goes, and "medium" (OpenAI's default, which K3's prompt mentions but its encoder
  // rejects) rounds up to high.
  static const std::pair<std::string_view, std::string_view> kEfforts[] = {
      {"minimal", "low"}, {"low", "low"}, {"medium", "high"}, {"high", "high"}, {"max", "max"}};
  if (v == "none") {
    out.thinking = false;  // an explicit "no reasoning" wins over a thinking switch
    return;
  }
  for (const auto& [name, k3] : kEfforts)
    if (v == name) {
      out.thinking_effort = std::string(k3);
      // Asking for an effort asks for reasoning, as on OpenAI's reasoning models: it turns
      // thinking on over the server's default, though not over the request's own switch.
      if (!out.thinking) out.thinking = true;
      return;
    }
  effort->refuse(fmt::format(
      "unknown effort \"{}\" (expected none, minimal, low, medium, high or max)", given));
}

ChatCompletionRequest parse_chat_completion(std::string_view body, const RequestLimits& limits) {
  return parse_body(body, [&](const Field& root) {
    ChatCompletionRequest out;
    out.conversation = parse_conversation(root);
    out.params = parse_params(root, limits);
    out.params.sampler.logprobs = chat_logprobs(root);
    out.legacy_functions = root.has("functions") || root.has("function_call");
    return out;
  });
}

CompletionRequest parse_completion(std::string_view body, const RequestLimits& limits) {
  return parse_body(body, [&](const Field& root) {
    CompletionRequest out;
    out.echo = root.get_boolean("echo").value_or(false);
    out.params = parse_params(root, limits, out.echo ? 0 : 1);
    if (std::optional<int64_t> lp = root.get_integer("logprobs", 0, 20))
      out.params.sampler.logprobs = (int)*lp;
    Field prompt = root.required("prompt");
    if (prompt.is_string()) {
      out.text = prompt.string();
      return out;
    }
    if (!prompt.is_array())
      prompt.refuse("must be a string, a list of one string, or a list of token ids");
    std::vector<Field> items = prompt.items();
    if (items.size() == 1 && items[0].is_string()) {
      out.text = items[0].string();
      return out;
    }
    for (const Field& id : items) {
      if (!id.element().is_int64())
        prompt.refuse("a list prompt must hold token ids (one prompt per request)");
      int64_t v = int64_t(id.element().get_int64());
      if (v < 0 || (limits.vocab > 0 && v >= limits.vocab))
        prompt.refuse(fmt::format("token id {} is out of range", v));
      out.ids.push_back((int32_t)v);
    }
    if (out.ids.empty()) prompt.refuse("must not be empty");
    return out;
  });
}

}  // namespace waste
