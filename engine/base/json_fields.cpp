#include "engine/base/json_fields.h"

#include <cmath>

#include "engine/base/error.h"

namespace waste::json {

namespace {

std::string path(const std::string& where, std::string_view key) {
  return fmt::format("{}.{}", where, key);
}

}  // namespace

simdjson::dom::array items(const element& e) {
  simdjson::dom::array a;
  if (e.get_array().get(a)) fail("internal: element is not an array");
  return a;
}

simdjson::dom::object fields(const element& e) {
  simdjson::dom::object o;
  if (e.get_object().get(o)) fail("internal: element is not an object");
  return o;
}

element parse(simdjson::dom::parser& parser, const simdjson::padded_string& text,
              const std::string& where) {
  element root;
  if (auto err = parser.parse(text).get(root))
    fail("{}: not valid JSON ({})", where, simdjson::error_message(err));
  return root;
}

bool has(const element& obj, std::string_view key) {
  return obj.is_object() && obj[key].error() == simdjson::SUCCESS;
}

bool has_value(const element& obj, std::string_view key) {
  if (!has(obj, key)) return false;
  return !obj[key].value_unsafe().is_null();
}

int64_t as_int(const element& e, const std::string& what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (e.is_int64()) {
    v = e.get_int64().value_unsafe();
  } else if (e.is_uint64()) {
    fail("{}: {} is too large", what, e.get_uint64().value_unsafe());
  } else if (e.is_double()) {
    double d = e.get_double().value_unsafe();
    if (!(std::fabs(d) < 9e18) || d != std::floor(d))
      fail("{}: must be an integer, not {}", what, d);
    v = (int64_t)d;
  } else {
    fail("{}: must be an integer", what);
  }
  if (v < lo || v > hi) fail("{}: {} is out of range (must be between {} and {})", what, v, lo, hi);
  return v;
}

int64_t get_int(const element& obj, std::string_view key, const std::string& where, int64_t lo,
                int64_t hi) {
  if (!has_value(obj, key)) fail("{}: missing", path(where, key));
  return as_int(obj[key].value_unsafe(), path(where, key), lo, hi);
}

int64_t get_int_or(const element& obj, std::string_view key, const std::string& where, int64_t lo,
                   int64_t hi, int64_t def) {
  if (!has_value(obj, key)) return def;
  return as_int(obj[key].value_unsafe(), path(where, key), lo, hi);
}

double get_double_or(const element& obj, std::string_view key, const std::string& where,
                     double def) {
  if (!has_value(obj, key)) return def;
  element e = obj[key].value_unsafe();
  if (!e.is_number()) fail("{}: must be a number", path(where, key));
  double d = e.is_double()  ? e.get_double().value_unsafe()
             : e.is_int64() ? (double)e.get_int64().value_unsafe()
                            : (double)e.get_uint64().value_unsafe();
  if (!std::isfinite(d)) fail("{}: must be finite", path(where, key));
  return d;
}

bool get_bool_or(const element& obj, std::string_view key, const std::string& where, bool def) {
  if (!has_value(obj, key)) return def;
  element e = obj[key].value_unsafe();
  if (!e.is_bool()) fail("{}: must be true or false", path(where, key));
  return e.get_bool().value_unsafe();
}

std::optional<std::string> get_string_opt(const element& obj, std::string_view key,
                                          const std::string& where) {
  if (!has_value(obj, key)) return std::nullopt;
  element e = obj[key].value_unsafe();
  if (!e.is_string()) fail("{}: must be a string", path(where, key));
  return std::string(e.get_string().value_unsafe());
}

std::string get_string(const element& obj, std::string_view key, const std::string& where) {
  auto s = get_string_opt(obj, key, where);
  if (!s) fail("{}: missing", path(where, key));
  return *s;
}

element get_object(const element& obj, std::string_view key, const std::string& where) {
  if (!has(obj, key)) fail("{}: missing", path(where, key));
  element e = obj[key].value_unsafe();
  if (!e.is_object()) fail("{}: must be an object", path(where, key));
  return e;
}

element get_array(const element& obj, std::string_view key, const std::string& where) {
  if (!has(obj, key)) fail("{}: missing", path(where, key));
  element e = obj[key].value_unsafe();
  if (!e.is_array()) fail("{}: must be an array", path(where, key));
  return e;
}

}  // namespace waste::json
