#include "protocol/constraint/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <simdjson.h>

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

// Types a JSON value has (an integral number is both integer and number).
uint8_t value_types(element v) {
  switch (v.type()) {
    case simdjson::dom::element_type::NULL_VALUE:
      return kNull;
    case simdjson::dom::element_type::BOOL:
      return kBool;
    case simdjson::dom::element_type::OBJECT:
      return kObj;
    case simdjson::dom::element_type::ARRAY:
      return kArr;
    case simdjson::dom::element_type::STRING:
      return kStr;
    case simdjson::dom::element_type::INT64:
    case simdjson::dom::element_type::UINT64:
      return kNum | kInt;
    default: {
      double d = double(v);
      return std::floor(d) == d ? (kNum | kInt) : kNum;
    }
  }
}

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::vector<Symbol> byte_symbols(std::string_view s) {
  std::vector<Symbol> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

class Compiler {
 public:
  Compiler(Grammar& g, element root) : g_(g), root_(root) {}

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
  int combinator(Conj& conj, uint8_t types, bool raw, int depth);
  void check_one_of(const Conj& conj, size_t i, array alts);
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
  int array_node(const Conj& conj, int depth);
  int string_node(const Conj& conj, bool raw);
  void add_finish_table(GrammarNode& n, const std::string& path);
  int number_node(const Conj& conj, bool integer);
  int make(GrammarNode n) {
    if (g_.nodes.size() >= kMaxNodes) refuse("", "schema is too large to compile");
    return g_.add(std::move(n));
  }

  Grammar& g_;
  element root_;
  std::map<std::string, int> memo_;
  int any_ = -1;
};

std::optional<element> Compiler::get(const Part& p, std::string_view key) const {
  element v;
  if (p.e.is_object() && p.e.get_object().value().at_key(key).get(v) == simdjson::SUCCESS) return v;
  return std::nullopt;
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
        std::string_view r;
        if (ref->get_string().get(r) != simdjson::SUCCESS || r.empty() || r[0] != '#')
          refuse(conj[i].path + "/$ref",
                 "only local references (\"#\" or \"#/...\") are supported");
        element target;
        std::string pointer(r.substr(1));
        if (root_.at_pointer(pointer).get(target) != simdjson::SUCCESS)
          refuse(conj[i].path + "/$ref", fmt::format("\"{}\" does not resolve", std::string(r)));
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
      if (t->is_string()) {
        bits = type_bit(std::string_view(*t), p.path);
      } else if (t->is_array()) {
        for (element x : array(*t)) {
          if (!x.is_string()) refuse(p.path + "/type", "must name types");
          bits |= type_bit(std::string_view(x), p.path);
        }
      } else {
        refuse(p.path + "/type", "must be a string or an array of strings");
      }
      stated &= bits;
    }
    for (auto k : {"properties", "required", "additionalProperties"})
      if (get(p, k)) implied |= kObj;
    for (auto k : {"items", "prefixItems", "minItems", "maxItems", "additionalItems"})
      if (get(p, k)) implied |= kArr;
    for (auto k : {"minLength", "maxLength", "pattern", "format"})
      if (get(p, k)) implied |= kStr;
    for (auto k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (get(p, k)) implied |= kNum | kInt;
  }
  if (any_stated) return stated;
  return implied ? implied : kAllTypes;
}

void Compiler::check_one_of(const Conj& conj, size_t i, array alts) {
  // Disjoint when the alternatives' types are, or when each pins a required property to
  // const/enum values no other alternative allows.
  std::vector<uint8_t> types;
  for (element alt : alts) {
    Conj c{Part{alt, conj[i].path + "/oneOf"}};
    if (!expand(c)) continue;
    uint8_t t = declared_types(c);
    if (t & kNum) t |= kInt;
    types.push_back(t);
  }
  bool disjoint = true;
  for (size_t a = 0; a < types.size(); ++a)
    for (size_t b = a + 1; b < types.size(); ++b) disjoint = disjoint && !(types[a] & types[b]);
  if (disjoint) return;
  std::map<std::string, std::vector<std::set<std::string>>> pinned;  // property -> value sets
  size_t n = 0;
  for (element alt : alts) {
    ++n;
    object o;
    element props;
    if (alt.get(o) != simdjson::SUCCESS || o.at_key("properties").get(props) != simdjson::SUCCESS ||
        !props.is_object())
      continue;
    for (auto [key, sub] : object(props)) {
      std::set<std::string> values;
      element v;
      if (sub.is_object() && object(sub).at_key("const").get(v) == simdjson::SUCCESS) {
        values.insert(simdjson::minify(v));
      } else if (sub.is_object() && object(sub).at_key("enum").get(v) == simdjson::SUCCESS &&
                 v.is_array()) {
        for (element x : array(v)) values.insert(simdjson::minify(x));
      } else {
        continue;
      }
      bool required = false;
      element req;
      if (o.at_key("required").get(req) == simdjson::SUCCESS && req.is_array())
        for (element r : array(req))
          required = required || (r.is_string() && std::string_view(r) == key);
      if (required) pinned[std::string(key)].push_back(values);
    }
  }
  for (const auto& [key, sets] : pinned) {
    if (sets.size() != n) continue;
    std::set<std::string> seen;
    bool overlap = false;
    for (const auto& s : sets)
      for (const auto& v : s) overlap = overlap || !seen.insert(v).second;
    if (!overlap) return;
  }
  refuse(conj[i].path + "/oneOf",
         "the alternatives may overlap, so exactly one cannot be guaranteed (use anyOf, or give "
         "each alternative a distinct type or a required property with distinct const values)");
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
        std::string c = simdjson::minify(mine[0]);
        bool found = false;
        for (element x : listed) found = found || simdjson::minify(x) == c;
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
        if (simdjson::minify(a) == simdjson::minify(b)) {
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
    if (auto v = get(p, "minLength"); v && v->is_number())
      min_len = std::max(min_len, (uint64_t) double(*v));
    if (auto v = get(p, "maxLength"); v && v->is_number())
      max_len = std::min(max_len, (uint64_t) double(*v));
    if (auto v = get(p, "minimum"); v && v->is_number())
      lo = std::max(lo.value_or(-INFINITY), double(*v));
    if (auto v = get(p, "maximum"); v && v->is_number())
      hi = std::min(hi.value_or(INFINITY), double(*v));
  }
  SymbolTrie t;
  int k = 0;
  std::set<std::string> seen;
  for (element v : *values) {
    if (!(value_types(v) & types)) continue;
    std::string text;
    if (v.is_string()) {
      size_t n = code_points(std::string_view(v));
      if (n < min_len || n > max_len) continue;
      text = raw ? std::string(std::string_view(v)) : simdjson::minify(v);
    } else {
      if (v.is_number() && ((lo && double(v) < *lo) || (hi && double(v) > *hi))) continue;
      text = simdjson::minify(v);
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
        if (!r.is_string()) refuse(p.path + "/required", "must be an array of strings");
        out.required.insert(std::string(std::string_view(r)));
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
  }
  int np = (int)n.props.size();
  n.first_required_from.assign(np + 1, np);
  for (int i = np - 1; i >= 0; --i)
    n.first_required_from[i] = n.props[i].required ? i : n.first_required_from[i + 1];
  return make(std::move(n));
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
    if (auto v = get(p, "minItems"); v && v->is_number())
      n.min_items = std::max(n.min_items, (uint32_t)std::min(double(*v), 1e9));
    if (auto v = get(p, "maxItems"); v && v->is_number())
      n.max_items = std::min(n.max_items, (uint32_t)std::min(double(*v), 4e9));
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
  std::optional<std::string> pattern, format;
  std::string path;
  for (const Part& p : conj) {
    if (p.e.is_bool()) continue;
    if (auto v = get(p, "minLength"); v && v->is_number())
      n.min_len = std::max(n.min_len, (uint32_t)std::min(double(*v), 4e9));
    if (auto v = get(p, "maxLength"); v && v->is_number())
      n.max_len = std::min(n.max_len, (uint32_t)std::min(double(*v), 4e9));
    for (auto [word, slot] : {std::pair{"pattern", &pattern}, std::pair{"format", &format}}) {
      auto v = get(p, word);
      if (!v) continue;
      if (!v->is_string()) refuse(p.path + "/" + word, "must be a string");
      std::string s{std::string_view(*v)};
      if (*slot && **slot != s) refuse(p.path + "/" + word, fmt::format("two different {}s", word));
      *slot = s;
      path = p.path + "/" + word;
    }
  }
  if (n.min_len > n.max_len) return -1;
  if (pattern && format) refuse(path, "pattern together with format is not supported");
  std::string regex = pattern.value_or("");
  if (format) {
    regex = format_pattern(*format);
    if (regex.empty())
      refuse(path, fmt::format("format \"{}\" is not supported (supported: date, time, "
                               "date-time, email, uuid, uri)",
                               *format));
  }
  if (pattern || format) {
    try {
      g_.dfas.push_back(
          compile_pattern(regex, raw ? StringAlphabet::kRaw : StringAlphabet::kJsonUnescaped));
    } catch (const SchemaError&) {
      throw;
    } catch (const UsageError& e) {
      refuse(path, e.what());
    }
    n.dfa = (int)g_.dfas.size() - 1;
    add_finish_table(n, path);
  }
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
    auto num = [&](const char* word) -> std::optional<double> {
      auto v = get(p, word);
      if (!v || v->is_bool()) return std::nullopt;
      if (!v->is_number()) refuse(p.path + "/" + word, "must be a number");
      return double(*v);
    };
    auto flag = [&](const char* word) {
      auto v = get(p, word);
      return v && v->is_bool() && bool(*v);
    };
    if (auto v = num("minimum")) tighten_min(*v, flag("exclusiveMinimum"));
    if (auto v = num("maximum")) tighten_max(*v, flag("exclusiveMaximum"));
    if (auto v = num("exclusiveMinimum")) tighten_min(*v, true);
    if (auto v = num("exclusiveMaximum")) tighten_max(*v, true);
  }
  // Bounds past what the digit caps can write are either always met or never.
  if (n.has_min && n.min <= -kBoundLimit) n.has_min = false;
  if (n.has_max && n.max >= kBoundLimit) n.has_max = false;
  if ((n.has_min && n.min >= kBoundLimit) || (n.has_max && n.max <= -kBoundLimit))
    refuse(conj.front().path, "numeric bounds beyond 1e12 in magnitude are not supported");
  if (n.has_min && n.has_max) {
    double lo = n.min, hi = n.max;
    bool empty;
    if (integer) {
      double a = n.min_exclusive ? std::floor(lo) + 1 : std::ceil(lo);
      double b = n.max_exclusive ? std::ceil(hi) - 1 : std::floor(hi);
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
  obj.first_required_from = {0};
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
  int np = (int)n.props.size();
  n.first_required_from.assign(np + 1, np);
  for (int i = np - 1; i >= 0; --i)
    n.first_required_from[i] = n.props[i].required ? i : n.first_required_from[i + 1];
  return make(std::move(n));
}

element parse_schema(simdjson::dom::parser& parser, std::string_view text) {
  if (text.size() > kMaxSchemaBytes)
    throw SchemaError(
        fmt::format("schema is {} bytes; the limit is {}", text.size(), kMaxSchemaBytes));
  element root;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS)
    throw SchemaError("schema is not valid JSON");
  return root;
}

}  // namespace

int compile_json_schema(Grammar& g, std::string_view schema_json) {
  simdjson::dom::parser parser;
  element root = parse_schema(parser, schema_json);
  Compiler c(g, root);
  int node = c.compile({Part{root, ""}}, kAllTypes, false, 0);
  if (node < 0) throw SchemaError("schema at #: no JSON value satisfies it");
  return node;
}

int any_json_object(Grammar& g) {
  simdjson::dom::parser parser;
  element root = parse_schema(parser, "{}");
  return Compiler(g, root).any_object();
}

int compile_typed_arguments(Grammar& g, std::string_view parameters_json,
                            const TypedArgumentSpelling& spelling) {
  simdjson::dom::parser parser;
  std::string_view text = parameters_json.empty() ? std::string_view("{}") : parameters_json;
  element root = parse_schema(parser, text);
  if (root.is_null()) root = parse_schema(parser, "{\"type\":\"object\"}");
  Compiler c(g, root);
  return c.typed_arguments({Part{root, ""}}, spelling);
}

}  // namespace waste
