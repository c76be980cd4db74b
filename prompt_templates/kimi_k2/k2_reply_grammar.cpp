#include "prompt_templates/kimi_k2/k2_reply_grammar.h"

#include "engine/base/error.h"
#include "prompt_templates/kimi_k2/k2_markup.h"
#include "prompt_templates/kimi_k2/k2_template.h"
#include "prompt_templates/reply_grammar.h"

namespace waste {
namespace {

// A literal of one special token that Grammar::literal would read as bytes (<think>).
int special_literal(Grammar& g, std::string_view name) {
  SymbolTrie t;
  t.insert({g.special(std::string(name))}, 0);
  g.tries.push_back(std::move(t));
  GrammarNode n;
  n.kind = GrammarNode::Kind::kLiteral;
  n.trie = (int)g.tries.size() - 1;
  return g.add(std::move(n));
}

// `<think>` · free reasoning (no special tokens) · `</think>`, where the vocabulary has them and
// the reply reasons (else k2_forced_opening wrote the channel empty).
std::vector<int> think_channel(Grammar& g, const K2GrammarOptions& o) {
  if (!o.think_tokens || !o.thinking) return {};
  return {special_literal(g, k2::kThinkOpen), free_text(g), special_literal(g, k2::kThinkClose)};
}

// `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>`: the opening of a call,
// numbered after the conversation's earlier calls as the model numbers them.
std::string call_opening(const std::string& name, std::size_t index) {
  return std::string(k2::kCallBegin) + k2::call_id(name, index) + std::string(k2::kArgumentBegin);
}

// `<think></think>`: the think channel left empty, where the vocabulary has one.
std::string empty_think(const K2GrammarOptions& o) {
  return o.think_tokens ? std::string(k2::kThinkOpen) + std::string(k2::kThinkClose) : "";
}

// The reply's first call opened after an empty think channel: what a forced call writes, and
// what a cut reply's opening is finished to.
std::string first_call_opening(const Conversation& c, const std::string& name,
                               const K2GrammarOptions& o) {
  return empty_think(o) + std::string(k2::kSectionBegin) + call_opening(name, k2_calls_so_far(c));
}

// What follows the last call's arguments: the call, the section and the turn end.
std::string after_last_call() {
  return std::string(k2::kCallEnd) + std::string(k2::kSectionEnd) + std::string(k2::kEnd);
}

std::shared_ptr<Grammar> named_call(const Conversation& c) {
  auto g = std::make_shared<Grammar>();
  const std::size_t i = named_tool(c);
  g->root = g->seq({tool_json_arguments(*g, c.tools[i], i), g->literal(after_last_call())});
  return g;
}

// `<|tool_calls_section_begin|>` · CALL(n) · ( CALL(n + 1) · ( … ) | end ): one or more calls to
// the declared tools, numbered from the conversation's call count n, then the section's and the
// turn's end.
int tool_calls(Grammar& g, const Conversation& c) {
  std::vector<int> args;  // per tool, shared by every call position
  for (std::size_t i = 0; i < c.tools.size(); ++i)
    args.push_back(tool_json_arguments(g, c.tools[i], i));
  const std::size_t first = k2_calls_so_far(c);
  auto call = [&](std::size_t k) {
    GrammarNode calls;
    calls.kind = GrammarNode::Kind::kUnion;
    for (std::size_t i = 0; i < c.tools.size(); ++i)
      calls.children.push_back(g.seq({g.literal(call_opening(c.tools[i].name, first + k - 1)),
                                      args[i], g.literal(std::string(k2::kCallEnd))}));
    return g.add(std::move(calls));
  };
  const std::size_t most = c.tool_choice.parallel ? kMaxReplyCalls : 1;
  const int end = g.literal(std::string(k2::kSectionEnd) + std::string(k2::kEnd));
  return g.seq({g.literal(std::string(k2::kSectionBegin)), call_sequence(g, most, call, end)});
}

std::shared_ptr<Grammar> required_call(const Conversation& c, const K2GrammarOptions& o) {
  if (c.tools.empty()) fail<UsageError>("tool_choice: \"required\" needs at least one tool");
  auto g = std::make_shared<Grammar>();
  std::vector<int> parts = think_channel(*g, o);
  parts.push_back(tool_calls(*g, c));
  g->root = g->seq(parts);
  return g;
}

// The reply holds to response_format, or calls the tools on offer (answer_or_calls).
std::shared_ptr<Grammar> response_format(const Conversation& c, const K2GrammarOptions& o) {
  auto g = std::make_shared<Grammar>();
  std::vector<int> parts = think_channel(*g, o);
  const int answer =
      g->seq({response_value(*g, c.response_format), g->literal(std::string(k2::kEnd))});
  parts.push_back(answer_or_calls(*g, c, answer, [&] { return tool_calls(*g, c); }));
  g->root = g->seq(parts);
  return g;
}

}  // namespace

std::shared_ptr<const Grammar> k2_reply_grammar(const Conversation& c, const K2GrammarOptions& o) {
  if (c.tool_choice.kind == ToolChoice::Kind::kNamed) return named_call(c);
  if (c.tool_choice.kind == ToolChoice::Kind::kRequired) return required_call(c, o);
  if (c.response_format.kind == ResponseFormat::Kind::kText) return nullptr;
  return response_format(c, o);
}

std::string k2_forced_opening(const Conversation& c, const K2GrammarOptions& o) {
  if (c.tool_choice.kind != ToolChoice::Kind::kNamed) return o.thinking ? "" : empty_think(o);
  if (!is_function_name(c.tool_choice.name))
    fail<UsageError>("tool_choice.function.name: '{}' is not a valid function name",
                     c.tool_choice.name);
  return first_call_opening(c, c.tool_choice.name, o);
}

std::optional<std::string> k2_call_opening_rest(const Conversation& c, const K2GrammarOptions& o,
                                                std::string_view written) {
  const bool named = c.tool_choice.kind == ToolChoice::Kind::kNamed;
  if (!named && c.tool_choice.kind != ToolChoice::Kind::kRequired) return std::nullopt;
  // A required reply may reason first: what counts is what follows `</think>`, read as if the
  // channel were empty, and a reply cut before it has written only the `<think>`.
  std::string seen(written);
  if (!named && o.think_tokens && o.thinking && written.starts_with(k2::kThinkOpen)) {
    const std::size_t at = written.find(k2::kThinkClose);
    seen = std::string(k2::kThinkOpen) +
           std::string(at == std::string_view::npos ? std::string_view() : written.substr(at));
  }
  std::optional<std::string> rest;
  for (const Tool& t : c.tools) {
    if (named && t.name != c.tool_choice.name) continue;
    const std::string full = first_call_opening(c, t.name, o);
    if (seen.size() >= full.size() || !full.starts_with(seen)) continue;
    if (rest) return std::nullopt;  // several tools still fit: which one is not known
    rest = full.substr(seen.size());
  }
  return rest;
}

}  // namespace waste
