#include "prompt_templates/reply_grammar.h"

#include <fmt/format.h>

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

}  // namespace waste
