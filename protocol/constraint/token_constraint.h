// Token masks from a grammar: at each step, which ids of the whole vocabulary keep the output
// inside the grammar, and then the step itself once the sampler has chosen.
//
// A mask walks a trie of every token's bytes once, advancing the grammar state along each path
// and dropping a subtree at the first byte the grammar refuses. Inside a string, the tokens made
// only of ordinary characters (most of the vocabulary) are taken in bulk from precomputed
// bitsets by length, so the walk visits only tokens with quotes, escapes, control characters,
// partial UTF-8 or characters past U+FFFF (which bounded strings refuse).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/constraint/grammar.h"
#include "protocol/constraint/grammar_matcher.h"

namespace waste {

// The tokenizer's vocabulary as the constraint sees it; built once per model and shared.
class TokenIndex {
 public:
  // `token_bytes[id]` is the id's text; `specials` names the ids that are special tokens
  // (their bytes are never matched as text).
  TokenIndex(const std::vector<std::string>& token_bytes,
             const std::vector<std::pair<std::string, int>>& specials);

  int vocab() const { return vocab_; }
  uint32_t longest_token() const { return longest_; }  // in bytes
  size_t mask_bytes() const { return ((size_t)vocab_ + 7) / 8; }
  std::optional<int> special_id(std::string_view name) const;
  bool is_special(int id) const { return special_of_[id] >= 0; }
  const std::string& bytes(int id) const { return bytes_[id]; }
  const std::string& special_name(int id) const { return special_names_[special_of_[id]]; }

  // Preorder trie of token byte strings; `skip` is the index just past a node's subtree.
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;  // 1 for a first byte
    std::vector<int32_t> token;   // -1: no token ends here
    std::vector<int32_t> skip;
  };
  enum Flavour { kJson = 0, kRaw = 1 };
  const Trie& all() const { return all_; }
  // Tokens that are not plain for this flavour (see token_constraint.h's top comment).
  const Trie& not_plain(Flavour f) const { return not_plain_[f]; }
  // Bitset (mask_bytes() bytes, as 64-bit words) of plain tokens of at most `n` code points.
  const uint64_t* plain_up_to(Flavour f, uint32_t n) const;

 private:
  static Trie build_trie(const std::vector<std::string>& bytes, const std::vector<int>& ids);

  int vocab_;
  uint32_t longest_ = 0;
  std::vector<std::string> bytes_;
  std::vector<int> special_of_;
  std::vector<std::string> special_names_;
  std::vector<int> special_token_;  // per special_names_ entry: its token id
  Trie all_, not_plain_[2];
  size_t words_;
  std::vector<std::vector<uint64_t>> plain_[2];  // [flavour][n]: plain tokens of <= n code points
};

class TokenConstraint {
 public:
  // Throws UsageError when the vocabulary lacks a special token the grammar names.
  TokenConstraint(std::shared_ptr<const Grammar> g, const TokenIndex& index);

  // Writes the allowed ids as bits (mask_bytes() bytes, least significant bit first). Never
  // empty while the grammar is unfinished.
  void mask(uint8_t* bits);
  // Advances by the chosen id; throws UsageError if it was not allowed.
  void accept(int id);
  // The grammar is complete (its final token was accepted).
  bool done() const { return m_.done(); }
  size_t mask_bytes() const { return index_.mask_bytes(); }

 private:
  void walk(GrammarMatcher::Top t, const TokenIndex::Trie& trie, uint64_t* words);
  void pattern_walk(const GrammarMatcher::PatternString& p, uint64_t* words);
  void specials(GrammarMatcher::Top t, uint64_t* words);

  std::shared_ptr<const Grammar> g_;
  const TokenIndex& index_;
  GrammarMatcher m_;
  std::vector<int> special_ids_;  // per grammar special symbol
  std::vector<int> dfa_state_;    // pattern_walk: DFA state per trie depth
  std::vector<uint32_t> dfa_count_;
  std::vector<std::vector<GrammarMatcher::Top>> levels_;
  std::vector<size_t> marks_;
  std::vector<uint64_t> words_;
  // Recent masks by state signature: most steps inside a string repeat the previous state.
  struct Cached {
    std::string key;
    std::vector<uint64_t> words;
  };
  std::vector<Cached> cache_;
  size_t next_slot_ = 0;
  std::string key_;
};

}  // namespace waste
