// The compiled form of a structured-output constraint: a graph of nodes over symbols, where a
// symbol is a byte (0-255) or one of the grammar's special tokens (256 + its index in
// `specials`). JSON Schema compiles to it (json_schema.h), and so do the model families' wrappers
// around a JSON value or a tool call (prompt_templates/). GrammarMatcher (grammar_matcher.h) runs
// it.
//
// JSON is written compactly: no whitespace, object properties in the schema's order.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "protocol/constraint/regex_dfa.h"

namespace waste {

using Symbol = int32_t;
constexpr Symbol kFirstSpecialSymbol = 256;

// A set of symbol strings as a trie. Node 0 is the root. `values` on a node lists, sorted, the
// indexes of the strings that pass through it (object keys use it to pick among candidates).
struct SymbolTrie {
  struct Node {
    std::vector<std::pair<Symbol, int>> edges;  // sorted by symbol
    int terminal = -1;                          // index of the string ending here
    std::vector<int> values;                    // strings in this subtree, sorted
  };
  std::vector<Node> nodes{1};

  void insert(const std::vector<Symbol>& s, int index);
  int child(int node, Symbol s) const;  // -1 when absent
};

struct GrammarNode {
  enum class Kind : uint8_t {
    kLiteral,    // one of a set of symbol strings (enum, const, true/false/null, markup)
    kString,     // a JSON string, or raw text ending where a special token follows
    kNumber,     // a JSON number or integer, with optional bounds
    kObject,     // a JSON object; properties in order, then additional ones
    kArray,      // a JSON array
    kUnion,      // any one of `children`
    kSeq,        // `children` one after the other
    kTypedArgs,  // tool-call arguments as elements: one per property, in order, each opened by
                 // its key string (a family's markup, e.g. K3's typed arguments)
  };
  Kind kind = Kind::kLiteral;

  int trie = -1;  // kLiteral: the strings; kObject/kTypedArgs: the keys as written (see below)

  // kString
  bool raw = false;  // raw text: no quotes or escapes, ends before a special token
  uint32_t min_len = 0, max_len = std::numeric_limits<uint32_t>::max();  // in code points
  int dfa = -1;     // index into Grammar::dfas: pattern or format (then no escapes)
  int finish = -1;  // with a dfa: index into Grammar::finish_tables

  // kNumber
  bool integer = false;
  bool has_min = false, has_max = false, min_exclusive = false, max_exclusive = false;
  double min = 0, max = 0;
  uint64_t multiple = 0;  // integers: a multiple of this (0: any)

  // kObject / kTypedArgs: property i is written with key trie string i and value props[i].
  // kObject keys are `"<json-escaped key>"`; kTypedArgs keys are what the family's spelling
  // opens an argument with (json_schema.h, TypedArgumentSpelling).
  struct Property {
    std::string name;
    int value = -1;
    bool required = false;
  };
  std::vector<Property> props;
  std::vector<int> first_required_from;  // per i in [0, n]: least required index >= i, else n
  std::vector<int> required_from;        // per i in [0, n]: required properties at >= i
  int additional = -1;                   // kObject: value node of other keys; -1 none allowed
  int key_rule = -1;  // kObject: a kString node other keys must also match (propertyNames)
  uint32_t min_props = 0, max_props = std::numeric_limits<uint32_t>::max();  // kObject

  // kArray
  std::vector<int> prefix;  // prefixItems
  int items = -1;           // -1: no items past the prefix
  uint32_t min_items = 0, max_items = std::numeric_limits<uint32_t>::max();

  // kUnion, kSeq
  std::vector<int> children;
};

// For a string with a pattern and a length bound: whether acceptance is still reachable from
// (dfa state, code points so far), with the count capped at `cap`.
struct FinishTable {
  int cap = 0;
  std::vector<uint8_t> ok;  // state * (cap + 1) + min(count, cap)
  bool at(int state, uint32_t count) const {
    return ok[(size_t)state * (cap + 1) + (count < (uint32_t)cap ? count : cap)];
  }
};

struct Grammar {
  std::vector<GrammarNode> nodes;
  std::vector<SymbolTrie> tries;
  std::vector<ByteDfa> dfas;
  std::vector<FinishTable> finish_tables;
  std::vector<std::string> specials;  // symbol 256 + i is the special token named specials[i]
  int root = -1;

  int add(GrammarNode n) {
    nodes.push_back(std::move(n));
    return (int)nodes.size() - 1;
  }
  // The symbol of a special token, adding it to `specials` the first time.
  Symbol special(const std::string& name);
  // Symbols of `text`, where every `<|...|>` names a special token and the rest is bytes.
  std::vector<Symbol> symbols(const std::string& text);
  // A literal node for one fixed string (see symbols()).
  int literal(const std::string& text);
  int seq(std::vector<int> children);
};

}  // namespace waste
