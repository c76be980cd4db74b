#include "protocol/json/json_reader.h"

#include <fmt/format.h>

#include "protocol/json/python_json.h"

namespace waste::json {

using simdjson::dom::element_type;

std::string_view Field::kind() const {
  switch (e_.type()) {
    case element_type::ARRAY:
      return "an array";
    case element_type::OBJECT:
      return "an object";
    case element_type::STRING:
      return doc_->big_number(e_) ? "a number" : "a string";
    case element_type::BOOL:
      return "a boolean";
    case element_type::NULL_VALUE:
      return "null";
    default:
      return "a number";
  }
}

void Field::refuse(std::string_view why) const {
  if (path_.empty()) throw FieldError(fmt::format("request body: {}", why), "");
  throw FieldError(fmt::format("{}: {}", path_, why), path_);
}

std::string Field::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

simdjson::dom::object Field::object() const {
  simdjson::dom::object o;
  if (e_.get(o) != simdjson::SUCCESS) refuse(fmt::format("must be an object, not {}", kind()));
  return o;
}

void Field::expect_object() const {
  object();
}

std::optional<Field> Field::get(std::string_view key) const {
  simdjson::dom::element v;
  if (object().at_key(key).get(v) != simdjson::SUCCESS || v.is_null()) return std::nullopt;
  return Field(v, child_path(key), *doc_);
}

bool Field::has(std::string_view key) const {
  simdjson::dom::element v;
  return object().at_key(key).get(v) == simdjson::SUCCESS;
}

std::optional<std::string> Field::get_string(std::string_view key) const {
  std::optional<Field> f = get(key);
  return f ? std::optional<std::string>(f->string()) : std::nullopt;
}

std::optional<bool> Field::get_boolean(std::string_view key) const {
  std::optional<Field> f = get(key);
  return f ? std::optional<bool>(f->boolean()) : std::nullopt;
}

std::optional<int64_t> Field::get_integer(std::string_view key, int64_t lo, int64_t hi) const {
  std::optional<Field> f = get(key);
  return f ? std::optional<int64_t>(f->integer(lo, hi)) : std::nullopt;
}

std::optional<double> Field::get_number(std::string_view key, double lo, double hi) const {
  std::optional<Field> f = get(key);
  return f ? std::optional<double>(f->number(lo, hi)) : std::nullopt;
}

Field Field::required(std::string_view key) const {
  if (std::optional<Field> f = get(key)) return *f;
  throw FieldError(fmt::format("{}: missing", child_path(key)), child_path(key));
}

std::string Field::string() const {
  std::string_view s;
  if (!is_string() || e_.get(s) != simdjson::SUCCESS)
    refuse(fmt::format("must be a string, not {}", kind()));
  return std::string(s);
}

bool Field::boolean() const {
  bool b;
  if (e_.get(b) != simdjson::SUCCESS) refuse(fmt::format("must be true or false, not {}", kind()));
  return b;
}

int64_t Field::integer(int64_t lo, int64_t hi) const {
  // An integer past int64 (a uint64, or one simdjson cannot hold) is out of any range asked for;
  // the message shows it as sent.
  std::optional<std::string_view> big = doc_->big_number(e_);
  if (big && integer_text(*big)) refuse(fmt::format("{} is out of range ({} to {})", *big, lo, hi));
  if (e_.type() == element_type::UINT64)
    refuse(fmt::format("{} is out of range ({} to {})", uint64_t(e_), lo, hi));
  int64_t v;
  if (e_.get(v) != simdjson::SUCCESS) refuse("must be an integer");
  if (v < lo || v > hi) refuse(fmt::format("{} is out of range ({} to {})", v, lo, hi));
  return v;
}

double Field::number(double lo, double hi) const {
  double v;
  std::optional<std::string_view> big = doc_->big_number(e_);
  if (big)
    v = number_value(*big);  // 1e400 is infinity, out of any finite range
  else if (e_.is_int64())
    v = (double)int64_t(e_.get_int64());
  else if (e_.is_uint64())
    v = (double)uint64_t(e_.get_uint64());
  else if (e_.get(v) != simdjson::SUCCESS)
    refuse(fmt::format("must be a number, not {}", kind()));
  if (!(v >= lo && v <= hi))
    refuse(fmt::format("{} is out of range ({} to {})",
                       big ? std::string(*big) : fmt::format("{}", v), lo, hi));
  return v;
}

std::vector<Field> Field::items() const {
  simdjson::dom::array a;
  if (e_.get(a) != simdjson::SUCCESS) refuse(fmt::format("must be an array, not {}", kind()));
  std::vector<Field> out;
  out.reserve(a.size());
  size_t i = 0;
  for (simdjson::dom::element x : a) out.emplace_back(x, fmt::format("{}[{}]", path_, i++), *doc_);
  return out;
}

std::vector<std::pair<std::string, Field>> Field::members() const {
  std::vector<std::pair<std::string, Field>> out;
  for (auto [k, v] : object()) out.emplace_back(std::string(k), Field(v, child_path(k), *doc_));
  return out;
}

std::string Field::compact_json() const {
  return py_dumps(py_from_dom(*doc_, e_),
                  {.sort_keys = false, .compact = true, .ensure_ascii = false});
}

Body::Body(std::string_view text) {
  if (simdjson::error_code err = doc_.parse(text))
    throw FieldError(fmt::format("request body: not valid JSON ({})", simdjson::error_message(err)),
                     "");
  if (!doc_.root().is_object()) throw FieldError("request body: must be a JSON object", "");
}

}  // namespace waste::json
