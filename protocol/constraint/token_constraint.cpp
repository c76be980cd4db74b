#include "protocol/constraint/token_constraint.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <numeric>

#include "engine/base/error.h"
#include "protocol/constraint/utf8.h"

namespace waste {
namespace {

// Code points of `s` if it is whole, well-formed UTF-8 within the BMP, free of `bad` bytes; -1
// otherwise.
template <class Bad>
int plain_code_points(const std::string& s, Bad bad) {
  int count = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char b = (unsigned char)s[i];
    if (bad(b)) return -1;
    int more, code;
    if (!utf8_lead(b, more, code)) return -1;
    if (more == 3) return -1;  // bounded strings refuse these (grammar_matcher.cpp), so no bulk
    const unsigned char lo = kUtf8ContLo[code], hi = kUtf8ContHi[code];
    if (more > 0 && i + (size_t)more >= s.size()) return -1;
    for (size_t k = 1; k <= (size_t)more; ++k) {
      unsigned char c = (unsigned char)s[i + k];
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -1;
    }
    i += (size_t)more + 1;
    ++count;
  }
  return s.empty() ? -1 : count;
}

void set_bit(uint64_t* words, int id) {
  words[id >> 6] |= uint64_t{1} << (id & 63);
}

}  // namespace

TokenIndex::TokenIndex(const std::vector<std::string>& token_bytes,
                       const std::vector<std::pair<std::string, int>>& specials)
    : vocab_((int)token_bytes.size()), bytes_(token_bytes), special_of_(token_bytes.size(), -1) {
  for (const auto& [name, id] : specials) {
    if (id < 0 || id >= vocab_)
      fail<UsageError>("special token {} has id {} outside the vocabulary", name, id);
    special_of_[id] = (int)special_names_.size();
    special_names_.push_back(name);
    special_token_.push_back(id);
  }
  words_ = ((size_t)vocab_ + 63) / 64;
  std::vector<int> ids, not_plain[2];
  std::vector<int> points[2];
  points[kJson].assign(vocab_, -1);
  points[kRaw].assign(vocab_, -1);
  int longest[2] = {0, 0};
  for (int id = 0; id < vocab_; ++id) {
    if (special_of_[id] >= 0 || bytes_[id].empty()) continue;
    ids.push_back(id);
    longest_ = std::max<uint32_t>(longest_, (uint32_t)bytes_[id].size());
    points[kJson][id] = plain_code_points(
        bytes_[id], [](unsigned char b) { return b < 0x20 || b == '"' || b == '\\'; });
    points[kRaw][id] = plain_code_points(bytes_[id], [](unsigned char b) { return b == 0; });
    for (int f : {kJson, kRaw}) {
      if (points[f][id] < 0) not_plain[f].push_back(id);
      longest[f] = std::max(longest[f], points[f][id]);
    }
  }
  all_ = build_trie(bytes_, ids);
  for (int f : {kJson, kRaw}) {
    not_plain_[f] = build_trie(bytes_, not_plain[f]);
    // plain_[f][n] holds the plain tokens of at most n code points.
    std::vector<std::vector<int>> by_len(longest[f] + 1);
    for (int id : ids)
      if (points[f][id] >= 0) by_len[points[f][id]].push_back(id);
    std::vector<uint64_t> acc(words_, 0);
    for (int n = 0; n <= longest[f]; ++n) {
      for (int id : by_len[n]) set_bit(acc.data(), id);
      plain_[f].push_back(acc);
    }
  }
}

std::optional<int> TokenIndex::special_id(std::string_view name) const {
  for (size_t k = 0; k < special_names_.size(); ++k)
    if (special_names_[k] == name) return special_token_[k];
  return std::nullopt;
}

const uint64_t* TokenIndex::plain_up_to(Flavour f, uint32_t n) const {
  const auto& v = plain_[f];
  return v[std::min<size_t>(n, v.size() - 1)].data();
}

TokenIndex::Trie TokenIndex::build_trie(const std::vector<std::string>& bytes,
                                        const std::vector<int>& ids) {
  std::vector<int> order(ids);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return bytes[a] < bytes[b]; });
  Trie t;
  const std::string* prev = nullptr;
  for (int id : order) {
    const std::string& s = bytes[id];
    if (s.size() > 0xFFFF) continue;
    size_t common = 0;
    if (prev)
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    if (prev && common == s.size() && common == prev->size()) continue;  // duplicate bytes
    for (size_t k = common; k < s.size(); ++k) {
      t.byte.push_back((uint8_t)s[k]);
      t.depth.push_back((uint16_t)(k + 1));
      t.token.push_back(-1);
    }
    t.token.back() = id;
    prev = &s;
  }
  // A node's subtree ends at the next node that is not deeper than it.
  size_t n = t.byte.size();
  t.skip.assign(n, (int32_t)n);
  std::vector<size_t> open;
  for (size_t i = 0; i < n; ++i) {
    while (!open.empty() && t.depth[open.back()] >= t.depth[i]) {
      t.skip[open.back()] = (int32_t)i;
      open.pop_back();
    }
    open.push_back(i);
  }
  return t;
}

TokenConstraint::TokenConstraint(std::shared_ptr<const Grammar> g, const TokenIndex& index)
    : g_(std::move(g)), index_(index), m_(*g_), words_(((size_t)index.vocab() + 63) / 64) {
  for (const std::string& name : g_->specials) {
    std::optional<int> id = index.special_id(name);
    if (!id) fail<UsageError>("the model's vocabulary has no special token {}", name);
    special_ids_.push_back(*id);
  }
  // The trie is as deep as the longest token; the index knows it, no need to scan per request.
  const size_t depth = std::max<size_t>(1, index.longest_token());
  levels_.resize(depth + 1);
  marks_.resize(depth + 1);
  dfa_state_.resize(depth + 1);
  dfa_count_.resize(depth + 1);
}

void TokenConstraint::walk(GrammarMatcher::Top t, const TokenIndex::Trie& trie, uint64_t* words) {
  const size_t base = m_.mark();
  levels_[0].assign(1, t);
  marks_[0] = base;
  const size_t n = trie.byte.size();
  for (size_t i = 0; i < n;) {
    const int d = trie.depth[i];
    m_.rollback(marks_[d - 1]);
    auto& here = levels_[d];
    here.clear();
    for (GrammarMatcher::Top p : levels_[d - 1]) m_.feed(p, trie.byte[i], here);
    if (here.empty()) {
      i = (size_t)trie.skip[i];
      continue;
    }
    marks_[d] = m_.mark();
    if (trie.token[i] >= 0) set_bit(words, trie.token[i]);
    ++i;
  }
  m_.rollback(base);
}

// Inside a string with a pattern, the tokens that stay inside it are those the DFA (and the
// length bounds) can take whole: a walk of plain integer transitions, with no grammar frames.
// Tokens that leave the string (a quote, an escape) are walked in full by the caller.
void TokenConstraint::pattern_walk(const GrammarMatcher::PatternString& p, uint64_t* words) {
  const GrammarNode& n = g_->nodes[p.node];
  const ByteDfa& d = g_->dfas[p.dfa];
  const FinishTable* finish = n.finish >= 0 ? &g_->finish_tables[n.finish] : nullptr;
  const TokenIndex::Trie& trie = index_.all();
  dfa_state_[0] = p.state;
  dfa_count_[0] = p.count;
  const size_t total = trie.byte.size();
  for (size_t i = 0; i < total;) {
    const int depth = trie.depth[i];
    const uint8_t b = trie.byte[i];
    int s = d.step(dfa_state_[depth - 1], b);
    uint32_t count = dfa_count_[depth - 1] + ((b & 0xC0) != 0x80);
    if (s < 0 || count > n.max_len || (finish && !finish->at(s, count))) {
      i = (size_t)trie.skip[i];
      continue;
    }
    dfa_state_[depth] = s;
    dfa_count_[depth] = count;
    if (trie.token[i] >= 0) set_bit(words, trie.token[i]);
    ++i;
  }
}

void TokenConstraint::specials(GrammarMatcher::Top t, uint64_t* words) {
  std::vector<GrammarMatcher::Top> out;
  const size_t base = m_.mark();
  for (size_t k = 0; k < special_ids_.size(); ++k) {
    out.clear();
    m_.feed(t, kFirstSpecialSymbol + (Symbol)k, out);
    if (!out.empty()) set_bit(words, special_ids_[k]);
    m_.rollback(base);
  }
}

void TokenConstraint::mask(uint8_t* bits) {
  constexpr size_t kCacheSlots = 8;
  key_.clear();
  for (GrammarMatcher::Top t : m_.threads()) m_.signature(t, index_.longest_token(), key_);
  const Cached* hit = nullptr;
  for (const Cached& c : cache_)
    if (c.key == key_) hit = &c;
  if (hit) {
    std::memcpy(bits, hit->words.data(), index_.mask_bytes());
    return;
  }
  std::fill(words_.begin(), words_.end(), 0);
  for (GrammarMatcher::Top t : m_.threads()) {
    bool raw;
    uint32_t room;
    GrammarMatcher::PatternString pattern;
    if (m_.pattern_string(t, pattern)) {
      pattern_walk(pattern, words_.data());
      walk(t, index_.not_plain(g_->nodes[pattern.node].raw ? TokenIndex::kRaw : TokenIndex::kJson),
           words_.data());
    } else if (m_.plain_string(t, raw, room)) {
      auto f = raw ? TokenIndex::kRaw : TokenIndex::kJson;
      const uint64_t* plain = index_.plain_up_to(f, room);
      for (size_t w = 0; w < words_.size(); ++w) words_[w] |= plain[w];
      walk(t, index_.not_plain(f), words_.data());
    } else {
      walk(t, index_.all(), words_.data());
    }
    specials(t, words_.data());
  }
  static_assert(std::endian::native == std::endian::little, "masks are stored as bytes");
  std::memcpy(bits, words_.data(), index_.mask_bytes());
  if (cache_.size() < kCacheSlots)
    cache_.push_back({key_, words_});
  else
    cache_[next_slot_++ % kCacheSlots] = {key_, words_};
}

void TokenConstraint::accept(int id) {
  if (id < 0 || id >= index_.vocab()) fail<UsageError>("token {} is outside the vocabulary", id);
  std::vector<GrammarMatcher::Top> cur = m_.threads(), next;
  auto step = [&](Symbol s) {
    next.clear();
    for (GrammarMatcher::Top t : cur) m_.feed(t, s, next);
    cur.swap(next);
  };
  if (index_.is_special(id)) {
    auto it = std::find(special_ids_.begin(), special_ids_.end(), id);
    if (it != special_ids_.end())
      step(kFirstSpecialSymbol + (Symbol)(it - special_ids_.begin()));
    else
      cur.clear();
  } else {
    for (char c : index_.bytes(id)) {
      step((unsigned char)c);
      if (cur.empty()) break;
    }
  }
  if (cur.empty()) fail<UsageError>("token {} does not fit the required format here", id);
  m_.commit(cur);
}

}  // namespace waste
