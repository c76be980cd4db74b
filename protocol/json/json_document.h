// One untrusted JSON text as a simdjson DOM, numbers simdjson cannot hold included. simdjson has
// no big-number type: it fails the whole parse (NUMBER_ERROR) on an integer past 64 bits or a
// number past a double's range (123456789012345678901234567890, 1e400), which a client may put
// in any JSON it sends us (tool schemas, response_format, tool arguments). A Document parses such
// a number as a string holding the number's text, and remembers which strings stand in for one
// by their address in the parser's string buffer: a client's string, whatever it holds, is
// never taken for a number. Request bodies (json_reader.h) and schemas (json_schema.cpp) are read
// through a Document, and everything that reads their elements asks big_number() first.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>

#include <simdjson.h>

namespace waste::json {

class Document {
 public:
  Document() = default;
  Document(const Document&) = delete;
  Document& operator=(const Document&) = delete;

  // SUCCESS, or simdjson's error for text that is not JSON. Elements of an earlier parse are
  // invalid afterwards.
  simdjson::error_code parse(std::string_view text);
  simdjson::dom::element root() const { return root_; }

  // The number's text as written, when `e` stands in for a number simdjson cannot hold.
  std::optional<std::string_view> big_number(simdjson::dom::element e) const;
  // simdjson::minify, but a stand-in is written as its number's text.
  std::string minify(simdjson::dom::element e) const;

 private:
  simdjson::dom::parser parser_;
  simdjson::dom::element root_;
  std::unordered_set<const char*> stand_ins_;  // where each stand-in's characters are
};

// A JSON number's value as Python's float() gives it: the nearest double, ±infinity past the
// largest, ±0 below the smallest. `text` must be a JSON number.
double number_value(std::string_view text);
// Whether a JSON number is written as an integer (no fraction, no exponent).
bool integer_text(std::string_view text);

}  // namespace waste::json
