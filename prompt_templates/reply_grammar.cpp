#include "prompt_templates/reply_grammar.h"

#include <fmt/format.h>

#include "engine/base/error.h"

namespace waste {

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

int response_value(Grammar& g, const ResponseFormat& rf) {
  try {
    return rf.kind == ResponseFormat::Kind::kJsonObject ? any_json_object(g)
                                                        : compile_json_schema(g, rf.schema);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("response_format.json_schema: {}", e.what()));
  }
}

int tool_arguments(Grammar& g, const Tool& tool, size_t index, const TypedArgumentSpelling& s) {
  try {
    return compile_typed_arguments(g, tool.parameters, s);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("tools[{}].function.parameters: {}", index, e.what()));
  }
}

int tool_json_arguments(Grammar& g, const Tool& tool, size_t index) {
  try {
    return tool.parameters.empty() ? any_json_object(g) : compile_json_schema(g, tool.parameters);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("tools[{}].function.parameters: {}", index, e.what()));
  }
}

int free_text(Grammar& g) {
  GrammarNode text;
  text.kind = GrammarNode::Kind::kString;
  text.raw = true;
  return g.add(std::move(text));
}

size_t named_tool(const Conversation& c) {
  for (size_t i = 0; i < c.tools.size(); ++i)
    if (c.tools[i].name == c.tool_choice.name) return i;
  fail<UsageError>("tool_choice.function.name: no tool named '{}' in tools", c.tool_choice.name);
}

int call_sequence(Grammar& g, size_t most, const std::function<int(size_t k)>& call, int end) {
  // Built from the last call back: call k, then either call k + 1 or the end.
  int rest = end;
  for (size_t k = most; k >= 1; --k) {
    if (k == most) {
      rest = g.seq({call(k), end});
    } else {
      GrammarNode next;
      next.kind = GrammarNode::Kind::kUnion;
      next.children = {rest, end};
      const int this_call = call(k);
      rest = g.seq({this_call, g.add(std::move(next))});
    }
  }
  return rest;
}

int answer_or_calls(Grammar& g, const Conversation& c, int answer,
                    const std::function<int()>& calls) {
  if (c.tools.empty() || c.tool_choice.kind == ToolChoice::Kind::kNone) return answer;
  GrammarNode either;
  either.kind = GrammarNode::Kind::kUnion;
  either.children = {answer, calls()};
  return g.add(std::move(either));
}

}  // namespace waste
