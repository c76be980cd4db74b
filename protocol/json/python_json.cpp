#include "protocol/json/python_json.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "engine/base/ascii.h"
#include "engine/base/error.h"
#include "protocol/json/json_document.h"

namespace waste {

PyJson PyJson::make(Type t) {
  PyJson v;
  v.type = t;
  return v;
}

PyJson PyJson::string(std::string s) {
  PyJson v = make(Type::kString);
  v.text = std::move(s);
  return v;
}

PyJson PyJson::floating(double d) {
  PyJson v = make(Type::kFloat);
  v.number = d;
  return v;
}

PyJson PyJson::integer(std::string digits) {
  PyJson v = make(Type::kInt);
  // Python's int("-0") is 0, and json.dumps writes it without a sign.
  if (digits.find_first_not_of("-0") == std::string::npos) digits = "0";
  v.text = std::move(digits);
  return v;
}

PyJson PyJson::boolean_value(bool b) {
  PyJson v = make(Type::kBool);
  v.boolean = b;
  return v;
}

void PyJson::set(std::string key, PyJson value) {
  for (PyMember& m : members) {
    if (m.key == key) {
      m.value = std::move(value);
      return;
    }
  }
  members.push_back({std::move(key), std::move(value)});
}

const PyJson* PyJson::find(std::string_view key) const {
  for (const PyMember& m : members) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

namespace {

// Python's recursion limit stops json.loads around this depth; a bound also keeps a hostile
// request from exhausting our stack.
constexpr int kMaxDepth = 1000;

bool is_ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// Length of the well-formed UTF-8 sequence at s[i], or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return (unsigned char)s[i + k]; };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  std::size_t n = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
  if (n == 0 || c > 0xf4 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; k++) {
    if ((b(k) & 0xc0) != 0x80) return 0;
  }
  if (c == 0xe0 && b(1) < 0xa0) return 0;   // overlong
  if (c == 0xed && b(1) >= 0xa0) return 0;  // surrogate
  if (c == 0xf0 && b(1) < 0x90) return 0;   // overlong
  if (c == 0xf4 && b(1) >= 0x90) return 0;  // above U+10FFFF
  return n;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += (char)cp;
  } else if (cp < 0x800) {
    out += (char)(0xc0 | (cp >> 6));
    out += (char)(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += (char)(0xe0 | (cp >> 12));
    out += (char)(0x80 | ((cp >> 6) & 0x3f));
    out += (char)(0x80 | (cp & 0x3f));
  } else {
    out += (char)(0xf0 | (cp >> 18));
    out += (char)(0x80 | ((cp >> 12) & 0x3f));
    out += (char)(0x80 | ((cp >> 6) & 0x3f));
    out += (char)(0x80 | (cp & 0x3f));
  }
}

std::uint32_t decode_utf8(std::string_view s, std::size_t i, std::size_t n) {
  const auto b = [&](std::size_t k) { return (std::uint32_t)(unsigned char)s[i + k]; };
  if (n == 1) return b(0);
  if (n == 2) return ((b(0) & 0x1f) << 6) | (b(1) & 0x3f);
  if (n == 3) return ((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
  return ((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
}

// A recursive-descent reader following Python's json scanner (strict mode).
class Reader {
 public:
  Reader(std::string_view s, std::size_t pos) : s_(s), pos_(pos) {}

  bool value(PyJson& out, int depth);
  std::size_t pos() const { return pos_; }

 private:
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void skip_ws() { pos_ = py_skip_whitespace(s_, pos_); }
  bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
  bool digits() {
    const std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') pos_++;
    return pos_ > start;
  }
  bool hex4(std::uint32_t& cp);
  bool escape(std::string& out);
  bool string(std::string& out);
  bool number(PyJson& out);
  bool array(PyJson& out, int depth);
  bool object(PyJson& out, int depth);

  std::string_view s_;
  std::size_t pos_;
};

bool Reader::value(PyJson& out, int depth) {
  if (depth > kMaxDepth) return false;
  skip_ws();
  if (pos_ >= s_.size()) return false;
  switch (s_[pos_]) {
    case '"':
      out = PyJson::string({});
      return string(out.text);
    case '{':
      return object(out, depth);
    case '[':
      return array(out, depth);
    case 'n':
      out = PyJson::null();
      return literal("null");
    case 't':
      out = PyJson::boolean_value(true);
      return literal("true");
    case 'f':
      out = PyJson::boolean_value(false);
      return literal("false");
    case 'N':
      out = PyJson::floating(std::numeric_limits<double>::quiet_NaN());
      return literal("NaN");
    case 'I':
      out = PyJson::floating(std::numeric_limits<double>::infinity());
      return literal("Infinity");
    default:
      if (s_.substr(pos_, 9) == "-Infinity") {
        pos_ += 9;
        out = PyJson::floating(-std::numeric_limits<double>::infinity());
        return true;
      }
      return number(out);
  }
}

bool Reader::hex4(std::uint32_t& cp) {
  if (pos_ + 4 > s_.size()) return false;
  cp = 0;
  for (int k = 0; k < 4; k++) {
    const int d = hex_value(s_[pos_++]);
    if (d < 0) return false;
    cp = cp * 16 + (std::uint32_t)d;
  }
  return true;
}

bool Reader::escape(std::string& out) {
  if (pos_ >= s_.size()) return false;
  const char c = s_[pos_++];
  switch (c) {
    case '"':
      out += '"';
      return true;
    case '\\':
      out += '\\';
      return true;
    case '/':
      out += '/';
      return true;
    case 'b':
      out += '\b';
      return true;
    case 'f':
      out += '\f';
      return true;
    case 'n':
      out += '\n';
      return true;
    case 'r':
      out += '\r';
      return true;
    case 't':
      out += '\t';
      return true;
    case 'u':
      break;
    default:
      return false;
  }
  std::uint32_t cp;
  if (!hex4(cp)) return false;
  if (cp >= 0xd800 && cp < 0xdc00) {
    // Python keeps a lone surrogate in the str, but it can never be written out as UTF-8, so
    // such text is refused here rather than producing a prompt the tokenizer cannot take.
    std::uint32_t low;
    if (!literal("\\u") || !hex4(low) || low < 0xdc00 || low > 0xdfff) return false;
    cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
  } else if (cp >= 0xdc00 && cp <= 0xdfff) {
    return false;
  }
  append_utf8(out, cp);
  return true;
}

bool Reader::string(std::string& out) {
  pos_++;  // the opening quote
  while (pos_ < s_.size()) {
    const unsigned char c = (unsigned char)s_[pos_];
    if (c == '"') {
      pos_++;
      return true;
    }
    if (c == '\\') {
      pos_++;
      if (!escape(out)) return false;
      continue;
    }
    if (c < 0x20) return false;  // strict mode: raw control characters are errors
    const std::size_t n = utf8_length(s_, pos_);
    if (n == 0) return false;
    out.append(s_.substr(pos_, n));
    pos_ += n;
  }
  return false;
}

// A number's text as json.loads reads it, but a float past a double's range keeps its text.
PyJson number_from_text(std::string_view text, bool is_float) {
  if (!is_float) return PyJson::integer(std::string(text));
  PyJson v = PyJson::floating(json::number_value(text));
  if (std::isinf(v.number)) v.text = text;
  return v;
}

bool Reader::number(PyJson& out) {
  const std::size_t start = pos_;
  if (at('-')) pos_++;
  if (at('0')) {
    pos_++;
  } else if (!digits()) {
    return false;
  }
  bool is_float = false;
  // As Python's NUMBER_RE: a fraction or exponent is only taken when digits follow it.
  if (at('.') && pos_ + 1 < s_.size() && std::isdigit((unsigned char)s_[pos_ + 1])) {
    pos_++;
    digits();
    is_float = true;
  }
  if (at('e') || at('E')) {
    std::size_t save = pos_++;
    if (at('+') || at('-')) pos_++;
    if (digits()) {
      is_float = true;
    } else {
      pos_ = save;
    }
  }
  const std::string_view text = s_.substr(start, pos_ - start);
  out = number_from_text(text, is_float);
  return true;
}

bool Reader::array(PyJson& out, int depth) {
  out = PyJson::array();
  pos_++;
  skip_ws();
  if (at(']')) {
    pos_++;
    return true;
  }
  while (true) {
    PyJson item;
    if (!value(item, depth + 1)) return false;
    out.items.push_back(std::move(item));
    skip_ws();
    if (at(']')) {
      pos_++;
      return true;
    }
    if (!at(',')) return false;
    pos_++;
  }
}

// Keys are indexed once an object grows, so a hostile request with many keys stays linear.
class MemberIndex {
 public:
  void add(PyJson& obj, std::string key, PyJson value) {
    if (obj.members.size() < 16) {
      obj.set(std::move(key), std::move(value));
      return;
    }
    if (index_.empty()) {
      for (std::size_t i = 0; i < obj.members.size(); i++) index_[obj.members[i].key] = i;
    }
    auto [it, inserted] = index_.try_emplace(key, obj.members.size());
    if (inserted) {
      obj.members.push_back({std::move(key), std::move(value)});
    } else {
      obj.members[it->second].value = std::move(value);
    }
  }

 private:
  std::unordered_map<std::string, std::size_t> index_;
};

bool Reader::object(PyJson& out, int depth) {
  out = PyJson::object();
  pos_++;
  skip_ws();
  if (at('}')) {
    pos_++;
    return true;
  }
  MemberIndex index;
  while (true) {
    skip_ws();
    std::string key;
    if (!at('"') || !string(key)) return false;
    skip_ws();
    if (!at(':')) return false;
    pos_++;
    PyJson item;
    if (!value(item, depth + 1)) return false;
    index.add(out, std::move(key), std::move(item));
    skip_ws();
    if (at('}')) {
      pos_++;
      return true;
    }
    if (!at(',')) return false;
    pos_++;
  }
}

const char kHex[] = "0123456789abcdef";

void append_u_escape(std::string& out, std::uint32_t unit) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xf];
}

// Python's encoder escapes: the short forms, \u00XX for other control characters, and with
// ensure_ascii every code point outside printable ASCII (astral ones as surrogate pairs).
void append_py_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = (unsigned char)s[i];
    if (c >= 0x80) {
      std::size_t n = std::max<std::size_t>(utf8_length(s, i), 1);
      if (!ensure_ascii) {
        out.append(s.substr(i, n));
      } else {
        std::uint32_t cp = n > 1 ? decode_utf8(s, i, n) : 0xfffd;
        if (cp >= 0x10000) {
          cp -= 0x10000;
          append_u_escape(out, 0xd800 + (cp >> 10));
          append_u_escape(out, 0xdc00 + (cp & 0x3ff));
        } else {
          append_u_escape(out, cp);
        }
      }
      i += n;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          append_u_escape(out, c);
        } else {
          out += (char)c;
        }
    }
    i++;
  }
  out += '"';
}

void dump(const PyJson& v, const PyDumpStyle& style, std::string& out);

void dump_object(const PyJson& v, const PyDumpStyle& style, std::string& out) {
  std::vector<const PyMember*> order;
  order.reserve(v.members.size());
  for (const PyMember& m : v.members) order.push_back(&m);
  if (style.sort_keys) {
    std::stable_sort(order.begin(), order.end(),
                     [](const PyMember* a, const PyMember* b) { return a->key < b->key; });
  }
  out += '{';
  for (std::size_t i = 0; i < order.size(); i++) {
    if (i > 0) out += style.compact ? "," : ", ";
    append_py_string(out, order[i]->key, style.ensure_ascii);
    out += style.compact ? ":" : ": ";
    dump(order[i]->value, style, out);
  }
  out += '}';
}

void dump(const PyJson& v, const PyDumpStyle& style, std::string& out) {
  switch (v.type) {
    case PyJson::Type::kNull:
      out += "null";
      break;
    case PyJson::Type::kBool:
      out += v.boolean ? "true" : "false";
      break;
    case PyJson::Type::kInt:
      out += v.text;
      break;
    case PyJson::Type::kFloat:
      out += v.text.empty() ? py_float_text(v.number) : v.text;
      break;
    case PyJson::Type::kString:
      append_py_string(out, v.text, style.ensure_ascii);
      break;
    case PyJson::Type::kArray:
      out += '[';
      for (std::size_t i = 0; i < v.items.size(); i++) {
        if (i > 0) out += style.compact ? "," : ", ";
        dump(v.items[i], style, out);
      }
      out += ']';
      break;
    case PyJson::Type::kObject:
      dump_object(v, style, out);
      break;
  }
}

}  // namespace

std::size_t py_skip_whitespace(std::string_view text, std::size_t pos) {
  while (pos < text.size() && is_ws(text[pos])) pos++;
  return pos;
}

std::optional<PyJson> py_parse_value(std::string_view text, std::size_t& pos) {
  Reader r(text, pos);
  PyJson v;
  if (!r.value(v, 0)) return std::nullopt;
  pos = r.pos();
  return v;
}

PyJson py_loads(std::string_view text, std::string_view what) {
  std::size_t pos = 0;
  std::optional<PyJson> v = py_parse_value(text, pos);
  if (!v) fail<UsageError>("{}: not valid JSON (near byte {})", what, pos);
  pos = py_skip_whitespace(text, pos);
  if (pos != text.size())
    fail<UsageError>("{}: extra data after the JSON value at byte {}", what, pos);
  return std::move(*v);
}

std::string py_float_text(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  // Shortest round-trip digits, then laid out by the rules of Python's float_repr_style "short":
  // positional when the decimal point falls in (-4, 16], exponent form otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, (std::size_t)(res.ptr - buf));
  const bool negative = sci[0] == '-';
  if (negative) sci.remove_prefix(1);
  const std::size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits += c;
  }
  int exponent = 0;
  std::string_view ex = sci.substr(e + 1);
  if (ex[0] == '+') ex.remove_prefix(1);
  std::from_chars(ex.data(), ex.data() + ex.size(), exponent);
  const int decpt = exponent + 1;
  const int n = (int)digits.size();

  std::string out = negative ? "-" : "";
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    const int shown = decpt - 1;
    out += shown < 0 ? "e-" : "e+";
    std::string mag = std::to_string(std::abs(shown));
    if (mag.size() < 2) mag = "0" + mag;
    return out + mag;
  }
  if (decpt <= 0) return out + "0." + std::string((std::size_t)-decpt, '0') + digits;
  if (decpt >= n) return out + digits + std::string((std::size_t)(decpt - n), '0') + ".0";
  return out + digits.substr(0, (std::size_t)decpt) + "." + digits.substr((std::size_t)decpt);
}

std::string py_dumps(const PyJson& value, const PyDumpStyle& style) {
  std::string out;
  dump(value, style, out);
  return out;
}

PyJson py_from_dom(const json::Document& doc, simdjson::dom::element element) {
  using simdjson::dom::element_type;
  switch (element.type()) {
    case element_type::ARRAY: {
      PyJson out = PyJson::array();
      simdjson::dom::array arr = element.get_array().value();
      for (simdjson::dom::element item : arr) out.items.push_back(py_from_dom(doc, item));
      return out;
    }
    case element_type::OBJECT: {
      PyJson out = PyJson::object();
      simdjson::dom::object obj = element.get_object().value();
      MemberIndex index;
      for (auto field : obj) index.add(out, std::string(field.key), py_from_dom(doc, field.value));
      return out;
    }
    case element_type::INT64:
      return PyJson::integer(std::to_string(element.get_int64().value()));
    case element_type::UINT64:
      return PyJson::integer(std::to_string(element.get_uint64().value()));
    case element_type::DOUBLE:
      return PyJson::floating(element.get_double().value());
    case element_type::STRING:
      if (std::optional<std::string_view> big = doc.big_number(element))
        return number_from_text(*big, !json::integer_text(*big));
      return PyJson::string(std::string(element.get_string().value()));
    case element_type::BOOL:
      return PyJson::boolean_value(element.get_bool().value());
    case element_type::NULL_VALUE:
      return PyJson::null();
  }
  return PyJson::null();
}

void py_deep_sort(PyJson& value) {
  for (PyJson& item : value.items) py_deep_sort(item);
  for (PyMember& m : value.members) py_deep_sort(m.value);
  std::stable_sort(value.members.begin(), value.members.end(),
                   [](const PyMember& a, const PyMember& b) { return a.key < b.key; });
}

std::string canonical_json(std::string_view json) {
  PyJson v = py_loads(json);
  py_deep_sort(v);
  return py_dumps(v, {.sort_keys = false, .compact = true, .ensure_ascii = false});
}

}  // namespace waste
