// Typed, bounded reads of fields from untrusted JSON (simdjson DOM). Every failure names the file
// and the field path, e.g. "manifest.json: config.hidden_size: must be between 1 and 1048576".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <simdjson.h>

namespace waste::json {

using simdjson::dom::element;
using simdjson::dom::object;

// Parses `text` into `parser`, which owns the result; fails naming `where` when it is not JSON.
element parse(simdjson::dom::parser& parser, const simdjson::padded_string& text,
              const std::string& where);

// `where` is "file: path.to.object"; field names are appended to it.
bool has(const element& obj, std::string_view key);

// Present and not null.
bool has_value(const element& obj, std::string_view key);

// Required integer in [lo, hi]. A float that is a whole number is accepted (JSON writers differ).
int64_t get_int(const element& obj, std::string_view key, const std::string& where, int64_t lo,
                int64_t hi);
// Optional integer: `def` when absent or null.
int64_t get_int_or(const element& obj, std::string_view key, const std::string& where, int64_t lo,
                   int64_t hi, int64_t def);
double get_double_or(const element& obj, std::string_view key, const std::string& where,
                     double def);
// Optional boolean: `def` when absent or null; any other type is refused.
bool get_bool_or(const element& obj, std::string_view key, const std::string& where, bool def);
std::string get_string(const element& obj, std::string_view key, const std::string& where);
std::optional<std::string> get_string_opt(const element& obj, std::string_view key,
                                          const std::string& where);
element get_object(const element& obj, std::string_view key, const std::string& where);
element get_array(const element& obj, std::string_view key, const std::string& where);

// The array / object behind an element already known to be one, held by value: iterating a
// temporary simdjson_result in a range-for would dangle.
simdjson::dom::array items(const element& e);
simdjson::dom::object fields(const element& e);

// Converts an element that must be an integer in [lo, hi]; `what` names it in the error.
int64_t as_int(const element& e, const std::string& what, int64_t lo, int64_t hi);

}  // namespace waste::json
