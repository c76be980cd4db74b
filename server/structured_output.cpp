#include "server/structured_output.h"

#include <simdjson.h>

#include "engine/error.h"
#include "protocol/json_schema.h"
#include "server/chat_format.h"

namespace waste {
namespace {

constexpr const char* kK3MessageEnd = "<|close|>message<|sep|><|end_of_msg|>";

struct Tool {
  std::string name;
  std::string parameters;  // compact JSON; empty when the tool takes none
};

Tool parse_tool(const std::string& json, size_t index) {
  simdjson::dom::parser parser;
  simdjson::dom::element root, fn, name, params;
  std::string where = fmt::format("tools[{}]", index);
  if (parser.parse(json).get(root) != simdjson::SUCCESS)
    fail<UsageError>("{}: not valid JSON", where);
  if (root.at_key("function").get(fn) != simdjson::SUCCESS) fn = root;
  std::string_view n;
  if (fn.at_key("name").get(name) != simdjson::SUCCESS ||
      name.get_string().get(n) != simdjson::SUCCESS)
    fail<UsageError>("{}.function.name: missing", where);
  Tool t;
  t.name = std::string(n);
  ChatFormat::check_function_name(t.name, where + ".function.name");
  if (fn.at_key("parameters").get(params) == simdjson::SUCCESS)
    t.parameters = simdjson::minify(params);
  return t;
}

// Free reasoning text (no special tokens), then the think channel closes and the response opens.
std::vector<int> k3_think(Grammar& g) {
  GrammarNode reasoning;
  reasoning.kind = GrammarNode::Kind::kString;
  reasoning.raw = true;
  return {g.add(std::move(reasoning)), g.literal("<|close|>think<|sep|><|open|>response<|sep|>")};
}

int xtml_args(Grammar& g, const Tool& t, size_t index) {
  try {
    return compile_xtml_arguments(g, t.parameters);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("tools[{}].function.parameters: {}", index, e.what()));
  }
}

std::shared_ptr<Grammar> named_call(const ChatRequest& r) {
  auto g = std::make_shared<Grammar>();
  for (size_t i = 0; i < r.tools.size(); ++i) {
    Tool t = parse_tool(r.tools[i], i);
    if (t.name != r.tool_choice.name) continue;
    int args = xtml_args(*g, t, i);
    g->root = g->seq({args, g->literal(std::string("<|close|>call<|sep|><|close|>tools<|sep|>") +
                                       kK3MessageEnd)});
    return g;
  }
  fail<UsageError>("tool_choice.function.name: no tool named '{}' in tools", r.tool_choice.name);
}

std::shared_ptr<Grammar> required_call(const ChatRequest& r, bool thinking) {
  if (r.tools.empty()) fail<UsageError>("tool_choice: \"required\" needs at least one tool");
  auto g = std::make_shared<Grammar>();
  std::vector<int> parts = thinking ? k3_think(*g) : std::vector<int>{};
  GrammarNode text;
  text.kind = GrammarNode::Kind::kString;
  text.raw = true;
  parts.push_back(g->add(std::move(text)));
  parts.push_back(g->literal("<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\""));
  GrammarNode calls;
  calls.kind = GrammarNode::Kind::kUnion;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    Tool t = parse_tool(r.tools[i], i);
    int args = xtml_args(*g, t, i);
    calls.children.push_back(g->seq({g->literal(t.name + "\" index=\"1\"<|sep|>"), args}));
  }
  parts.push_back(g->add(std::move(calls)));
  parts.push_back(
      g->literal(std::string("<|close|>call<|sep|><|close|>tools<|sep|>") + kK3MessageEnd));
  g->root = g->seq(parts);
  return g;
}

std::shared_ptr<Grammar> response_format(ChatFamily family, const ResponseFormat& rf,
                                         bool thinking) {
  auto g = std::make_shared<Grammar>();
  int value;
  try {
    value = rf.kind == ResponseFormat::Kind::kJsonObject ? any_json_object(*g)
                                                         : compile_json_schema(*g, rf.schema);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("response_format.json_schema: {}", e.what()));
  }
  std::vector<int> parts;
  if (family == ChatFamily::kK3) {
    if (thinking) parts = k3_think(*g);
    parts.push_back(value);
    parts.push_back(g->literal(std::string("<|close|>response<|sep|>") + kK3MessageEnd));
  } else if (family == ChatFamily::kKimiLinear) {
    parts = {value, g->literal("<|im_end|>")};
  } else {
    parts = {value};
  }
  g->root = parts.size() == 1 ? parts[0] : g->seq(parts);
  return g;
}

}  // namespace

std::unique_ptr<TokenIndex> make_token_index(const Tokenizer& tok, int vocab) {
  std::vector<std::string> bytes((size_t)vocab);
  std::vector<std::pair<std::string, int>> specials;
  for (int id = 0; id < vocab && id < (int)tok.vocab_size(); ++id) {
    std::string_view b = tok.token_bytes(id);
    bytes[id] = std::string(b);
    if (tok.is_special(id)) specials.emplace_back(std::string(b), id);
  }
  return std::make_unique<TokenIndex>(bytes, specials);
}

std::shared_ptr<const Grammar> reply_grammar(ChatFamily family, const ChatRequest& r,
                                             bool thinking) {
  if (family == ChatFamily::kK3 && r.tool_choice.kind == ToolChoice::Kind::kNamed)
    return named_call(r);
  if (family == ChatFamily::kK3 && r.tool_choice.kind == ToolChoice::Kind::kRequired)
    return required_call(r, thinking);
  if (r.response_format.kind == ResponseFormat::Kind::kText) return nullptr;
  return response_format(family, r.response_format, thinking);
}

}  // namespace waste
