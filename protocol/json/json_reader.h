// The one reader of untrusted request bodies. A Field is a JSON value together with the path a
// client would write for it (`messages[2].content[0].type`); every refusal is a FieldError whose
// message starts with that path and which carries the path, so any API can answer it in its own
// error shape (protocol/request_body.h) and the client sees exactly which field was wrong. Numbers
// simdjson cannot hold (json_document.h) are numbers here too: ranges refuse them naming the field
// and the text sent, and compact_json() writes them as sent.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <simdjson.h>

#include "protocol/json/json_document.h"

namespace waste::json {

// A refusal of the body ("request body: why", path "") or of one field ("PATH: why").
class FieldError : public std::runtime_error {
 public:
  FieldError(std::string message_text, std::string field_path)
      : std::runtime_error(message_text),
        message(std::move(message_text)),
        path(std::move(field_path)) {}

  // The whole message: what() ends at an embedded NUL, and a field's value may hold one.
  std::string message;
  std::string path;
};

class Field {
 public:
  Field(simdjson::dom::element e, std::string path, const Document& doc)
      : e_(e), path_(std::move(path)), doc_(&doc) {}

  const std::string& path() const { return path_; }
  // "a string", "an object", ...: for messages that say what was sent instead.
  std::string_view kind() const;
  bool is_null() const { return e_.is_null(); }
  bool is_string() const { return e_.is_string() && !doc_->big_number(e_); }
  bool is_object() const { return e_.is_object(); }
  bool is_array() const { return e_.is_array(); }
  bool is_bool() const { return e_.is_bool(); }
  bool is_number() const { return e_.is_number() || doc_->big_number(e_); }

  // The member `key` of this object; nullopt when it is absent or null (OpenAI clients use the
  // two interchangeably). Refuses when this is not an object.
  std::optional<Field> get(std::string_view key) const;
  // Like get(), but "PATH.key: missing" when there is none.
  Field required(std::string_view key) const;
  // Whether the object has `key` at all, even as null.
  bool has(std::string_view key) const;
  // The member `key` read as below; nullopt when it is absent or null.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<bool> get_boolean(std::string_view key) const;
  std::optional<int64_t> get_integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::optional<double> get_number(std::string_view key, double lo, double hi) const;

  std::string string() const;  // must be a string
  bool boolean() const;        // must be true or false
  // An integer in [lo, hi]; a number with a fraction or an exponent is refused, and one past
  // int64 is out of range.
  int64_t integer(int64_t lo, int64_t hi) const;
  // Any number in [lo, hi] (NaN never is); one past a double's range is ±infinity.
  double number(double lo, double hi) const;
  std::vector<Field> items() const;                            // must be an array
  std::vector<std::pair<std::string, Field>> members() const;  // must be an object
  void expect_object() const;

  // The value re-written as compact JSON, keys in their order, non-ASCII kept, every integer
  // with its digits (Python's json.dumps with separators (",", ":")), and a number past a
  // double's range as sent.
  std::string compact_json() const;

  // FieldError("PATH: why", PATH).
  [[noreturn]] void refuse(std::string_view why) const;

  // The simdjson element: a number simdjson cannot hold is a string there (json_document.h).
  const simdjson::dom::element& element() const { return e_; }

 private:
  simdjson::dom::object object() const;  // refuses when this is not an object
  std::string child_path(std::string_view key) const;

  simdjson::dom::element e_;
  std::string path_;
  const Document* doc_;
};

// A parsed body: owns the DOM its fields point into. Refuses (FieldError) text that is not JSON or
// whose top level is not an object.
class Body {
 public:
  explicit Body(std::string_view text);
  Body(const Body&) = delete;
  Body& operator=(const Body&) = delete;

  // The top-level object; its members' paths are their bare names.
  Field root() const { return Field(doc_.root(), "", doc_); }

 private:
  Document doc_;
};

}  // namespace waste::json
