// The shapes a Kimi K2 reply can be held to (docs/PROMPT_FORMAT.md §5): response_format's value,
// a named tool call, or one or more calls (tool_choice "required"), each after the think channel
// when the vocabulary has one.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/constraint/grammar.h"
#include "protocol/conversation.h"

namespace waste {

struct K2GrammarOptions {
  // The vocabulary has <think> and </think> (K2-Thinking): every reply opens with the think
  // channel.
  bool think_tokens = false;
  // With think_tokens, whether the reply reasons in that channel. Off, the channel is written
  // empty in the model's place (k2_forced_opening) and the grammar starts after it.
  bool thinking = true;
};

// The grammar for a K2 reply to `c`, or null when the reply is free. It starts after
// k2_forced_opening: with a named tool_choice it covers the arguments and the end of the message.
// Throws SchemaError for a schema that cannot be enforced and UsageError for a tool choice naming
// no declared tool.
std::shared_ptr<const Grammar> k2_reply_grammar(const Conversation& c, const K2GrammarOptions& o);

// What is written in the model's place before it generates: an empty think channel where the
// vocabulary has one and the reply does not reason (a named call never does), then for a
// tool_choice naming a function the opening of that call, so the reply is that call. Empty when
// neither applies.
std::string k2_forced_opening(const Conversation& c, const K2GrammarOptions& o);

// For tool_choice named or required, a reply cut before its first call opened: the markup that
// finishes opening that call after `written` (the reply's text so far, special tokens spelled
// out). A required reply cut while reasoning gets the think channel closed first. Nullopt when
// the call is open already, the reply is not on the way to one, or several tools still fit.
std::optional<std::string> k2_call_opening_rest(const Conversation& c, const K2GrammarOptions& o,
                                                std::string_view written);

}  // namespace waste
