#include "prompt_templates/k3/k3_reply_grammar.h"

#include <fmt/format.h>

#include "engine/base/error.h"
#include "prompt_templates/k3/k3_markup.h"
#include "prompt_templates/reply_grammar.h"

namespace waste {
namespace {

using k3::close_tag;
using k3::open_tag;

// `<|open|>call tool="NAME" index="1"<|sep|>`: the opening of the reply's first call.
std::string call_opening(const std::string& name) {
  return fmt::format("{}{} tool=\"{}\" index=\"1\"{}", k3::kOpen, k3::kCall, name, k3::kSep);
}

// Leave the think channel (if the prompt opened it) and the response channel, open the call.
std::string first_call_opening(const std::string& name, bool thinking) {
  const std::string leave_think = thinking ? k3::think_to_response() : "";
  return leave_think + close_tag(k3::kResponse) + open_tag(k3::kTools) + call_opening(name);
}

// What follows a call's arguments: the call, the tools element and the message end.
std::string after_call() {
  return close_tag(k3::kCall) + close_tag(k3::kTools) + k3::message_end();
}

// Free reasoning text (no special tokens), then the think channel closes and the response opens.
std::vector<int> think_channel(Grammar& g) {
  return {free_text(g), g.literal(k3::think_to_response())};
}

std::shared_ptr<Grammar> named_call(const Conversation& c) {
  auto g = std::make_shared<Grammar>();
  const size_t i = named_tool(c);
  int args = tool_arguments(*g, c.tools[i], i, k3_argument_spelling());
  g->root = g->seq({args, g->literal(after_call())});
  return g;
}

// `<|close|>response<|sep|><|open|>tools<|sep|>` · CALL(1) · ( CALL(2) · ( … ) ) · the tools
// element's and the message's end: one or more calls to the declared tools, indexed from 1,
// after an empty response channel.
int tool_calls(Grammar& g, const Conversation& c) {
  std::vector<int> args;  // per tool, shared by every call position
  for (size_t i = 0; i < c.tools.size(); ++i)
    args.push_back(tool_arguments(g, c.tools[i], i, k3_argument_spelling()));
  auto call = [&](size_t k) {
    GrammarNode calls;
    calls.kind = GrammarNode::Kind::kUnion;
    for (size_t i = 0; i < c.tools.size(); ++i)
      calls.children.push_back(
          g.seq({g.literal(fmt::format("{}{} tool=\"{}\" index=\"{}\"{}", k3::kOpen, k3::kCall,
                                       c.tools[i].name, k, k3::kSep)),
                 args[i], g.literal(close_tag(k3::kCall))}));
    return g.add(std::move(calls));
  };
  const size_t most = c.tool_choice.parallel ? kMaxReplyCalls : 1;
  const int end = g.literal(close_tag(k3::kTools) + k3::message_end());
  return g.seq({g.literal(close_tag(k3::kResponse) + open_tag(k3::kTools)),
                call_sequence(g, most, call, end)});
}

// Required: after the think channel (when the prompt opened it), calls and nothing else.
std::shared_ptr<Grammar> required_call(const Conversation& c, bool thinking) {
  if (c.tools.empty()) fail<UsageError>("tool_choice: \"required\" needs at least one tool");
  auto g = std::make_shared<Grammar>();
  std::vector<int> parts = thinking ? think_channel(*g) : std::vector<int>{};
  parts.push_back(tool_calls(*g, c));
  g->root = g->seq(parts);
  return g;
}

// The reply holds to response_format, or calls the tools on offer (answer_or_calls).
std::shared_ptr<Grammar> response_format(const Conversation& c, bool thinking) {
  auto g = std::make_shared<Grammar>();
  std::vector<int> parts = thinking ? think_channel(*g) : std::vector<int>{};
  const int answer = g->seq({response_value(*g, c.response_format),
                             g->literal(close_tag(k3::kResponse) + k3::message_end())});
  parts.push_back(answer_or_calls(*g, c, answer, [&] { return tool_calls(*g, c); }));
  g->root = g->seq(parts);
  return g;
}

}  // namespace

const TypedArgumentSpelling& k3_argument_spelling() {
  static const TypedArgumentSpelling s{
      [](const std::string& name) {
        return fmt::format("{}{} key=\"{}\"", k3::kOpen, k3::kArgument, name);
      },
      [](std::string_view type) { return fmt::format(" type=\"{}\"{}", type, k3::kSep); },
      close_tag(k3::kArgument),
      "\"&<",
  };
  return s;
}

std::shared_ptr<const Grammar> k3_reply_grammar(const Conversation& c, bool thinking) {
  if (c.tool_choice.kind == ToolChoice::Kind::kNamed) return named_call(c);
  if (c.tool_choice.kind == ToolChoice::Kind::kRequired) return required_call(c, thinking);
  if (c.response_format.kind == ResponseFormat::Kind::kText) return nullptr;
  return response_format(c, thinking);
}

std::string k3_forced_opening(const Conversation& c, bool thinking) {
  if (c.tool_choice.kind != ToolChoice::Kind::kNamed) return "";
  if (!is_function_name(c.tool_choice.name))
    fail<UsageError>("tool_choice.function.name: '{}' is not a valid function name",
                     c.tool_choice.name);
  return first_call_opening(c.tool_choice.name, thinking);
}

std::optional<std::string> k3_call_opening_rest(const Conversation& c, bool thinking,
                                                std::string_view written) {
  const bool named = c.tool_choice.kind == ToolChoice::Kind::kNamed;
  if (!named && c.tool_choice.kind != ToolChoice::Kind::kRequired) return std::nullopt;
  // A required reply reasons freely first: what counts is what follows the think channel's
  // close, and a reply cut before it has written none of the opening.
  if (thinking && !named) {
    const size_t at = written.find(close_tag(k3::kThink));
    written = at == std::string_view::npos ? std::string_view() : written.substr(at);
  }
  std::optional<std::string> rest;
  for (const Tool& t : c.tools) {
    if (named && t.name != c.tool_choice.name) continue;
    const std::string full = first_call_opening(t.name, thinking);
    if (written.size() >= full.size() || !full.starts_with(written)) continue;
    if (rest) return std::nullopt;  // several tools still fit: which one is not known
    rest = full.substr(written.size());
  }
  return rest;
}

}  // namespace waste
