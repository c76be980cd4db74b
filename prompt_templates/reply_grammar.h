// Pieces every family's reply grammar is built from (the families' own grammars are in k3/ and
// kimi_k2/, chosen by ChatFormat::reply_grammar): the value response_format asks for, one
// tool's arguments, and the vocabulary index the token masks are computed over.
#pragma once

#include <cstddef>
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

}  // namespace waste
