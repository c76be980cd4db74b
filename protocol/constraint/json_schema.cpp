#include "protocol/constraint/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include <simdjson.h>

#include "protocol/json/json_document.h"
#include "protocol/json/json_writer.h"

namespace waste {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;
using Kind = GrammarNode::Kind;

constexpr size_t kMaxSchemaBytes = 1 << 20;
constexpr int kMaxDepth = 200;
constexpr size_t kMaxParts = 64;
constexpr size_t kMaxNodes = 200000;
constexpr double kBoundLimit = 1e12;  // see the digit caps in grammar_matcher.cpp
constexpr uint32_t kMaxPatternLength = 4096;

enum TypeBit : uint8_t {
  kNull = 1,
  kBool = 2,
  kObj = 4,
  kArr = 8,
  kNum = 16,
  kInt = 32,
  kStr = 64,
};
constexpr uint8_t kAllTypes = 127;

enum Skip : uint8_t { kSkipRef = 1, kSkipAllOf = 2, kSkipAnyOf = 4, kSkipOneOf = 8 };

// One schema object of a conjunction: every part applies to the same value.
struct Part {
  element e;
  std::string path;  // JSON pointer
  uint8_t skip = 0;  // combinators already expanded
};
using Conj = std::vector<Part>;

const std::set<std::string_view> kKnown = {"type",
                                           "properties",
                                           "required",
                                           "additionalProperties",
                                           "items",
                                           "prefixItems",
                                           "additionalItems",
                                           "minItems",
                                           "maxItems",
                                           "enum",
                                           "const",
                                           "anyOf",
                                           "oneOf",
                                           "allOf",
                                           "$ref",
                                           "$defs",
                                           "definitions",
                                           "minLength",
                                           "maxLength",
                                           "pattern",
                                           "format",
                                           "minimum",
                                           "maximum",
                                           "exclusiveMinimum",
                                           "exclusiveMaximum",
                                           "multipleOf",
                                           "propertyNames",
                                           "minProperties",
                                           "maxProperties",
                                           "discriminator",
                                           "uniqueItems",
                                           "title",
                                           "description",
                                           "$comment",
                                           "default",
                                           "examples",
                                           "$schema",
                                           "$id",
                                           "deprecated",
                                           "readOnly",
                                           "writeOnly"};

std::string escape_pointer(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string where(const std::string& path) {
  return "#" + path;
}

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw SchemaError(fmt::format("schema at {}: {}", where(path), what));
}

uint8_t type_bit(std::string_view name, const std::string& path) {
  if (name == "null") return kNull;
  if (name == "boolean") return kBool;
  if (name == "object") return kObj;
  if (name == "array") return kArr;
  if (name == "number") return kNum | kInt;
  if (name == "integer") return kInt;
  if (name == "string") return kStr;
  refuse(path + "/type", fmt::format("unknown type \"{}\"", name));
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// JavaScript's String.length: characters past U+FFFF count twice.
size_t utf16_units(std::string_view s) {
  size_t n = code_points(s);
  for (unsigned char c : s) n += c >= 0xF0;
  return n;
}

std::vector<Symbol> byte_symbols(std::string_view s) {
  std::vector<Symbol> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// Fills the per-position tables of required properties the matcher consults.
void index_required(GrammarNode& n) {
  const int np = (int)n.props.size();
  n.first_required_from.assign(np + 1, np);
  n.required_from.assign(np + 1, 0);
  for (int i = np - 1; i >= 0; --i) {
    n.first_required_from[i] = n.props[i].required ? i : n.first_required_from[i + 1];
    n.required_from[i] = n.required_from[i + 1] + (n.props[i].required ? 1 : 0);
  }
}

class Compiler {
 public:
  Compiler(Grammar& g, const json::Document& doc) : g_(g), doc_(doc), root_(doc.root()) {}

  // The node for values satisfying every part of `conj` and having one of `types`; -1 if none.
  // `raw`: strings are raw argument text (typed arguments) rather than JSON strings.
  int compile(Conj conj, uint8_t types, bool raw, int depth);
  int any();
  int any_object();
  int typed_arguments(Conj conj, const TypedArgumentSpelling& spelling);

 private:
  bool expand(Conj& conj);
  void check_keywords(const Part& p);
  std::optional<element> get(const Part& p, std::string_view key) const;
  // Values read through the document, where a number simdjson cannot hold is a string: it is a
  // number here, never a string (json_document.h).
  std::optional<std::string_view> str(element v) const;
  std::optional<double> num(element v) const;
  uint8_t value_types(element v) const;
  std::string minify(element v) const { return doc_.minify(v); }
  std::optional<uint32_t> count(const Part& p, const char* word) const;
  int combinator(Conj& conj, uint8_t types, bool raw, int depth);
  void check_one_of(const Conj& conj, size_t i, array alts);
  std::map<std::string, std::set<std::string>> pinned(Conj alt);
  void check_discriminator(const Part& p);
  uint8_t declared_types(const Conj& conj);
  int typed(const Conj& conj, uint8_t types, bool raw, int depth);
  int enum_literal(const Conj& conj, uint8_t types, bool raw);
  int object_node(const Conj& conj, int depth);
  // additionalProperties of one part: it covers the keys that part's own properties do not.
  struct AdditionalRule {
    std::set<std::string> own;
    bool forbid = false;
    std::optional<Part> schema;
  };
  struct Props {
    std::vector<std::pair<std::string, Conj>> list;
    std::set<std::string> required;
    std::vector<AdditionalRule> rules;
    bool additional_allowed = true;  // keys no part declares
    Conj additional;
  };
  Props collect_props(const Conj& conj);
  int property_names(const Conj& conj, Props& props);
  void property_counts(const Conj& conj, GrammarNode& n);
  int array_node(const Conj& conj, int depth);
  int string_node(const Conj& conj, bool raw);
  void add_finish_table(GrammarNode& n, const std::string& path);
  int number_node(const Conj& conj, bool integer);
  int make(GrammarNode n) {
    if (g_.nodes.size() >= kMaxNodes) refuse("", "schema is too large to compile");
    return g_.add(std::move(n));
  }

  Grammar& g_;
  const json::Document& doc_;
  element root_;
  std::map<std::string, int> memo_;
  int any_ = -1;
};

std::optional<element> Compiler::get(const Part& p, std::string_view key) const {
  element v;
  if (p.e.is_object() && p.e.get_object().value().at_key(key).get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
}

std::optional<std::string_view> Compiler::str(element v) const {
  std::string_view s;
  if (v.get(s) != simdjson::SUCCESS || doc_.big_number(v)) return std::nullopt;
  return s;
}

// 1e400 is infinity and a 30-digit integer the nearest double, as strtod reads them.
std::optional<double> Compiler::num(element v) const {
  if (std::optional<std::string_view> big = doc_.big_number(v)) return json::number_value(*big);
  if (!v.is_number()) return std::nullopt;
  return double(v);
}

// Types a JSON value has (an integral number is both integer and number).
uint8_t Compiler::value_types(element v) const {
  if (std::optional<double> d = num(v)) return std::floor(*d) == *d ? (kNum | kInt) : kNum;
  switch (v.type()) {
    case simdjson::dom::element_type::NULL_VALUE:
      return kNull;
    case simdjson::dom::element_type::BOOL:
      return kBool;
    case simdjson::dom::element_type::OBJECT:
      return kObj;
    case simdjson::dom::element_type::ARRAY:
      return kArr;
    default:
      return kStr;
  }
}

// A count keyword (minLength, maxItems, ...): a non-negative whole number, capped at 4e9 (more
// than any output can reach).
std::optional<uint32_t> Compiler::count(const Part& p, const char* word) const {
  auto v = get(p, word);
  if (!v) return std::nullopt;
  const double d = num(*v).value_or(-1);
  if (!(d >= 0) || std::floor(d) != d)
    refuse(p.path + "/" + word, "must be a non-negative integer");
  return (uint32_t)std::min(d, 4e9);
}

void Compiler::check_keywords(const Part& p) {
  object o = object(p.e);
  for (auto [key, value] : o) {
    if (!kKnown.count(key))
      refuse(p.path, fmt::format("keyword \"{}\" is not supported", std::string(key)));
    if (key == "uniqueItems" && (!value.is_bool() || bool(value)))
      refuse(p.path, "keyword \"uniqueItems\" is supported only as false");
    if (key == "$id" && !p.path.empty())
      refuse(p.path, "keyword \"$id\" is supported only at the root");
  }
}

// Resolves $ref and allOf into more parts. Returns false when a part is the schema `false`.
bool Compiler::expand(Conj& conj) {
  for (size_t i = 0; i < conj.size(); ++i) {
    if (conj.size() > kMaxParts) refuse(conj[i].path, "too many allOf/$ref parts");
    element e = conj[i].e;
    if (e.is_bool()) {
      if (!bool(e)) return false;
      continue;
    }
    if (!e.is_object()) refuse(conj[i].path, "a schema must be an object or a boolean");
    check_keywords(conj[i]);
    auto add = [&](element v, std::string path) {
      for (const Part& p : conj)
        if (p.path == path) return;  // already applies: a cycle or a repeat
      conj.push_back(Part{v, std::move(path)});
    };
    if (!(conj[i].skip & kSkipRef)) {
      conj[i].skip |= kSkipRef;
      if (auto ref = get(conj[i], "$ref")) {
        std::optional<std::string_view> r = str(*ref);
        if (!r || r->empty() || (*r)[0] != '#')
          refuse(conj[i].path + "/$ref",
                 "only local references (\"#\" or \"#/...\") are supported");
        element target;
        std::string pointer(r->substr(1));
        if (root_.at_pointer(pointer).get(target) != simdjson::SUCCESS)
          refuse(conj[i].path + "/$ref", fmt::format("\"{}\" does not resolve", *r));
        add(target, pointer);
      }
    }
    if (!(conj[i].skip & kSkipAllOf)) {
      conj[i].skip |= kSkipAllOf;
      if (auto all = get(conj[i], "allOf")) {
        if (!all->is_array() || array(*all).size() == 0)
          refuse(conj[i].path + "/allOf", "must be a non-empty array");
        size_t k = 0;
        for (element v : array(*all)) add(v, conj[i].path + "/allOf/" + std::to_string(k++));
      }
    }
  }
  return true;
}

std::string memo_key(const Conj& conj, uint8_t types, bool raw) {
  std::vector<std::string> parts;
  for (const Part& p : conj) parts.push_back(p.path + "\x01" + std::to_string(p.skip));
  std::sort(parts.begin(), parts.end());
  std::string key = std::to_string(types) + (raw ? "r" : "j");
  for (const auto& p : parts) key += "\x02" + p;
  return key;
}

int Compiler::compile(Conj conj, uint8_t types, bool raw, int depth) {
  if (depth > kMaxDepth) refuse(conj.front().path, "schema nests too deeply");
  std::string key = memo_key(conj, types, raw);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  // A slot filled at the end, so that recursive references can point at it meanwhile.
  GrammarNode slot;
  slot.kind = Kind::kUnion;
  int id = make(std::move(slot));
  memo_[key] = id;
  int node = -1;
  if (expand(conj)) node = combinator(conj, types, raw, depth);
  if (node < 0) {
    memo_[key] = -1;
    return -1;
  }
  g_.nodes[id].children = {node};
  return id;
}

// anyOf / oneOf: a union over the alternatives, each joined with the rest of the conjunction.
int Compiler::combinator(Conj& conj, uint8_t types, bool raw, int depth) {
  for (size_t i = 0; i < conj.size(); ++i) {
    if (conj[i].e.is_bool()) continue;
    for (auto [word, bit] : {std::pair{"anyOf", kSkipAnyOf}, std::pair{"oneOf", kSkipOneOf}}) {
      if (conj[i].skip & bit) continue;
      auto alts = get(conj[i], word);
      if (!alts) continue;
      std::string path = conj[i].path + "/" + word;
      if (!alts->is_array() || array(*alts).size() == 0) refuse(path, "must be a non-empty array");
      check_discriminator(conj[i]);
      if (bit == kSkipOneOf) check_one_of(conj, i, array(*alts));
      GrammarNode u;
      u.kind = Kind::kUnion;
      size_t k = 0;
      for (element alt : array(*alts)) {
        Conj c = conj;
        c[i].skip |= bit;
        c.push_back(Part{alt, path + "/" + std::to_string(k++)});
        int n = compile(c, types, raw, depth + 1);
        if (n >= 0) u.children.push_back(n);
      }
      if (u.children.empty()) return -1;
      return make(std::move(u));
    }
  }
  return typed(conj, types, raw, depth);
}

// The types the parts state, or those their keywords imply when none states any.
uint8_t Compiler::declared_types(const Conj& conj) {
  uint8_t stated = kAllTypes, implied = 0;
  bool any_stated = false;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto t = get(p, "type")) {
      any_stated = true;
      uint8_t bits = 0;
      if (std::optional<std::string_view> name = str(*t)) {
        bits = type_bit(*name, p.path);
      } else if (t->is_array()) {
        for (element x : array(*t)) {
          std::optional<std::string_view> each = str(x);
          if (!each) refuse(p.path + "/type", "must name types");
          bits |= type_bit(*each, p.path);
        }
      } else {
        refuse(p.path + "/type", "must be a string or an array of strings");
      }
      stated &= bits;
    }
    for (auto k : {"properties", "required", "additionalProperties", "propertyNames",
                   "minProperties", "maxProperties"})
      if (get(p, k)) implied |= kObj;
    for (auto k : {"items", "prefixItems", "minItems", "maxItems", "additionalItems"})
      if (get(p, k)) implied |= kArr;
    for (auto k : {"minLength", "maxLength", "pattern", "format"})
      if (get(p, k)) implied |= kStr;
    for (auto k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
      if (get(p, k)) implied |= kNum | kInt;
  }
  if (any_stated) return stated;
  return implied ? implied : kAllTypes;
}

// The properties an alternative requires and pins to const or enum values (following $ref and
// allOf, in the alternative and in each property's schema): property -> the values allowed.
std::map<std::string, std::set<std::string>> Compiler::pinned(Conj alt) {
  std::map<std::string, std::set<std::string>> out;
  if (!expand(alt)) return out;
  std::set<std::string> required;
  for (const Part& p : alt)
    if (auto req = get(p, "required"); req && req->is_array())
      for (element r : array(*req))
        if (std::optional<std::string_view> name = str(r)) required.insert(std::string(*name));
  for (const Part& p : alt) {
    auto props = get(p, "properties");
    if (!props || !props->is_object()) continue;
    for (auto [key, sub] : object(*props)) {
      std::string name(key);
      if (!required.count(name) || out.count(name)) continue;
      Conj c{Part{sub, p.path + "/properties/" + escape_pointer(name)}};
      if (!expand(c)) continue;
      for (const Part& q : c) {
        std::set<std::string> values;
        if (auto v = get(q, "const")) {
          values.insert(minify(*v));
        } else if (auto e = get(q, "enum"); e && e->is_array()) {
          for (element x : array(*e)) values.insert(minify(x));
        } else {
          continue;
        }
        out[name] = values;  // one part's values already bound what the property may hold
        break;
      }
    }
  }
  return out;
}

void Compiler::check_one_of(const Conj& conj, size_t i, array alts) {
  // Disjoint when the alternatives' types are, or when each pins a required property to
  // const/enum values no other alternative allows.
  std::vector<uint8_t> types;
  std::vector<std::map<std::string, std::set<std::string>>> pins;
  size_t k = 0;
  for (element alt : alts) {
    Conj c{Part{alt, conj[i].path + "/oneOf/" + std::to_string(k++)}};
    pins.push_back(pinned(c));
    if (!expand(c)) continue;
    uint8_t t = declared_types(c);
    if (t & kNum) t |= kInt;
    types.push_back(t);
  }
  bool disjoint = true;
  for (size_t a = 0; a < types.size(); ++a)
    for (size_t b = a + 1; b < types.size(); ++b) disjoint = disjoint && !(types[a] & types[b]);
  if (disjoint) return;
  for (const auto& [key, unused] : pins.front()) {
    std::set<std::string> seen;
    bool ok = true;
    for (const auto& alt : pins) {
      auto it = alt.find(key);
      ok = ok && it != alt.end();
      if (!ok) break;
      for (const auto& v : it->second) ok = ok && seen.insert(v).second;
    }
    if (ok) return;
  }
  refuse(conj[i].path + "/oneOf",
         "the alternatives may overlap, so exactly one cannot be guaranteed (use anyOf, or give "
         "each alternative a distinct type or a required property with distinct const values)");
}

// OpenAPI's discriminator (pydantic writes it beside a tagged union) narrows nothing the
// alternatives' own const values do not, so it is only checked to agree with them.
void Compiler::check_discriminator(const Part& p) {
  auto d = get(p, "discriminator");
  if (!d) return;
  const std::string path = p.path + "/discriminator";
  element name;
  std::optional<std::string_view> name_text;
  if (d->is_object() && object(*d).at_key("propertyName").get(name) == simdjson::SUCCESS)
    name_text = str(name);
  if (!name_text) refuse(path, "must be an object with a string \"propertyName\"");
  const std::string property{*name_text};
  std::optional<element> alts = get(p, "oneOf");
  if (!alts) alts = get(p, "anyOf");
  if (!alts || !alts->is_array()) refuse(path, "needs a oneOf or anyOf beside it");
  std::map<std::string, std::set<std::string>> by_ref;  // $ref -> the values it pins
  size_t k = 0;
  for (element alt : array(*alts)) {
    auto pins = pinned({Part{alt, p.path + "/oneOf/" + std::to_string(k++)}});
    auto it = pins.find(property);
    if (it == pins.end())
      refuse(path, fmt::format("alternative {} does not require \"{}\" with a const value", k - 1,
                               property));
    element ref;
    if (alt.is_object() && object(alt).at_key("$ref").get(ref) == simdjson::SUCCESS)
      if (std::optional<std::string_view> r = str(ref)) by_ref[std::string(*r)] = it->second;
  }
  element mapping;
  if (object(*d).at_key("mapping").get(mapping) != simdjson::SUCCESS) return;
  if (!mapping.is_object()) refuse(path + "/mapping", "must be an object");
  for (auto [value, ref] : object(mapping)) {
    std::string quoted;
    append_json_string(&quoted, std::string(value));
    std::optional<std::string_view> r = str(ref);
    auto it = r ? by_ref.find(std::string(*r)) : by_ref.end();
    if (it == by_ref.end() || !it->second.count(quoted))
      refuse(path + "/mapping",
             fmt::format("\"{}\" maps to a schema whose \"{}\" does not allow it",
                         std::string(value), property));
  }
}

int Compiler::typed(const Conj& conj, uint8_t types, bool raw, int depth) {
  types &= declared_types(conj);
  if (types & kNum) types |= kInt;  // integers are numbers; handled by the number node
  for (const Part& p : conj)
    if (!p.e.is_bool() && (get(p, "enum") || get(p, "const")))
      return enum_literal(conj, types, raw);
  GrammarNode u;
  u.kind = Kind::kUnion;
  auto add = [&](int n) {
    if (n >= 0) u.children.push_back(n);
  };
  if (types & kObj) add(object_node(conj, depth));
  if (types & kArr) add(array_node(conj, depth));
  if (types & kStr) add(string_node(conj, raw));
  if (types & kNum)
    add(number_node(conj, false));
  else if (types & kInt)
    add(number_node(conj, true));
  if (types & (kBool | kNull)) {
    SymbolTrie t;
    int k = 0;
    if (types & kBool) t.insert(byte_symbols("true"), k++), t.insert(byte_symbols("false"), k++);
    if (types & kNull) t.insert(byte_symbols("null"), k++);
    g_.tries.push_back(std::move(t));
    GrammarNode lit;
    lit.trie = (int)g_.tries.size() - 1;
    add(make(std::move(lit)));
  }
  if (u.children.empty()) return -1;
  if (u.children.size() == 1) return u.children[0];
  return make(std::move(u));
}

// enum and const: the values every part allows, of the wanted types and within the string and
// number bounds; written as their compact JSON (or, for raw strings, their text).
int Compiler::enum_literal(const Conj& conj, uint8_t types, bool raw) {
  std::optional<std::vector<element>> values;
  std::string path;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    std::vector<element> mine;
    if (auto c = get(p, "const")) mine.push_back(*c);
    if (auto e = get(p, "enum")) {
      if (!e->is_array()) refuse(p.path + "/enum", "must be an array");
      std::vector<element> listed(array(*e).begin(), array(*e).end());
      if (!mine.empty()) {
        std::string c = minify(mine[0]);
        bool found = false;
        for (element x : listed) found = found || minify(x) == c;
        if (!found) mine.clear();
      } else {
        mine = listed;
      }
    } else if (!get(p, "const")) {
      continue;
    }
    path = p.path;
    if (!values) {
      values = mine;
      continue;
    }
    std::vector<element> kept;
    for (element a : *values)
      for (element b : mine)
        if (minify(a) == minify(b)) {
          kept.push_back(a);
          break;
        }
    values = kept;
  }
  // Bounds from the other keywords, so a listed value that breaks them is never written.
  uint64_t min_len = 0, max_len = UINT64_MAX;
  std::optional<double> lo, hi;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto v = count(p, "minLength")) min_len = std::max<uint64_t>(min_len, *v);
    if (auto v = count(p, "maxLength")) max_len = std::min<uint64_t>(max_len, *v);
    auto bound = [&](const char* word) {
      std::optional<element> v = get(p, word);
      return v ? num(*v) : std::nullopt;
    };
    if (auto v = bound("minimum")) lo = std::max(lo.value_or(-INFINITY), *v);
    if (auto v = bound("maximum")) hi = std::min(hi.value_or(INFINITY), *v);
  }
  SymbolTrie t;
  int k = 0;
  std::set<std::string> seen;
  for (element v : *values) {
    if (!(value_types(v) & types)) continue;
    std::string text;
    if (std::optional<std::string_view> s = str(v)) {
      size_t n = code_points(*s), units = utf16_units(*s);
      if (n < min_len || units > max_len) continue;
      text = raw ? std::string(*s) : minify(v);
    } else {
      std::optional<double> d = num(v);
      if (d && ((lo && *d < *lo) || (hi && *d > *hi))) continue;
      text = minify(v);  // a number simdjson cannot hold is written exactly as given
    }
    if (text.empty() || !seen.insert(text).second) continue;
    t.insert(byte_symbols(text), k++);
  }
  if (k == 0) return -1;
  g_.tries.push_back(std::move(t));
  GrammarNode lit;
  lit.trie = (int)g_.tries.size() - 1;
  return make(std::move(lit));
}

Compiler::Props Compiler::collect_props(const Conj& conj) {
  Props out;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto props = get(p, "properties")) {
      if (!props->is_object()) refuse(p.path + "/properties", "must be an object");
      for (auto [key, sub] : object(*props)) {
        std::string name(key);
        auto it = std::find_if(out.list.begin(), out.list.end(),
                               [&](const auto& e) { return e.first == name; });
        if (it == out.list.end()) it = out.list.insert(out.list.end(), {name, {}});
        it->second.push_back(Part{sub, p.path + "/properties/" + escape_pointer(name)});
      }
    }
    if (auto req = get(p, "required")) {
      if (!req->is_array()) refuse(p.path + "/required", "must be an array of strings");
      for (element r : array(*req)) {
        std::optional<std::string_view> name = str(r);
        if (!name) refuse(p.path + "/required", "must be an array of strings");
        out.required.insert(std::string(*name));
      }
    }
    if (auto add = get(p, "additionalProperties")) {
      AdditionalRule rule;
      if (auto props = get(p, "properties"); props && props->is_object())
        for (auto [key, sub] : object(*props)) rule.own.insert(std::string(key));
      rule.forbid = add->is_bool() && !bool(*add);
      if (!rule.forbid) rule.schema = Part{*add, p.path + "/additionalProperties"};
      out.rules.push_back(std::move(rule));
    }
  }
  // A property one part declares is an additional one for every other part with a rule.
  for (auto it = out.list.begin(); it != out.list.end();) {
    bool forbidden = false;
    for (const AdditionalRule& r : out.rules) {
      if (r.own.count(it->first)) continue;
      if (r.forbid)
        forbidden = true;
      else
        it->second.push_back(*r.schema);
    }
    if (forbidden && out.required.count(it->first))
      refuse(conj.front().path, fmt::format("required property \"{}\" is not allowed by "
                                            "additionalProperties: false",
                                            it->first));
    it = forbidden ? out.list.erase(it) : it + 1;
  }
  for (const AdditionalRule& r : out.rules) {
    if (r.forbid)
      out.additional_allowed = false;
    else
      out.additional.push_back(*r.schema);
  }
  return out;
}

int Compiler::object_node(const Conj& conj, int depth) {
  Props props = collect_props(conj);
  for (const std::string& name : props.required) {
    auto it = std::find_if(props.list.begin(), props.list.end(),
                           [&](const auto& e) { return e.first == name; });
    if (it != props.list.end()) continue;
    if (!props.additional_allowed)
      refuse(conj.front().path, fmt::format("required property \"{}\" is not allowed by "
                                            "additionalProperties: false",
                                            name));
    props.list.push_back({name, props.additional});
  }
  const int key_rule = property_names(conj, props);
  GrammarNode n;
  n.kind = Kind::kObject;
  SymbolTrie keys;
  for (auto& [name, parts] : props.list) {
    bool required = props.required.count(name) > 0;
    int value = parts.empty() ? any() : compile(parts, kAllTypes, false, depth + 1);
    if (value < 0) {
      if (required)
        refuse(conj.front().path, fmt::format("required property \"{}\" allows no value", name));
      continue;
    }
    std::string quoted;
    append_json_string(&quoted, name);
    keys.insert(byte_symbols(std::string_view(quoted).substr(1)), (int)n.props.size());
    n.props.push_back({name, value, required});
  }
  g_.tries.push_back(std::move(keys));
  n.trie = (int)g_.tries.size() - 1;
  if (props.additional_allowed) {
    n.additional =
        props.additional.empty() ? any() : compile(props.additional, kAllTypes, false, depth + 1);
    n.key_rule = key_rule;
  }
  property_counts(conj, n);
  index_required(n);
  return make(std::move(n));
}

// propertyNames: a closed list of names (enum, const) becomes optional declared properties and
// closes the object; bounds, a pattern or a format become the rule other keys follow (the
// returned string node, or -1). Declared names that break it are left out, or refused when
// required.
int Compiler::property_names(const Conj& conj, Props& props) {
  static const std::set<std::string_view> kAllowed = {
      "type",  "enum",        "const",    "minLength", "maxLength", "pattern",    "format",
      "title", "description", "$comment", "$ref",      "$defs",     "definitions"};
  Conj names;
  for (const Part& p : conj)
    if (!p.e.is_bool())
      if (auto v = get(p, "propertyNames")) names.push_back(Part{*v, p.path + "/propertyNames"});
  if (names.empty()) return -1;
  const std::string path = names.front().path;
  bool none = !expand(names);
  std::optional<std::set<std::string>> listed;
  if (!none) {
    for (const Part& p : names) {
      if (p.e.is_bool()) continue;
      for (auto [key, value] : object(p.e))
        if (!kAllowed.count(key))
          refuse(p.path, fmt::format("keyword \"{}\" is not supported inside propertyNames "
                                     "(supported: type, enum, const, minLength, maxLength, "
                                     "pattern, format)",
                                     std::string(key)));
      std::set<std::string> mine;
      bool lists = false;
      for (const char* word : {"const", "enum"}) {
        auto v = get(p, word);
        if (!v) continue;
        lists = true;
        std::vector<element> values;
        if (word[0] == 'c')
          values.push_back(*v);
        else if (v->is_array())
          values.assign(array(*v).begin(), array(*v).end());
        else
          refuse(p.path + "/enum", "must be an array");
        std::set<std::string> here;
        for (element x : values)
          if (std::optional<std::string_view> s = str(x)) here.insert(std::string(*s));
        if (word[0] == 'e' && !mine.empty()) {
          std::set<std::string> both;
          for (const auto& m : mine)
            if (here.count(m)) both.insert(m);
          here = both;
        }
        mine = here;
      }
      if (!lists) continue;
      if (listed) {
        std::set<std::string> both;
        for (const auto& m : mine)
          if (listed->count(m)) both.insert(m);
        mine = both;
      }
      listed = mine;
    }
    none = !(declared_types(names) & kStr);
  }
  const int rule = none ? -1 : string_node(names, false);
  auto fits = [&](const std::string& name) {
    if (rule < 0 || (listed && !listed->count(name))) return false;
    const GrammarNode& r = g_.nodes[rule];
    if (code_points(name) < r.min_len || utf16_units(name) > r.max_len) return false;
    return r.dfa < 0 || dfa_matches(g_.dfas[r.dfa], name);
  };
  for (auto it = props.list.begin(); it != props.list.end();) {
    if (fits(it->first)) {
      ++it;
      continue;
    }
    if (props.required.count(it->first))
      refuse(path,
             fmt::format("required property \"{}\" does not satisfy propertyNames", it->first));
    it = props.list.erase(it);
  }
  if (rule < 0 || listed) {
    if (listed && props.additional_allowed)
      for (const std::string& name : *listed)
        if (fits(name) && std::none_of(props.list.begin(), props.list.end(),
                                       [&](const auto& e) { return e.first == name; }))
          props.list.push_back({name, props.additional});
    props.additional_allowed = false;
    return -1;
  }
  const GrammarNode& r = g_.nodes[rule];
  return r.dfa >= 0 || r.min_len > 0 || r.max_len != UINT32_MAX ? rule : -1;
}

// minProperties and maxProperties, checked against what the object can hold.
void Compiler::property_counts(const Conj& conj, GrammarNode& n) {
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto v = count(p, "minProperties")) n.min_props = std::max(n.min_props, *v);
    if (auto v = count(p, "maxProperties")) n.max_props = std::min(n.max_props, *v);
  }
  size_t required = 0;
  for (const auto& prop : n.props) required += prop.required;
  const std::string& path = conj.front().path;
  if (required > n.max_props)
    refuse(path, fmt::format("maxProperties {} is less than the {} required properties",
                             n.max_props, required));
  if (n.min_props > n.max_props)
    refuse(path,
           fmt::format("minProperties {} is more than maxProperties {}", n.min_props, n.max_props));
  if (n.additional < 0 && n.min_props > n.props.size())
    refuse(path, fmt::format("minProperties {} is more than the {} properties allowed", n.min_props,
                             n.props.size()));
}

int Compiler::array_node(const Conj& conj, int depth) {
  GrammarNode n;
  n.kind = Kind::kArray;
  Conj items;
  bool items_false = false, has_items = false;
  std::optional<array> prefix;
  std::string prefix_path;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    auto take_prefix = [&](element v, const std::string& path) {
      if (!v.is_array()) refuse(path, "must be an array of schemas");
      if (prefix) refuse(path, "tuple items given in two places");
      prefix = array(v);
      prefix_path = path;
    };
    if (auto v = get(p, "prefixItems")) take_prefix(*v, p.path + "/prefixItems");
    auto add_items = [&](element v, const std::string& path) {
      has_items = true;
      if (v.is_bool() && !bool(v))
        items_false = true;
      else
        items.push_back(Part{v, path});
    };
    if (auto v = get(p, "items")) {
      if (v->is_array())
        take_prefix(*v, p.path + "/items");
      else
        add_items(*v, p.path + "/items");
    }
    if (auto v = get(p, "additionalItems")) add_items(*v, p.path + "/additionalItems");
    if (auto v = count(p, "minItems")) n.min_items = std::max(n.min_items, *v);
    if (auto v = count(p, "maxItems")) n.max_items = std::min(n.max_items, *v);
  }
  if (prefix) {
    size_t k = 0;
    for (element v : *prefix) {
      int node =
          compile({Part{v, prefix_path + "/" + std::to_string(k)}}, kAllTypes, false, depth + 1);
      if (node < 0) {
        n.max_items = std::min<uint32_t>(n.max_items, (uint32_t)k);
        items_false = true;
        break;
      }
      n.prefix.push_back(node);
      ++k;
    }
  }
  if (!items_false) n.items = !has_items ? any() : compile(items, kAllTypes, false, depth + 1);
  if (n.items < 0) n.max_items = std::min<uint32_t>(n.max_items, (uint32_t)n.prefix.size());
  if (n.min_items > n.max_items) return -1;
  return make(std::move(n));
}

int Compiler::string_node(const Conj& conj, bool raw) {
  GrammarNode n;
  n.kind = Kind::kString;
  n.raw = raw;
  // Every pattern and format of the conjunction, as (regex, where it came from).
  std::vector<std::pair<std::string, std::string>> rules;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto v = count(p, "minLength")) n.min_len = std::max(n.min_len, *v);
    if (auto v = count(p, "maxLength")) n.max_len = std::min(n.max_len, *v);
    for (const char* word : {"pattern", "format"}) {
      auto v = get(p, word);
      if (!v) continue;
      std::string path = p.path + "/" + word;
      std::optional<std::string_view> given = str(*v);
      if (!given) refuse(path, "must be a string");
      std::string text{*given};
      if (word[0] == 'f') {
        text = format_pattern(text);
        if (text.empty())
          refuse(path, fmt::format("format \"{}\" is not supported (supported: date, time, "
                                   "date-time, email, uuid, uri)",
                                   *given));
      }
      rules.push_back({text, path});
    }
  }
  if (n.min_len > n.max_len) return -1;
  const bool bounded = n.min_len > 0 || n.max_len != UINT32_MAX;
  if (rules.empty()) return make(std::move(n));  // the matcher keeps bounded ones in the BMP
  const auto alphabet = raw ? StringAlphabet::kRaw : StringAlphabet::kJsonUnescaped;
  std::optional<ByteDfa> dfa;
  std::string path;
  for (const auto& [regex, from] : rules) {
    path = from;
    try {
      ByteDfa d = compile_pattern(regex, alphabet);
      dfa = dfa ? intersect_dfas(*dfa, d) : std::move(d);
      if (bounded) dfa = drop_supplementary(*dfa);
    } catch (const SchemaError&) {
      throw;
    } catch (const UsageError& e) {
      refuse(path, rules.size() > 1 ? fmt::format("{} (with the other patterns and formats "
                                                  "that apply here)",
                                                  e.what())
                                    : std::string(e.what()));
    }
  }
  g_.dfas.push_back(std::move(*dfa));
  n.dfa = (int)g_.dfas.size() - 1;
  add_finish_table(n, path);
  return make(std::move(n));
}

// With a pattern and a length bound, which (state, length) pairs can still finish: a pattern
// like ^a{10}$ with maxLength 5 must not let the writer start at all.
void Compiler::add_finish_table(GrammarNode& n, const std::string& path) {
  const bool bounded = n.max_len != UINT32_MAX;
  if (n.min_len == 0 && !bounded) return;
  const uint32_t cap = bounded ? n.max_len : n.min_len;
  if (cap > kMaxPatternLength)
    refuse(path, fmt::format("length bounds above {} together with a pattern are not supported",
                             kMaxPatternLength));
  const ByteDfa& d = g_.dfas[n.dfa];
  FinishTable t;
  t.cap = (int)cap;
  t.ok.assign((size_t)d.states() * (cap + 1), 0);
  auto at = [&](int s, uint32_t k) -> uint8_t& { return t.ok[(size_t)s * (cap + 1) + k]; };
  for (int64_t k = cap; k >= 0; --k) {
    if (!bounded && k == (int64_t)cap) {
      for (int s = 0; s < d.states(); ++s) at(s, (uint32_t)k) = 1;  // pruned: all can accept
      continue;
    }
    // Continuation bytes keep k and never loop, so a few passes settle this level.
    for (bool changed = true; changed;) {
      changed = false;
      for (int s = 0; s < d.states(); ++s) {
        if (at(s, (uint32_t)k)) continue;
        bool ok = d.accepting[s] && (uint32_t)k >= n.min_len;
        for (int b = 0; b < 256 && !ok; ++b) {
          int to = d.step(s, (uint8_t)b);
          if (to < 0) continue;
          uint32_t k2 = (uint32_t)k + ((b & 0xC0) != 0x80);
          if (!bounded) k2 = std::min(k2, cap);
          ok = k2 <= cap && at(to, k2);
        }
        if (ok) at(s, (uint32_t)k) = 1, changed = true;
      }
    }
  }
  if (!at(d.start, 0)) refuse(path, "no string matches both the pattern and the length bounds");
  g_.finish_tables.push_back(std::move(t));
  n.finish = (int)g_.finish_tables.size() - 1;
}

int Compiler::number_node(const Conj& conj, bool integer) {
  GrammarNode n;
  n.kind = Kind::kNumber;
  n.integer = integer;
  auto tighten_min = [&](double v, bool excl) {
    if (!n.has_min || v > n.min || (v == n.min && excl))
      n.has_min = true, n.min = v, n.min_exclusive = excl;
  };
  auto tighten_max = [&](double v, bool excl) {
    if (!n.has_max || v < n.max || (v == n.max && excl))
      n.has_max = true, n.max = v, n.max_exclusive = excl;
  };
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    auto bound = [&](const char* word) -> std::optional<double> {
      auto v = get(p, word);
      if (!v || v->is_bool()) return std::nullopt;
      std::optional<double> d = num(*v);
      if (!d) refuse(p.path + "/" + word, "must be a number");
      return d;
    };
    auto flag = [&](const char* word) {
      auto v = get(p, word);
      return v && v->is_bool() && bool(*v);
    };
    if (auto v = bound("minimum")) tighten_min(*v, flag("exclusiveMinimum"));
    if (auto v = bound("maximum")) tighten_max(*v, flag("exclusiveMaximum"));
    if (auto v = bound("exclusiveMinimum")) tighten_min(*v, true);
    if (auto v = bound("exclusiveMaximum")) tighten_max(*v, true);
    if (auto v = bound("multipleOf")) {
      const std::string path = p.path + "/multipleOf";
      if (!(*v > 0)) refuse(path, "must be greater than 0");
      if (std::floor(*v) != *v || *v >= kBoundLimit)
        refuse(path, "multipleOf is supported only as a whole number below 1e12");
      n.integer = true;  // the multiples of a whole number are whole
      uint64_t k = (uint64_t)*v;
      n.multiple = n.multiple ? std::lcm(n.multiple, k) : k;
      if (n.multiple >= (uint64_t)kBoundLimit)
        refuse(path, "the multipleOf values here combine to 1e12 or more");
    }
  }
  // Bounds past what the digit caps can write are either always met or never.
  if (n.has_min && n.min <= -kBoundLimit) n.has_min = false;
  if (n.has_max && n.max >= kBoundLimit) n.has_max = false;
  if ((n.has_min && n.min >= kBoundLimit) || (n.has_max && n.max <= -kBoundLimit))
    refuse(conj.front().path, "numeric bounds beyond 1e12 in magnitude are not supported");
  if (n.has_min && n.has_max) {
    double lo = n.min, hi = n.max;
    bool empty;
    if (n.integer) {
      double a = n.min_exclusive ? std::floor(lo) + 1 : std::ceil(lo);
      double b = n.max_exclusive ? std::ceil(hi) - 1 : std::floor(hi);
      if (n.multiple) a = std::ceil(a / (double)n.multiple) * (double)n.multiple;
      empty = a > b;
    } else {
      empty = lo > hi || (lo == hi && (n.min_exclusive || n.max_exclusive));
    }
    if (empty) return -1;
  }
  return make(std::move(n));
}

int Compiler::any() {
  if (any_ >= 0) return any_;
  GrammarNode slot;
  slot.kind = Kind::kUnion;
  any_ = make(std::move(slot));
  std::vector<int> kids;
  kids.push_back(any_object());
  GrammarNode arr;
  arr.kind = Kind::kArray;
  arr.items = any_;
  kids.push_back(make(std::move(arr)));
  GrammarNode str;
  str.kind = Kind::kString;
  kids.push_back(make(std::move(str)));
  GrammarNode num;
  num.kind = Kind::kNumber;
  kids.push_back(make(std::move(num)));
  SymbolTrie t;
  t.insert(byte_symbols("true"), 0), t.insert(byte_symbols("false"), 1),
      t.insert(byte_symbols("null"), 2);
  g_.tries.push_back(std::move(t));
  GrammarNode lit;
  lit.trie = (int)g_.tries.size() - 1;
  kids.push_back(make(std::move(lit)));
  g_.nodes[any_].children = kids;
  return any_;
}

int Compiler::any_object() {
  GrammarNode obj;
  obj.kind = Kind::kObject;
  g_.tries.emplace_back();
  obj.trie = (int)g_.tries.size() - 1;
  index_required(obj);
  int id = make(std::move(obj));
  g_.nodes[id].additional = any();
  return id;
}

int Compiler::typed_arguments(Conj conj, const TypedArgumentSpelling& spelling) {
  GrammarNode n;
  n.kind = Kind::kTypedArgs;
  SymbolTrie keys;
  if (!expand(conj)) refuse("", "parameters schema allows no arguments");
  if (!(declared_types(conj) & kObj)) refuse("", "parameters must describe an object");
  for (const Part& p : conj)
    for (const char* word : {"propertyNames", "minProperties", "maxProperties"})
      if (!p.e.is_bool() && get(p, word))
        refuse(p.path, fmt::format("keyword \"{}\" is not supported on a tool's parameters", word));
  Props props = collect_props(conj);
  for (const std::string& name : props.required)
    if (std::none_of(props.list.begin(), props.list.end(),
                     [&](const auto& e) { return e.first == name; }))
      refuse("", fmt::format("required argument \"{}\" has no schema in properties", name));
  struct Category {
    uint8_t types;
    const char* name;
  };
  const Category categories[] = {{kStr, "string"}, {kNum | kInt, "number"}, {kBool, "boolean"},
                                 {kNull, "null"},  {kObj, "object"},        {kArr, "array"}};
  for (auto& [name, parts] : props.list) {
    if (name.find_first_of(spelling.forbidden_in_names) != std::string::npos)
      refuse("/properties/" + escape_pointer(name),
             fmt::format("argument names must not contain any of {}", spelling.forbidden_in_names));
    GrammarNode alts;
    alts.kind = Kind::kUnion;
    for (const Category& c : categories) {
      int value = compile(parts, c.types, c.types == kStr, 1);
      if (value < 0) continue;
      alts.children.push_back(
          g_.seq({g_.literal(spelling.after_key(c.name)), value, g_.literal(spelling.close)}));
    }
    bool required = props.required.count(name) > 0;
    if (alts.children.empty()) {
      if (required) refuse("/properties/" + escape_pointer(name), "argument allows no value");
      continue;
    }
    keys.insert(g_.symbols(spelling.open_key(name)), (int)n.props.size());
    n.props.push_back({name, make(std::move(alts)), required});
  }
  g_.tries.push_back(std::move(keys));
  n.trie = (int)g_.tries.size() - 1;
  index_required(n);
  return make(std::move(n));
}

void parse_schema(json::Document& doc, std::string_view text) {
  if (text.size() > kMaxSchemaBytes)
    throw SchemaError(
        fmt::format("schema is {} bytes; the limit is {}", text.size(), kMaxSchemaBytes));
  if (doc.parse(text) != simdjson::SUCCESS) throw SchemaError("schema is not valid JSON");
}

}  // namespace

int compile_json_schema(Grammar& g, std::string_view schema_json) {
  json::Document doc;
  parse_schema(doc, schema_json);
  Compiler c(g, doc);
  int node = c.compile({Part{doc.root(), ""}}, kAllTypes, false, 0);
  if (node < 0) throw SchemaError("schema at #: no JSON value satisfies it");
  return node;
}

int any_json_object(Grammar& g) {
  json::Document doc;
  parse_schema(doc, "{}");
  return Compiler(g, doc).any_object();
}

int compile_typed_arguments(Grammar& g, std::string_view parameters_json,
                            const TypedArgumentSpelling& spelling) {
  json::Document doc;
  parse_schema(doc, parameters_json.empty() ? std::string_view("{}") : parameters_json);
  if (doc.root().is_null()) parse_schema(doc, "{\"type\":\"object\"}");
  Compiler c(g, doc);
  return c.typed_arguments({Part{doc.root(), ""}}, spelling);
}

}  // namespace waste
