// JSON read and written exactly as Python's `json` module does it. K3's prompts embed tool
// schemas, argument values and response schemas as the text Python's json.dumps produced when
// the model was trained, so a prompt is only right if every byte matches: arbitrary-size ints,
// floats in repr form (1e-05, 1.0, 1e+16), dict semantics for repeated keys, Python's escaping.
// One deliberate difference: a float past a double's range (1e400) keeps the text it was given,
// where Python would write Infinity, which is neither JSON nor what the client sent.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <simdjson.h>

namespace waste {

namespace json {
class Document;
}

struct PyMember;

// A value as json.loads builds it. Ints keep their decimal text (Python ints have no size
// limit); objects are ordered, and a repeated key keeps its first position but takes the last
// value, as a dict does.
struct PyJson {
  enum class Type { kNull, kBool, kInt, kFloat, kString, kArray, kObject };

  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;  // kFloat
  // kInt: optional '-' and digits, never "-0"; kString: UTF-8; kFloat: empty, or the number as
  // given when it is past a double's range (`number` is then ±infinity).
  std::string text;
  std::vector<PyJson> items;
  std::vector<PyMember> members;

  static PyJson null();
  static PyJson string(std::string s);
  static PyJson floating(double v);
  static PyJson integer(std::string digits);
  static PyJson boolean_value(bool b);
  static PyJson array();
  static PyJson object();

  // Dict assignment: replaces the value of an existing key in place, else appends.
  void set(std::string key, PyJson value);
  const PyJson* find(std::string_view key) const;

 private:
  static PyJson make(Type t);
};

struct PyMember {
  std::string key;
  PyJson value;
};

// Defined here, where PyMember is complete (a vector of it is destroyed with the value).
inline PyJson PyJson::null() {
  return {};
}
inline PyJson PyJson::array() {
  return make(Type::kArray);
}
inline PyJson PyJson::object() {
  return make(Type::kObject);
}

// json.dumps(value, ensure_ascii=..., separators=(",", ":") if compact else (", ", ": "),
// sort_keys=...). The defaults are what K3's encoder and the serving stacks use for argument
// values (Python's default separators, non-ASCII kept), not json.dumps' own ensure_ascii=True.
struct PyDumpStyle {
  bool sort_keys = false;
  bool compact = false;
  bool ensure_ascii = false;
};
std::string py_dumps(const PyJson& value, const PyDumpStyle& style);

// json.loads: the whole text must be one value with only whitespace around it. NaN, Infinity and
// -Infinity are accepted (Python accepts them). Throws UsageError naming `what` and the offset.
PyJson py_loads(std::string_view text, std::string_view what = "JSON");

// One value starting at `pos` (leading whitespace skipped); on success `pos` is just past the
// value. nullopt when the text there is not a value; `pos` is then unspecified.
std::optional<PyJson> py_parse_value(std::string_view text, std::size_t& pos);
// The offset of the first byte at or after `pos` that is not JSON whitespace.
std::size_t py_skip_whitespace(std::string_view text, std::size_t pos);

// How json.dumps writes a float: repr (shortest round trip, ".0" or an exponent always present),
// or NaN / Infinity / -Infinity.
std::string py_float_text(double v);

// The value an element of `doc` holds, with dict semantics for repeated keys; a number simdjson
// cannot hold is read from its text as json.loads reads it.
PyJson py_from_dom(const json::Document& doc, simdjson::dom::element element);

// Recursively orders every object's keys by code point (the encoder's deep sort).
void py_deep_sort(PyJson& value);

// json.dumps(deep_sort(json.loads(text)), ensure_ascii=False, separators=(",", ":")): how K3
// writes tool declarations and response schemas. Throws UsageError for text that is not JSON.
std::string canonical_json(std::string_view json);

}  // namespace waste
