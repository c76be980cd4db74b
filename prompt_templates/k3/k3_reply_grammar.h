// The shapes a K3 reply can be held to (docs/PROMPT_FORMAT.md §5): response_format's value in
// the response channel, a named tool call, or one or more calls (tool_choice "required"), each
// after the think channel closes when the prompt opened it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/constraint/grammar.h"
#include "protocol/constraint/json_schema.h"
#include "protocol/conversation.h"

namespace waste {

// How K3 writes a typed argument: <|open|>argument key="K" type="T"<|sep|>VALUE
// <|close|>argument<|sep|>.
const TypedArgumentSpelling& k3_argument_spelling();

// The grammar for a K3 reply to `c`, or null when the reply is free. With a named tool_choice it
// starts after k3_forced_opening and covers the arguments and the end of the message. Throws
// SchemaError for a schema that cannot be enforced and UsageError for a tool choice naming no
// declared tool.
std::shared_ptr<const Grammar> k3_reply_grammar(const Conversation& c, bool thinking);

// For a tool_choice naming a function: the markup that opens that call (after closing the think
// channel when the prompt opened it), written in the model's place so the reply is that call.
// Empty for any other tool_choice.
std::string k3_forced_opening(const Conversation& c, bool thinking);

// For tool_choice named or required, a reply cut before its first call opened: the markup that
// finishes opening that call after `written` (the reply's text so far, special tokens spelled
// out). A required reply cut while reasoning gets the think channel closed first. Nullopt when
// the call is open already, the reply is not on the way to one, or several tools still fit.
std::optional<std::string> k3_call_opening_rest(const Conversation& c, bool thinking,
                                                std::string_view written);

}  // namespace waste
