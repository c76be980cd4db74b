#include "protocol/constraint/grammar.h"

#include <algorithm>

namespace waste {

void SymbolTrie::insert(const std::vector<Symbol>& s, int index) {
  int n = 0;
  auto note = [&](int node) {
    auto& v = nodes[node].values;
    auto it = std::lower_bound(v.begin(), v.end(), index);
    if (it == v.end() || *it != index) v.insert(it, index);
  };
  note(0);
  for (Symbol sym : s) {
    int c = child(n, sym);
    if (c < 0) {
      c = (int)nodes.size();
      nodes.emplace_back();
      auto& e = nodes[n].edges;
      e.insert(std::lower_bound(e.begin(), e.end(), std::make_pair(sym, -1)), {sym, c});
    }
    n = c;
    note(n);
  }
  if (nodes[n].terminal < 0) nodes[n].terminal = index;
}

int SymbolTrie::child(int node, Symbol s) const {
  const auto& e = nodes[node].edges;
  auto it = std::lower_bound(e.begin(), e.end(), std::make_pair(s, -1));
  return it != e.end() && it->first == s ? it->second : -1;
}

Symbol Grammar::special(const std::string& name) {
  auto it = std::find(specials.begin(), specials.end(), name);
  if (it == specials.end()) it = specials.insert(specials.end(), name);
  return kFirstSpecialSymbol + (Symbol)(it - specials.begin());
}

std::vector<Symbol> Grammar::symbols(const std::string& text) {
  std::vector<Symbol> out;
  for (size_t i = 0; i < text.size();) {
    size_t end;
    if (text.compare(i, 2, "<|") == 0 && (end = text.find("|>", i + 2)) != std::string::npos) {
      out.push_back(special(text.substr(i, end + 2 - i)));
      i = end + 2;
    } else {
      out.push_back((unsigned char)text[i++]);
    }
  }
  return out;
}

int Grammar::literal(const std::string& text) {
  SymbolTrie t;
  t.insert(symbols(text), 0);
  tries.push_back(std::move(t));
  GrammarNode n;
  n.kind = GrammarNode::Kind::kLiteral;
  n.trie = (int)tries.size() - 1;
  return add(std::move(n));
}

int Grammar::seq(std::vector<int> children) {
  GrammarNode n;
  n.kind = GrammarNode::Kind::kSeq;
  n.children = std::move(children);
  return add(std::move(n));
}

}  // namespace waste
