// Builds compact JSON text. Strings are escaped per RFC 8259 (control characters as \u00XX);
// doubles use the shortest form that reads back to the same value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view s);
  JsonWriter& value(const char* s) { return value(std::string_view(s)); }
  JsonWriter& value(const std::string& s) { return value(std::string_view(s)); }
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value((int64_t)v); }
  JsonWriter& value(uint64_t v);
  JsonWriter& value(double v);
  JsonWriter& value(bool v);
  JsonWriter& null();
  // Inserts already-valid JSON text as a value.
  JsonWriter& raw(std::string_view json);

  const std::string& str() const { return out_; }

 private:
  void before_value();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

void append_json_string(std::string* out, std::string_view s);

}  // namespace waste
