// JSON Schema (the subset below) compiled into grammar nodes, for `response_format` and for the
// arguments of forced tool calls.
//
// Supported: type (a name or a list), properties, required, additionalProperties (true, false or
// a schema), propertyNames (enum/const, which close the object, or minLength, maxLength,
// pattern and format, which other keys follow), minProperties, maxProperties, items (a schema,
// or a list as in draft 7 with additionalItems), prefixItems, minItems, maxItems, enum, const,
// anyOf, oneOf (when its alternatives cannot overlap: different types, or a required property
// whose const/enum values differ, found through $ref and allOf), discriminator (checked to agree
// with those consts, then ignored), allOf (merged: properties and required united, bounds
// tightened, patterns and formats intersected), $ref to "#" or "#/..." with $defs/definitions
// and recursion, minLength, maxLength, pattern (regex_dfa.h), format (date, time, date-time,
// email, uuid, uri), several patterns and a format on one string (all hold), minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (numbers or draft-4 booleans), multipleOf (a whole number;
// the value is then an integer), uniqueItems: false, and the annotations title, description,
// $comment, default, examples, $schema, $id, deprecated, readOnly, writeOnly. Any other keyword
// is refused with SchemaError naming it and where it is. A number may be any JSON number, also
// one simdjson cannot hold (json_document.h): as a bound it is the nearest double (±infinity past
// a double's range), and in const or enum it is written as the schema gives it.
//
// String lengths are code points, as JSON Schema counts them; a string with a length bound
// never holds a character past U+FFFF, so JavaScript's String.length (UTF-16 units, what zod 3
// checks) gives the same count.
//
// What is written: compact JSON; declared properties in the schema's order (optional ones may be
// skipped), then, if allowed, other keys (no escapes, never a declared name); no escapes inside
// strings that have a pattern or format; numbers with at most 15 integer and 15 fraction digits
// (12 and 6 when bounded, so bounds are checked exactly) and a two-digit exponent only when
// unbounded. A schema with no type but with keywords of one kind (properties, items, minLength,
// minimum, ...) is taken to mean that type.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "engine/base/error.h"
#include "protocol/constraint/grammar.h"

namespace waste {

class SchemaError : public UsageError {
 public:
  using UsageError::UsageError;
};

// Adds the nodes for a value matching `schema_json` to `g`; returns the value's node.
int compile_json_schema(Grammar& g, std::string_view schema_json);

// Any JSON object (response_format json_object).
int any_json_object(Grammar& g);

// How a model family writes one typed tool-call argument: `open_key(name)` (whose first symbol
// must be a special token, so arguments are told apart from text), `after_key(type)` with type
// one of string, number, boolean, null, object, array, then the value (a string raw, any other
// compact JSON), then `close`. Names holding a character of `forbidden_in_names` are refused.
struct TypedArgumentSpelling {
  std::function<std::string(const std::string& name)> open_key;
  std::function<std::string(std::string_view type)> after_key;
  std::string close;
  std::string forbidden_in_names;
};

// Tool-call arguments for a function whose `parameters` schema is `parameters_json` (an object
// schema; "{}" or empty for none): one argument element per property, in the schema's order,
// spelled by `spelling`.
int compile_typed_arguments(Grammar& g, std::string_view parameters_json,
                            const TypedArgumentSpelling& spelling);

}  // namespace waste
