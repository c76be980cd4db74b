// The shapes a Kimi K2 reply can be held to (docs/PROMPT_FORMAT.md §5): response_format's value,
// a named tool call, or one or more calls (tool_choice "required"), each after the think channel
// when the vocabulary has one.
#pragma once

#include <memory>
#include <string>

#include "protocol/constraint/grammar.h"
#include "protocol/conversation.h"

namespace waste {

struct K2GrammarOptions {
  // The vocabulary has <think> and </think> (K2-Thinking): the reply opens the think channel
  // before anything else.
  bool think_tokens = false;
};

// The grammar for a K2 reply to `c`, or null when the reply is free. With a named tool_choice it
// starts after k2_forced_opening and covers the arguments and the end of the message. Throws
// SchemaError for a schema that cannot be enforced and UsageError for a tool choice naming no
// declared tool.
std::shared_ptr<const Grammar> k2_reply_grammar(const Conversation& c, const K2GrammarOptions& o);

// For a tool_choice naming a function: the markup that opens that call (an empty think channel
// first where the vocabulary has one), written in the model's place so the reply is that call.
// Empty for any other tool_choice.
std::string k2_forced_opening(const Conversation& c, const K2GrammarOptions& o);

}  // namespace waste
