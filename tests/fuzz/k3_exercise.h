// What the request-parser fuzzers do with a conversation a parser accepted: render it for K3
// and compile its reply grammar and forced opening, each refusal being a UsageError.
#pragma once

#include "engine/base/error.h"
#include "prompt_templates/k3/k3_reply_grammar.h"
#include "prompt_templates/k3/k3_template.h"
#include "protocol/conversation.h"

namespace waste::fuzz {

inline void exercise_k3(const Conversation& c, bool thinking) {
  try {
    K3RenderOptions o;
    o.default_thinking = thinking;
    render_k3(c, o);
  } catch (const UsageError&) {
  }
  try {
    k3_reply_grammar(c, thinking);
    k3_forced_opening(c, thinking);
  } catch (const UsageError&) {  // SchemaError included
  }
}

}  // namespace waste::fuzz
