#include "protocol/constraint/regex_dfa.h"

#include <algorithm>
#include <bitset>
#include <map>
#include <memory>
#include <unordered_map>

#include "engine/base/ascii.h"
#include "engine/base/error.h"

namespace waste {
namespace {

constexpr int kMaxNfaStates = 40000;
constexpr int kMaxDfaStates = 4000;
constexpr int kMaxRepeat = 1000;

using ByteSet = std::bitset<256>;

// The parsed expression. A character class is one byte set plus "any multi-byte character".
struct Ast {
  enum class Kind { kEmpty, kBytes, kSeq, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  ByteSet bytes;           // kBytes: ASCII members (or one byte of a literal's UTF-8)
  bool multibyte = false;  // kBytes: also any character of two or more bytes
  std::vector<std::unique_ptr<Ast>> kids;
  int min = 0, max = -1;  // kRepeat; max -1: unbounded
};
using AstPtr = std::unique_ptr<Ast>;

AstPtr make(Ast::Kind k) {
  auto a = std::make_unique<Ast>();
  a->kind = k;
  return a;
}

AstPtr byte_set(const ByteSet& s, bool multibyte) {
  AstPtr a = make(Ast::Kind::kBytes);
  a->bytes = s;
  a->multibyte = multibyte;
  return a;
}

AstPtr any_char(bool newlines) {
  ByteSet s;
  for (int b = 0; b < 128; ++b) s.set(b);
  if (!newlines) s.reset('\n'), s.reset('\r');
  return byte_set(s, true);
}

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  AstPtr parse() {
    AstPtr top = make(Ast::Kind::kAlt);
    for (;;) {
      top->kids.push_back(branch(true));
      if (at_end()) break;
      ++i_;  // '|'
    }
    return top;
  }

 private:
  [[noreturn]] void bad(std::string_view what) const {
    fail<UsageError>("pattern: {} at offset {}", what, i_);
  }
  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  // A sequence up to '|' or ')'. At the top level, ^ and $ anchor it; unanchored ends search.
  AstPtr branch(bool top) {
    AstPtr seq = make(Ast::Kind::kSeq);
    bool anchored_start = false, anchored_end = false;
    if (top && !at_end() && peek() == '^') anchored_start = true, ++i_;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++i_;
        if (!top || (!at_end() && peek() != '|')) bad("'$' other than at the end");
        anchored_end = true;
        break;
      }
      if (peek() == '^') bad("'^' other than at the start");
      seq->kids.push_back(quantified());
    }
    if (top && !at_end() && peek() == ')') bad("unbalanced ')'");
    if (!top) return seq;
    AstPtr out = make(Ast::Kind::kSeq);
    if (!anchored_start) out->kids.push_back(star(any_char(true)));
    out->kids.push_back(std::move(seq));
    if (!anchored_end) out->kids.push_back(star(any_char(true)));
    return out;
  }

  static AstPtr star(AstPtr a) {
    AstPtr r = make(Ast::Kind::kRepeat);
    r->kids.push_back(std::move(a));
    r->min = 0, r->max = -1;
    return r;
  }

  AstPtr quantified() {
    AstPtr a = atom();
    while (!at_end()) {
      int lo, hi;
      char c = peek();
      if (c == '*')
        lo = 0, hi = -1, ++i_;
      else if (c == '+')
        lo = 1, hi = -1, ++i_;
      else if (c == '?')
        lo = 0, hi = 1, ++i_;
      else if (c == '{' && braces(lo, hi)) {
      } else {
        break;
      }
      if (!at_end() && peek() == '?') ++i_;  // lazy: same language
      AstPtr r = make(Ast::Kind::kRepeat);
      r->kids.push_back(std::move(a));
      r->min = lo, r->max = hi;
      a = std::move(r);
    }
    return a;
  }

  // {n}, {n,}, {n,m}; anything else leaves '{' a literal, as ECMA-262's Annex B does.
  bool braces(int& lo, int& hi) {
    size_t j = i_ + 1;
    auto number = [&](int& out) {
      size_t s = j;
      long v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = v * 10 + (p_[j++] - '0');
        if (v > kMaxRepeat) bad(fmt::format("repeat count above {}", kMaxRepeat));
      }
      out = (int)v;
      return j > s;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      hi = -1;
      if (j < p_.size() && p_[j] != '}' && !number(hi)) return false;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    if (hi != -1 && hi < lo) bad("repeat {n,m} with m < n");
    i_ = j + 1;
    return true;
  }

  AstPtr atom() {
    char c = peek();
    if (c == '(') return group();
    if (c == '[') return char_class();
    if (c == '.') return ++i_, any_char(false);
    if (c == '\\') return escape();
    if (c == '*' || c == '+' || c == '?') bad("quantifier without anything to repeat");
    return literal_char();
  }

  AstPtr group() {
    ++i_;
    if (!at_end() && peek() == '?') {
      if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        i_ += 2;
      } else {
        bad("lookaround and named groups are not supported");
      }
    }
    AstPtr alt = make(Ast::Kind::kAlt);
    for (;;) {
      alt->kids.push_back(branch(false));
      if (at_end()) bad("unclosed '('");
      if (peek() == ')') break;
      ++i_;  // '|'
    }
    ++i_;
    return alt;
  }

  // One UTF-8 character of the pattern as a sequence of single-byte sets.
  AstPtr literal_char() {
    unsigned char lead = (unsigned char)p_[i_];
    size_t n = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (i_ + n > p_.size()) bad("truncated UTF-8 character");
    AstPtr seq = make(Ast::Kind::kSeq);
    for (size_t k = 0; k < n; ++k) {
      ByteSet s;
      s.set((unsigned char)p_[i_ + k]);
      seq->kids.push_back(byte_set(s, false));
    }
    i_ += n;
    return seq;
  }

  static ByteSet range(int lo, int hi) {
    ByteSet s;
    for (int b = lo; b <= hi; ++b) s.set(b);
    return s;
  }
  static ByteSet digits() { return range('0', '9'); }
  static ByteSet word() { return range('a', 'z') | range('A', 'Z') | digits() | range('_', '_'); }
  static ByteSet space() {
    ByteSet s;
    for (char c : std::string_view(" \t\n\r\f\v")) s.set((unsigned char)c);
    return s;
  }

  // A class escape (\d, \w, \s and their negations): its ASCII set, and whether it is negated.
  bool class_escape(char c, ByteSet& s, bool& negated) {
    negated = c >= 'A' && c <= 'Z';
    char lower = negated ? (char)(c - 'A' + 'a') : c;
    if (lower == 'd')
      s = digits();
    else if (lower == 'w')
      s = word();
    else if (lower == 's')
      s = space();
    else
      return false;
    return true;
  }

  // The code point of a single-character escape at i_ (just after the backslash).
  int escaped_code_point() {
    char c = p_[i_++];
    switch (c) {
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '0':
        return 0;
      case 'u': {
        if (i_ + 4 > p_.size()) bad("truncated \\u escape");
        int v = 0;
        for (int k = 0; k < 4; ++k) {
          const int d = hex_value(p_[i_++]);
          if (d < 0) bad("bad \\u escape");
          v = v * 16 + d;
        }
        return v;
      }
      case 'b':
        bad("word boundary \\b is not supported");
      case 'B':
        bad("\\B is not supported");
      default:
        if ((c >= '1' && c <= '9') || c == 'k') bad("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          bad(fmt::format("unknown escape \\{}", c));
        return (unsigned char)c;
    }
  }

  static AstPtr code_point(int cp) {
    std::string utf8;
    if (cp < 0x80) {
      utf8 += (char)cp;
    } else if (cp < 0x800) {
      utf8 += (char)(0xC0 | (cp >> 6)), utf8 += (char)(0x80 | (cp & 0x3F));
    } else {
      utf8 += (char)(0xE0 | (cp >> 12)), utf8 += (char)(0x80 | ((cp >> 6) & 0x3F));
      utf8 += (char)(0x80 | (cp & 0x3F));
    }
    AstPtr seq = make(Ast::Kind::kSeq);
    for (char b : utf8) {
      ByteSet s;
      s.set((unsigned char)b);
      seq->kids.push_back(byte_set(s, false));
    }
    return seq;
  }

  AstPtr escape() {
    ++i_;
    if (at_end()) bad("trailing backslash");
    ByteSet s;
    bool negated;
    if (class_escape(peek(), s, negated)) {
      ++i_;
      return negated ? byte_set(~s & range(0, 127), true) : byte_set(s, false);
    }
    int cp = escaped_code_point();
    if (cp >= 0xD800 && cp <= 0xDFFF) bad("surrogate code points are not supported");
    return code_point(cp);
  }

  // One member of a class: an ASCII code point (or -1 after a class escape merged into `s`).
  int class_member(ByteSet& s) {
    if (peek() == '\\') {
      ++i_;
      if (at_end()) bad("trailing backslash");
      bool negated;
      ByteSet esc;
      if (class_escape(peek(), esc, negated)) {
        ++i_;
        if (negated) bad("negated class escapes inside [...] are not supported");
        s |= esc;
        return -1;
      }
      if (peek() == 'b') return ++i_, '\b';
      int cp = escaped_code_point();
      if (cp >= 0x80) bad("non-ASCII characters in [...] are not supported");
      return cp;
    }
    unsigned char c = (unsigned char)p_[i_++];
    if (c >= 0x80) bad("non-ASCII characters in [...] are not supported");
    return c;
  }

  AstPtr char_class() {
    ++i_;
    bool negated = !at_end() && peek() == '^';
    if (negated) ++i_;
    ByteSet s;
    bool first = true;
    while (!at_end() && (peek() != ']' || first)) {
      first = false;
      int lo = class_member(s);
      if (lo >= 0 && i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        int hi = class_member(s);
        if (hi < 0 || hi < lo) bad("bad range in [...]");
        s |= range(lo, hi);
      } else if (lo >= 0) {
        s.set(lo);
      }
    }
    if (at_end()) bad("unclosed '['");
    ++i_;
    return negated ? byte_set(~s & range(0, 127), true) : byte_set(s, false);
  }

  std::string_view p_;
  size_t i_ = 0;
};

// Thompson NFA: each state has epsilon moves and at most one byte-set move.
struct Nfa {
  struct State {
    std::vector<int> eps;
    ByteSet on;
    int to = -1;
  };
  std::vector<State> states;

  int add() {
    if ((int)states.size() >= kMaxNfaStates) fail<UsageError>("pattern is too complex");
    states.emplace_back();
    return (int)states.size() - 1;
  }
  void move(int from, const ByteSet& on, int to) {
    states[from].on = on;
    states[from].to = to;
  }
  void eps(int from, int to) { states[from].eps.push_back(to); }
};

class NfaBuilder {
 public:
  explicit NfaBuilder(Nfa& n) : n_(n) {}

  // Emits `a` between fresh states; returns {start, end}.
  std::pair<int, int> emit(const Ast& a) {
    int s = n_.add(), e = n_.add();
    emit_between(a, s, e);
    return {s, e};
  }

 private:
  void emit_between(const Ast& a, int s, int e) {
    switch (a.kind) {
      case Ast::Kind::kEmpty:
        n_.eps(s, e);
        break;
      case Ast::Kind::kBytes:
        if (a.bytes.any()) {
          int m = n_.add();
          n_.eps(s, m);
          n_.move(m, a.bytes, e);
        }
        if (a.multibyte) multibyte_char(s, e);
        break;
      case Ast::Kind::kSeq: {
        int cur = s;
        for (const auto& k : a.kids) {
          int next = n_.add();
          emit_between(*k, cur, next);
          cur = next;
        }
        n_.eps(cur, e);
        break;
      }
      case Ast::Kind::kAlt:
        for (const auto& k : a.kids) emit_between(*k, s, e);
        break;
      case Ast::Kind::kRepeat:
        repeat(a, s, e);
        break;
    }
  }

  void repeat(const Ast& a, int s, int e) {
    int cur = s;
    for (int k = 0; k < a.min; ++k) {
      int next = n_.add();
      emit_between(*a.kids[0], cur, next);
      cur = next;
    }
    if (a.max < 0) {
      int loop = n_.add();
      n_.eps(cur, loop);
      int body_end = n_.add();
      emit_between(*a.kids[0], loop, body_end);
      n_.eps(body_end, loop);
      n_.eps(loop, e);
      return;
    }
    for (int k = a.min; k < a.max; ++k) {
      n_.eps(cur, e);
      int next = n_.add();
      emit_between(*a.kids[0], cur, next);
      cur = next;
    }
    n_.eps(cur, e);
  }

  // Any well-formed UTF-8 sequence of two to four bytes (no surrogates, nothing past U+10FFFF).
  void multibyte_char(int s, int e) {
    auto r = [](int lo, int hi) {
      ByteSet b;
      for (int x = lo; x <= hi; ++x) b.set(x);
      return b;
    };
    const ByteSet cont = r(0x80, 0xBF);
    const std::vector<std::vector<ByteSet>> forms = {
        {r(0xC2, 0xDF), cont},
        {r(0xE0, 0xE0), r(0xA0, 0xBF), cont},
        {r(0xE1, 0xEC) | r(0xEE, 0xEF), cont, cont},
        {r(0xED, 0xED), r(0x80, 0x9F), cont},
        {r(0xF0, 0xF0), r(0x90, 0xBF), cont, cont},
        {r(0xF1, 0xF3), cont, cont, cont},
        {r(0xF4, 0xF4), r(0x80, 0x8F), cont, cont},
    };
    for (const auto& form : forms) {
      int cur = n_.add();
      n_.eps(s, cur);
      for (size_t k = 0; k < form.size(); ++k) {
        int next = k + 1 == form.size() ? e : n_.add();
        n_.move(cur, form[k], next);
        cur = next;
      }
    }
  }

  Nfa& n_;
};

// Epsilon closures, sorted; the visited marks are reused across calls (a generation counter),
// so a closure costs what it visits, not the size of the NFA.
class Closure {
 public:
  explicit Closure(const Nfa& n) : n_(n), mark_(n.states.size(), 0) {}
  void operator()(std::vector<int>& set) {
    ++gen_;
    stack_.assign(set.begin(), set.end());
    set.clear();
    while (!stack_.empty()) {
      int s = stack_.back();
      stack_.pop_back();
      if (mark_[s] == gen_) continue;
      mark_[s] = gen_;
      set.push_back(s);
      for (int t : n_.states[s].eps) stack_.push_back(t);
    }
    std::sort(set.begin(), set.end());
  }

 private:
  const Nfa& n_;
  std::vector<uint32_t> mark_;
  std::vector<int> stack_;
  uint32_t gen_ = 0;
};

// Bytes that no NFA edge tells apart get one class (-1: outside the alphabet), so the subset
// construction computes one transition per class instead of one per byte.
std::vector<int> byte_classes(const Nfa& n, const ByteSet& alphabet, int* classes) {
  std::vector<int> cls(256);
  for (int b = 0; b < 256; ++b) cls[b] = alphabet.test(b) ? 0 : -1;
  *classes = 1;
  std::vector<ByteSet> seen;
  for (const Nfa::State& st : n.states) {
    if (st.to < 0 || std::find(seen.begin(), seen.end(), st.on) != seen.end()) continue;
    seen.push_back(st.on);
    std::map<std::pair<int, bool>, int> split;
    for (int b = 0; b < 256; ++b) {
      if (cls[b] < 0) continue;
      auto [it, fresh] = split.emplace(std::pair{cls[b], st.on.test(b)}, (int)split.size());
      cls[b] = it->second;
    }
    *classes = (int)split.size();
  }
  return cls;
}

ByteSet alphabet_bytes(StringAlphabet a) {
  ByteSet s;
  s.set();
  s.reset(0);
  if (a == StringAlphabet::kJsonUnescaped) {
    for (int b = 0; b < 0x20; ++b) s.reset(b);
    s.reset('"'), s.reset('\\');
  }
  return s;
}

// FNV-1a over a sorted NFA state set: the subset construction looks every new set up once.
struct StateSetHash {
  size_t operator()(const std::vector<int>& set) const {
    uint64_t h = 14695981039346656037ull;
    for (int s : set) h = (h ^ (uint32_t)s) * 1099511628211ull;
    return (size_t)h;
  }
};

ByteDfa determinize(const Nfa& n, int start, int final_state, const ByteSet& alphabet,
                    uint64_t max_work) {
  ByteDfa d;
  std::unordered_map<std::vector<int>, int, StateSetHash> ids;
  std::vector<std::vector<int>> sets;
  uint64_t work = 0;
  // A known set is only looked up; a new one is copied once.
  auto intern = [&](const std::vector<int>& set) {
    if (auto it = ids.find(set); it != ids.end()) return it->second;
    if ((int)sets.size() >= kMaxDfaStates) fail<UsageError>("pattern is too complex");
    ids.emplace(set, (int)sets.size());
    sets.push_back(set);
    return (int)sets.size() - 1;
  };
  Closure closure(n);
  int classes = 0;
  const std::vector<int> cls = byte_classes(n, alphabet, &classes);
  std::vector<int> first_byte(classes, -1);  // a representative of each class
  for (int b = 255; b >= 0; --b)
    if (cls[b] >= 0) first_byte[cls[b]] = b;
  std::vector<int> first{start};
  closure(first);
  d.start = intern(first);
  std::vector<int> to_class(classes);
  std::vector<int> to;  // scratch: allocating one per transition dominated sanitized runs
  for (size_t i = 0; i < sets.size(); ++i) {
    d.next.resize((i + 1) * 256, -1);
    d.accepting.push_back(std::binary_search(sets[i].begin(), sets[i].end(), final_state));
    for (int c = 0; c < classes; ++c) {
      to.clear();
      work += sets[i].size();
      for (int s : sets[i])
        if (n.states[s].to >= 0 && n.states[s].on.test(first_byte[c])) to.push_back(n.states[s].to);
      if (!to.empty()) closure(to);
      work += to.size();
      if (work > max_work) fail<UsageError>("pattern is too complex");
      to_class[c] = to.empty() ? -1 : intern(to);
    }
    for (int b = 0; b < 256; ++b)
      if (cls[b] >= 0) d.next[i * 256 + b] = to_class[cls[b]];
  }
  return d;
}

// Keeps only states that can still reach acceptance, so a writer never walks into a dead end.
ByteDfa prune(const ByteDfa& d) {
  int n = d.states();
  std::vector<std::vector<int>> back(n);
  for (int s = 0; s < n; ++s)
    for (int b = 0; b < 256; ++b)
      if (int t = d.step(s, (uint8_t)b); t >= 0) back[t].push_back(s);
  std::vector<uint8_t> live(n);
  std::vector<int> stack;
  for (int s = 0; s < n; ++s)
    if (d.accepting[s]) live[s] = 1, stack.push_back(s);
  while (!stack.empty()) {
    int t = stack.back();
    stack.pop_back();
    for (int s : back[t])
      if (!live[s]) live[s] = 1, stack.push_back(s);
  }
  if (!live[d.start]) fail<UsageError>("pattern matches no string this engine can write");
  std::vector<int> remap(n, -1);
  ByteDfa out;
  for (int s = 0; s < n; ++s)
    if (live[s]) remap[s] = (int)out.accepting.size(), out.accepting.push_back(d.accepting[s]);
  out.next.assign(out.accepting.size() * 256, -1);
  for (int s = 0; s < n; ++s) {
    if (!live[s]) continue;
    for (int b = 0; b < 256; ++b) {
      int t = d.step(s, (uint8_t)b);
      if (t >= 0 && live[t]) out.next[(size_t)remap[s] * 256 + b] = remap[t];
    }
  }
  out.start = remap[d.start];
  return out;
}

}  // namespace

ByteDfa compile_pattern(std::string_view pattern, StringAlphabet alphabet, uint64_t max_work) {
  AstPtr ast = Parser(pattern).parse();
  Nfa nfa;
  auto [start, end] = NfaBuilder(nfa).emit(*ast);
  return prune(determinize(nfa, start, end, alphabet_bytes(alphabet), max_work));
}

ByteDfa intersect_dfas(const ByteDfa& a, const ByteDfa& b) {
  // The product automaton over the pairs reachable from the two starts.
  ByteDfa d;
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> pairs;
  auto intern = [&](int x, int y) {
    auto [it, fresh] = ids.emplace(std::pair{x, y}, (int)pairs.size());
    if (fresh) {
      if ((int)pairs.size() >= kMaxDfaStates) fail<UsageError>("pattern is too complex");
      pairs.push_back({x, y});
    }
    return it->second;
  };
  d.start = intern(a.start, b.start);
  for (size_t i = 0; i < pairs.size(); ++i) {
    auto [x, y] = pairs[i];
    d.next.resize((i + 1) * 256, -1);
    d.accepting.push_back(a.accepting[x] && b.accepting[y]);
    for (int c = 0; c < 256; ++c) {
      int tx = a.step(x, (uint8_t)c), ty = b.step(y, (uint8_t)c);
      if (tx >= 0 && ty >= 0) {
        int id = intern(tx, ty);
        d.next[i * 256 + c] = id;
      }
    }
  }
  return prune(d);
}

ByteDfa drop_supplementary(const ByteDfa& a) {
  ByteDfa d = a;
  for (int s = 0; s < d.states(); ++s)
    for (int c = 0xF0; c <= 0xF4; ++c) d.next[(size_t)s * 256 + c] = -1;
  return prune(d);
}

bool dfa_matches(const ByteDfa& d, std::string_view s) {
  int state = d.start;
  for (char c : s)
    if ((state = d.step(state, (uint8_t)c)) < 0) return false;
  return d.accepting[state];
}

std::string format_pattern(std::string_view format) {
  // Dates never name a day the month lacks; 29 February is left out rather than checked for
  // leap years, so every date written is valid.
  const std::string date =
      "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|"
      "30)"
      "|02-(?:0[1-9]|1[0-9]|2[0-8]))";
  const std::string time =
      "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):["
      "0-5][0-9])";
  if (format == "date") return "^" + date + "$";
  if (format == "time") return "^" + time + "$";
  if (format == "date-time") return "^" + date + "T" + time + "$";
  if (format == "email")
    return "^[A-Za-z0-9_+-]+(?:\\.[A-Za-z0-9_+-]+)*@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{"
           "2,}$";
  if (format == "uuid") return "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
  if (format == "uri") return "^[a-z][a-z0-9+.-]*://[A-Za-z0-9._~%!$&'()*+,;=:@/?#-]*$";
  return "";
}

}  // namespace waste
