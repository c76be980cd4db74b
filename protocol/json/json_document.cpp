#include "protocol/json/json_document.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/json/json_writer.h"

namespace waste::json {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

bool digit(char c) {
  return c >= '0' && c <= '9';
}

bool number_char(char c) {
  return digit(c) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

// RFC 8259's number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
bool json_number(std::string_view t) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < t.size() && digit(t[i])) i++;
    return i > start;
  };
  if (i < t.size() && t[i] == '-') i++;
  if (i < t.size() && t[i] == '0')
    i++;
  else if (!digits())
    return false;
  if (i < t.size() && t[i] == '.') {
    i++;
    if (!digits()) return false;
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    i++;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) i++;
    if (!digits()) return false;
  }
  return i == t.size();
}

// What simdjson refuses for its size: an integer in neither int64 nor uint64, or a number
// whose magnitude is past the largest double (one below the smallest it reads as 0).
bool beyond_simdjson(std::string_view t) {
  if (!integer_text(t)) return std::isinf(number_value(t));
  const char* end = t.data() + t.size();
  int64_t i;
  uint64_t u;
  return std::from_chars(t.data(), end, i).ec != std::errc{} &&
         std::from_chars(t.data(), end, u).ec != std::errc{};
}

// A number simdjson cannot hold: where it is, and how many strings (keys too) come before it.
struct BigNumber {
  size_t begin, end;
  size_t strings_before;
};

// The numbers outside strings that simdjson cannot hold. Anything malformed is left as it is,
// for simdjson to refuse.
std::vector<BigNumber> find_big_numbers(std::string_view s) {
  std::vector<BigNumber> out;
  size_t strings = 0;
  for (size_t i = 0; i < s.size();) {
    if (s[i] == '"') {
      strings++;
      for (i++; i < s.size() && s[i] != '"'; i++)
        if (s[i] == '\\') i++;  // an escaped character never ends the string
      i++;
    } else if (s[i] == '-' || digit(s[i])) {
      size_t end = i;
      while (end < s.size() && number_char(s[end])) end++;
      const std::string_view t = s.substr(i, end - i);
      if (json_number(t) && beyond_simdjson(t)) out.push_back({i, end, strings++});
      i = end;
    } else {
      i++;
    }
  }
  return out;
}

// Walks a DOM's strings in document order, keys included, which is the order the scan counted
// them in, and records where the stand-ins' characters are.
class StandInWalk {
 public:
  StandInWalk(const std::vector<BigNumber>& found, std::unordered_set<const char*>& out)
      : found_(found), out_(out) {}

  // False when a stand-in is a key: the text had a number where a key belongs.
  bool walk(element e) {
    if (next_ == found_.size()) return true;
    switch (e.type()) {
      case element_type::ARRAY:
        for (element x : simdjson::dom::array(e))
          if (!walk(x)) return false;
        return true;
      case element_type::OBJECT:
        for (auto [key, value] : simdjson::dom::object(e))
          if (!string(key, true) || !walk(value)) return false;
        return true;
      case element_type::STRING:
        return string(std::string_view(e), false);
      default:
        return true;
    }
  }
  bool found_all() const { return next_ == found_.size(); }

 private:
  bool string(std::string_view s, bool key) {
    if (next_ < found_.size() && found_[next_].strings_before == seen_) {
      if (key) return false;
      out_.insert(s.data());
      next_++;
    }
    seen_++;
    return true;
  }

  const std::vector<BigNumber>& found_;
  std::unordered_set<const char*>& out_;
  size_t next_ = 0;  // the next stand-in to meet
  size_t seen_ = 0;  // strings met so far
};

}  // namespace

double number_value(std::string_view text) {
  // strtod rather than from_chars: libc++ has no floating-point from_chars before LLVM 20. strtod
  // rounds to nearest and gives ±HUGE_VAL past the largest double and 0 (or the subnormal) below
  // the smallest, the values wanted here; its errno is not needed. waste never calls setlocale,
  // so the C locale's '.' is the decimal point it reads (config's std::stod relies on the same).
  const std::string terminated(text);
  return std::strtod(terminated.c_str(), nullptr);
}

bool integer_text(std::string_view text) {
  return text.find_first_of(".eE") == std::string_view::npos;
}

simdjson::error_code Document::parse(std::string_view text) {
  stand_ins_.clear();
  simdjson::error_code err = parser_.parse(text.data(), text.size()).get(root_);
  if (err != simdjson::NUMBER_ERROR) return err;
  const std::vector<BigNumber> found = find_big_numbers(text);
  if (found.empty()) return err;  // a malformed number
  // Each big number becomes a string of its own text, which simdjson holds as it is.
  std::string quoted;
  quoted.reserve(text.size() + 2 * found.size());
  size_t at = 0;
  for (const BigNumber& n : found) {
    quoted.append(text.substr(at, n.begin - at)).append("\"");
    quoted.append(text.substr(n.begin, n.end - n.begin)).append("\"");
    at = n.end;
  }
  quoted.append(text.substr(at));
  if ((err = parser_.parse(quoted.data(), quoted.size()).get(root_))) return err;
  StandInWalk walk(found, stand_ins_);
  if (!walk.walk(root_) || !walk.found_all()) {
    stand_ins_.clear();
    return simdjson::TAPE_ERROR;  // what simdjson says of a number in a key's place
  }
  return simdjson::SUCCESS;
}

std::optional<std::string_view> Document::big_number(element e) const {
  std::string_view s;
  if (stand_ins_.empty() || e.get(s) != simdjson::SUCCESS || !stand_ins_.count(s.data()))
    return std::nullopt;
  return s;
}

std::string Document::minify(element e) const {
  if (std::optional<std::string_view> big = big_number(e)) return std::string(*big);
  std::string out;
  switch (e.type()) {
    case element_type::ARRAY:
      out += '[';
      for (element x : simdjson::dom::array(e)) {
        if (out.size() > 1) out += ',';
        out += minify(x);
      }
      return out + ']';
    case element_type::OBJECT:
      out += '{';
      for (auto [key, value] : simdjson::dom::object(e)) {
        if (out.size() > 1) out += ',';
        append_json_string(&out, key);
        out += ':';
        out += minify(value);
      }
      return out + '}';
    default:
      return simdjson::minify(e);
  }
}

}  // namespace waste::json
