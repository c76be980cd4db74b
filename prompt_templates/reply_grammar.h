// Pieces every family's reply grammar is built from (the families' own grammars are in k3/ and
// kimi_k2/, chosen by ChatFormat::reply_grammar): the value response_format asks for, one
// tool's arguments, and the vocabulary index the token masks are computed over.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "engine/tokenizer/tokenizer.h"
#include "protocol/constraint/grammar.h"
#include "protocol/constraint/json_schema.h"
#include "protocol/constraint/token_constraint.h"
#include "protocol/conversation.h"

namespace waste {

// The tokenizer's vocabulary, padded with empty entries to the model's `vocab`.
std::unique_ptr<TokenIndex> make_token_index(const Tokenizer& tok, int vocab);

// The node of the value response_format asks for (any object, or the schema's values). Throws
// SchemaError naming response_format.json_schema.
int response_value(Grammar& g, const ResponseFormat& rf);

// The node of the arguments of tools[index], in the family's argument spelling. Throws
// SchemaError naming tools[index].function.parameters.
int tool_arguments(Grammar& g, const Tool& tool, size_t index, const TypedArgumentSpelling& s);

// The node of the arguments of tools[index] as one JSON object (the families that write
// arguments as JSON text): the `parameters` schema's values, any object when there is none.
// Throws SchemaError naming tools[index].function.parameters.
int tool_json_arguments(Grammar& g, const Tool& tool, size_t index);

// Free text: any UTF-8 without special tokens, possibly empty (a think channel's reasoning).
int free_text(Grammar& g);

// The tool tool_choice names: its index in `c.tools`. Throws UsageError naming
// tool_choice.function.name when no tool has that name.
size_t named_tool(const Conversation& c);

// One or more calls, then `end`: CALL(1) · ( CALL(2) · ( … CALL(most) · end ) | end ). A family's
// call markup spells each call's position, so the calls are unrolled; `call(k)` builds the node
// of the k-th (1-based).
int call_sequence(Grammar& g, size_t most, const std::function<int(size_t k)>& call, int end);

// The reply's `answer`; with tools on offer (tool_choice "auto") either it or the calls `calls`
// builds, as an agent with a final-answer schema works with tools first.
int answer_or_calls(Grammar& g, const Conversation& c, int answer,
                    const std::function<int()>& calls);

// How many calls one reply may make when parallel calls are allowed.
inline constexpr size_t kMaxReplyCalls = 8;

}  // namespace waste
