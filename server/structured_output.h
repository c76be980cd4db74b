// Structured outputs for a chat request: the grammar a reply must follow (response_format, a
// forced tool call), wrapped in the model family's reply markup, and the vocabulary index the
// token masks are computed over.
#pragma once

#include <memory>

#include "engine/tokenizer.h"
#include "prompt_templates/segments.h"
#include "protocol/grammar.h"
#include "protocol/token_constraint.h"
#include "server/chat_format.h"

namespace waste {

// The tokenizer's vocabulary, padded with empty entries to the model's `vocab`.
std::unique_ptr<TokenIndex> make_token_index(const Tokenizer& tok, int vocab);

// The grammar for the reply to `r`, or null when the reply is free. With a named tool_choice
// (K3) it starts after the forced tokens that open the call (ChatFormat::forced_tool_call) and
// covers the arguments and the end of the message; with tool_choice "required" (K3) the reply
// may think and write text, then must call one of the tools; otherwise response_format shapes
// the content (K3: after the think channel closes). Throws SchemaError for a schema this engine
// cannot enforce and UsageError for a tool choice the format cannot carry.
std::shared_ptr<const Grammar> reply_grammar(ChatFamily family, const ChatRequest& r,
                                             bool thinking);

}  // namespace waste
