// Fields that OpenAI's chat completions and Responses API share, read one way for both.
#pragma once

#include "protocol/conversation.h"
#include "protocol/json/json_reader.h"

namespace waste {

// A function tool: nested under `function` (chat) or flat (Responses, legacy functions).
// `declaration` is the object as sent.
Tool parse_tool(const json::Field& f);
// tool_choice ("none", "auto", "required", or a named function in chat's nested shape or the
// Responses API's flat one) and parallel_tool_calls.
ToolChoice parse_tool_choice(const json::Field& root);
// The thinking switch and effort (see parse_chat_completion's comment for the keys read and the
// effort mapping), into c.thinking and c.thinking_effort.
void parse_thinking(const json::Field& root, Conversation& c);

}  // namespace waste
