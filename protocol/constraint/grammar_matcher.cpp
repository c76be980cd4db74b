#include "protocol/constraint/grammar_matcher.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "protocol/constraint/utf8.h"

namespace waste {
namespace {

using Kind = GrammarNode::Kind;

enum FrameType : uint8_t { kValue, kKey, kFreeKey };

enum Phase : uint8_t {
  // strings
  kStrOpen = 0,
  kStrBody,
  kStrEscape,
  kStrHex1,
  kStrHex2,
  kStrHex3,
  kStrHex4,
  // numbers
  kNumStart = 0,
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp,
  // objects
  kObjOpen = 0,
  kObjFirst,
  kObjAfterValue,
  kObjKey,
  kObjInKey,
  kObjColon,
  kObjInValue,
  // arrays
  kArrOpen = 0,
  kArrFirst,
  kArrAfterItem,
  kArrNext,
  kArrInItem,
  // K3 tool-call arguments
  kTaExpect = 0,
  kTaInKey,
  kTaInValue,
};

// Digit caps keep every number finishable and, with bounds, exact in long double.
constexpr int kMaxWholeDigits = 15, kMaxFracDigits = 15, kMaxExpDigits = 2;
constexpr int kBoundedWholeDigits = 12, kBoundedFracDigits = 6;

// aux for strings: bits 0-1 continuation bytes still due, bits 2-4 the next one's range code,
// bit 5 a \u escape starting with D (the next hex digit must keep it off the surrogates).
int pending(const uint16_t aux) {
  return aux & 3;
}

// aux for numbers: bit 0 negative, bits 1-5 whole digits, bits 6-10 fraction digits, 11-12 exp.
struct NumDigits {
  bool neg;
  int whole, frac, exp;
};
NumDigits unpack(uint16_t aux) {
  return {(aux & 1) != 0, (aux >> 1) & 31, (aux >> 6) & 31, (aux >> 11) & 3};
}
uint16_t pack(const NumDigits& d) {
  return (uint16_t)((d.neg ? 1 : 0) | d.whole << 1 | d.frac << 6 | d.exp << 11);
}

bool is_digit(Symbol s) {
  return s >= '0' && s <= '9';
}
bool is_hex(Symbol s) {
  return is_digit(s) || (s >= 'a' && s <= 'f') || (s >= 'A' && s <= 'F');
}

long double pow10(int n) {
  long double p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

}  // namespace

GrammarMatcher::GrammarMatcher(const Grammar& g) : g_(g) {
  std::vector<Top> first;
  enter(g.root, -1, first);
  commit(first);
}

bool GrammarMatcher::done() const {
  return std::find(threads_.begin(), threads_.end(), kDone) != threads_.end();
}

GrammarMatcher::Top GrammarMatcher::push(const Frame& f) {
  arena_.push_back(f);
  return (Top)arena_.size() - 1;
}

void GrammarMatcher::enter(int node, Top parent, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[node];
  Frame f;
  f.node = node;
  f.parent = parent;
  switch (n.kind) {
    case Kind::kUnion:
      for (int c : n.children) enter(c, parent, out);
      return;
    case Kind::kSeq:
      f.count = 0;
      enter(n.children[0], push(f), out);
      return;
    case Kind::kLiteral:
      f.sel = 0;
      break;
    case Kind::kString:
      f.phase = n.raw ? kStrBody : kStrOpen;
      f.sel = n.dfa >= 0 ? g_.dfas[n.dfa].start : -1;
      break;
    default:
      f.phase = 0;
      f.count = 0;
      break;
  }
  out.push_back(push(f));
}

// The frame at `parent` learns that its child finished (with `result`: a chosen property).
// `refeed`, when set, is a symbol the child did not consume; it goes to whatever comes next.
void GrammarMatcher::child_done(Top parent, int result, const Symbol* refeed,
                                std::vector<Top>& out) {
  if (parent < 0) {
    if (!refeed) out.push_back(kDone);
    return;
  }
  Frame f = arena_[parent];
  const GrammarNode& n = g_.nodes[f.node];
  std::vector<Top> entered;
  switch (n.kind) {
    case Kind::kSeq:
      if (++f.count == n.children.size()) return child_done(f.parent, -1, refeed, out);
      enter(n.children[f.count], push(f), entered);
      for (Top t : entered) continue_with(t, refeed, out);
      return;
    case Kind::kObject:
      if (f.phase == kObjInKey)
        f.phase = kObjColon, f.sel = result;
      else
        f.phase = kObjAfterValue;
      break;
    case Kind::kArray:
      f.phase = kArrAfterItem;
      ++f.count;
      break;
    case Kind::kTypedArgs:
      if (f.phase == kTaExpect || f.phase == kTaInValue) {
        f.phase = kTaExpect;
        break;
      }
      f.phase = kTaInValue;
      f.count = (uint32_t)result + 1;
      enter(n.props[result].value, push(f), entered);
      for (Top t : entered) continue_with(t, refeed, out);
      return;
    default:
      return;  // leaves have no children
  }
  continue_with(push(f), refeed, out);
}

void GrammarMatcher::continue_with(Top t, const Symbol* refeed, std::vector<Top>& out) {
  if (refeed)
    feed(t, *refeed, out);
  else
    out.push_back(t);
}

void GrammarMatcher::feed(Top t, Symbol s, std::vector<Top>& out) {
  if (t == kDone) return;
  const Frame f = arena_[t];  // a copy: pushes below may move the arena
  if (f.type == kKey) return feed_key(f, s, out);
  if (f.type == kFreeKey) return feed_free_key(f, s, out);
  switch (g_.nodes[f.node].kind) {
    case Kind::kLiteral:
      return feed_literal(f, s, out);
    case Kind::kString:
      return feed_string(f, s, out);
    case Kind::kNumber:
      return feed_number(f, s, out);
    case Kind::kObject:
      return feed_object(f, s, out);
    case Kind::kArray:
      return feed_array(f, s, out);
    case Kind::kTypedArgs:
      return feed_typed_args(f, s, out);
    default:
      return;  // unions and sequences are never on top
  }
}

void GrammarMatcher::feed_literal(const Frame& f, Symbol s, std::vector<Top>& out) {
  const SymbolTrie& trie = g_.tries[g_.nodes[f.node].trie];
  const SymbolTrie::Node& here = trie.nodes[f.sel];
  if (int c = trie.child(f.sel, s); c >= 0) {
    const SymbolTrie::Node& next = trie.nodes[c];
    if (next.edges.empty()) {
      child_done(f.parent, next.terminal, nullptr, out);
    } else {
      Frame nf = f;
      nf.sel = c;
      out.push_back(push(nf));
    }
  }
  // A string that is a prefix of a longer one (enum [1, 12]) may end here.
  if (f.sel != 0 && here.terminal >= 0) child_done(f.parent, here.terminal, &s, out);
}

// The string node whose bounds and pattern a frame's text follows: a value's own node, or for
// an undeclared key its object's key rule (propertyNames); -1 when nothing applies.
int GrammarMatcher::text_rule(const Frame& f) const {
  if (f.node < 0) return -1;
  if (f.type == kValue) return f.node;
  if (f.type == kFreeKey) return g_.nodes[f.node].key_rule;
  return -1;
}

bool GrammarMatcher::string_can_end(const Frame& f) const {
  if (f.phase != kStrBody || pending(f.aux) != 0) return false;
  int r = text_rule(f);
  if (r < 0) return true;
  const GrammarNode& n = g_.nodes[r];
  if (f.count < n.min_len) return false;
  return n.dfa < 0 || g_.dfas[n.dfa].accepting[f.type == kValue ? f.sel : (int)f.whole];
}

// One byte of string content: UTF-8 well-formedness, the length bound and the pattern.
bool GrammarMatcher::string_byte(Frame& f, uint8_t b, bool raw) const {
  if (raw ? b == 0 : b < 0x20) return false;
  const int r = text_rule(f);
  int due = pending(f.aux);
  if (due > 0) {
    int code = (f.aux >> 2) & 7;
    if (b < kUtf8ContLo[code] || b > kUtf8ContHi[code]) return false;
    f.aux = (uint16_t)(due - 1);
  } else {
    int more, code;
    if (!utf8_lead(b, more, code)) return false;
    f.aux = (uint16_t)(more | code << 2);
    if (r >= 0) {
      const GrammarNode& n = g_.nodes[r];
      if (++f.count > n.max_len) return false;
      // Past U+FFFF a character is one code point but two UTF-16 units; a bounded string
      // leaves them out so that both ways of counting agree.
      if (more == 3 && (n.min_len > 0 || n.max_len != UINT32_MAX)) return false;
    }
  }
  if (r < 0) return true;
  const GrammarNode& n = g_.nodes[r];
  if (n.dfa < 0) return true;
  int state = g_.dfas[n.dfa].step(f.type == kValue ? f.sel : (int)f.whole, b);
  if (state < 0) return false;
  if (f.type == kValue)
    f.sel = state;
  else
    f.whole = (uint64_t)state;
  return n.finish < 0 || g_.finish_tables[n.finish].at(state, f.count);
}

void GrammarMatcher::feed_string(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  Frame nf = f;
  if (f.phase == kStrOpen) {
    if (s != '"') return;
    nf.phase = kStrBody;
    out.push_back(push(nf));
    return;
  }
  if (f.phase != kStrBody) return feed_escape(f, s, out);
  if (s >= kFirstSpecialSymbol) {
    if (n.raw && string_can_end(f)) child_done(f.parent, -1, &s, out);
    return;
  }
  if (!n.raw && s == '"') {
    if (string_can_end(f)) child_done(f.parent, -1, nullptr, out);
    return;
  }
  if (!n.raw && s == '\\') {
    if (n.dfa >= 0 || pending(f.aux) != 0 || f.count + 1 > n.max_len) return;
    nf.phase = kStrEscape;
    out.push_back(push(nf));
    return;
  }
  if (string_byte(nf, (uint8_t)s, n.raw)) out.push_back(push(nf));
}

void GrammarMatcher::feed_escape(const Frame& f, Symbol s, std::vector<Top>& out) {
  Frame nf = f;
  switch (f.phase) {
    case kStrEscape:
      if (s == 'u') {
        nf.phase = kStrHex1;
      } else if (s == '"' || s == '\\' || s == '/' || s == 'b' || s == 'f' || s == 'n' ||
                 s == 'r' || s == 't') {
        nf.phase = kStrBody;
        ++nf.count;
      } else {
        return;
      }
      break;
    case kStrHex1:
      if (!is_hex(s)) return;
      nf.aux = (s == 'd' || s == 'D') ? 1 << 5 : 0;  // \uD800-\uDFFF would be a lone surrogate
      nf.phase = kStrHex2;
      break;
    case kStrHex2:
      if (!is_hex(s) || ((f.aux & (1 << 5)) && !(s >= '0' && s <= '7'))) return;
      nf.aux = 0;
      nf.phase = kStrHex3;
      break;
    case kStrHex3:
      if (!is_hex(s)) return;
      nf.phase = kStrHex4;
      break;
    case kStrHex4:
      if (!is_hex(s)) return;
      nf.phase = kStrBody;
      ++nf.count;
      break;
    default:
      return;
  }
  out.push_back(push(nf));
}

// Whether some number that starts like `f` lies within the bounds (and the digit caps). The
// magnitudes reachable from a prefix form half-open intervals [lo, hi).
bool GrammarMatcher::number_feasible(const Frame& f) const {
  const GrammarNode& n = g_.nodes[f.node];
  if (!n.has_min && !n.has_max && !n.multiple) return true;
  NumDigits d = unpack(f.aux);
  auto fits = [&](long double lo, long double hi, bool hi_closed) {
    // The values (signed) this magnitude interval stands for, against the bounds.
    long double vlo = d.neg ? -hi : lo, vhi = d.neg ? -lo : hi;
    bool lo_closed = d.neg ? hi_closed : true, up_closed = d.neg ? true : hi_closed;
    if (n.has_min) {
      if (n.min > vlo || (n.min == vlo && n.min_exclusive))
        vlo = n.min, lo_closed = !n.min_exclusive;
    }
    if (n.has_max) {
      if (n.max < vhi || (n.max == vhi && n.max_exclusive))
        vhi = n.max, up_closed = !n.max_exclusive;
    }
    if (n.multiple) {  // the least multiple in the interval
      long double k = (long double)n.multiple, m = std::ceil(vlo / k) * k;
      if (m == vlo && !lo_closed) m += k;
      vlo = m, lo_closed = true;
    }
    return vlo < vhi || (vlo == vhi && lo_closed && up_closed);
  };
  long double whole = (long double)f.whole;
  if (f.phase == kNumStart || f.phase == kNumMinus)
    return fits(0, pow10(kBoundedWholeDigits), false);
  if (f.phase == kNumZero || f.phase == kNumInt) {
    int room = f.phase == kNumZero ? 0 : kBoundedWholeDigits - d.whole;
    for (int j = 0; j <= room; ++j) {
      long double p = pow10(j);
      bool ok = n.integer ? fits(whole * p, (whole + 1) * p - 1, true)
                          : fits(whole * p, (whole + 1) * p, false);
      if (ok) return true;
    }
    return false;
  }
  // After the point: more fraction digits, up to the cap.
  long double scale = pow10(d.frac);
  long double lo = whole + (long double)f.frac / scale;
  if (d.frac >= kBoundedFracDigits) return fits(lo, lo, true);
  return fits(lo, whole + (long double)(f.frac + 1) / scale, false);
}

bool GrammarMatcher::number_can_end(const Frame& f) const {
  if (f.phase != kNumZero && f.phase != kNumInt && f.phase != kNumFrac && f.phase != kNumExp)
    return false;
  const GrammarNode& n = g_.nodes[f.node];
  if (n.multiple && f.whole % n.multiple != 0) return false;
  if (!n.has_min && !n.has_max) return true;
  NumDigits d = unpack(f.aux);
  long double v = (long double)f.whole + (long double)f.frac / pow10(d.frac);
  if (d.neg) v = -v;
  if (n.has_min && (v < n.min || (v == n.min && n.min_exclusive))) return false;
  if (n.has_max && (v > n.max || (v == n.max && n.max_exclusive))) return false;
  return true;
}

void GrammarMatcher::feed_number(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  const bool bounded = n.has_min || n.has_max || n.multiple;
  const int whole_cap = bounded ? kBoundedWholeDigits : kMaxWholeDigits;
  const int frac_cap = bounded ? kBoundedFracDigits : kMaxFracDigits;
  Frame nf = f;
  NumDigits d = unpack(f.aux);
  auto keep = [&](uint8_t phase) {
    nf.phase = phase;
    nf.aux = pack(d);
    if (number_feasible(nf)) out.push_back(push(nf));
  };
  switch (f.phase) {
    case kNumStart:
      if (s == '-') return d.neg = true, keep(kNumMinus);
      [[fallthrough]];
    case kNumMinus:
      if (!is_digit(s)) return;
      nf.whole = (uint64_t)(s - '0');
      d.whole = 1;
      return keep(s == '0' ? kNumZero : kNumInt);
    case kNumInt:
      if (is_digit(s) && d.whole < whole_cap) {
        nf.whole = f.whole * 10 + (uint64_t)(s - '0');
        ++d.whole;
        return keep(kNumInt);
      }
      [[fallthrough]];
    case kNumZero:
      if (s == '.' && !n.integer) return keep(kNumDot);
      if ((s == 'e' || s == 'E') && !n.integer && !bounded) return keep(kNumE);
      break;
    case kNumDot:
    case kNumFrac:
      if (is_digit(s) && d.frac < frac_cap) {
        nf.frac = f.frac * 10 + (uint64_t)(s - '0');
        ++d.frac;
        return keep(kNumFrac);
      }
      if (f.phase == kNumDot) return;
      if ((s == 'e' || s == 'E') && !bounded) return keep(kNumE);
      break;
    case kNumE:
      if (s == '+' || s == '-') return keep(kNumESign);
      [[fallthrough]];
    case kNumESign:
      if (!is_digit(s)) return;
      d.exp = 1;
      return keep(kNumExp);
    case kNumExp:
      if (is_digit(s) && d.exp < kMaxExpDigits) {
        ++d.exp;
        return keep(kNumExp);
      }
      break;
  }
  if (number_can_end(f)) child_done(f.parent, -1, &s, out);
}

void GrammarMatcher::feed_object(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  const uint32_t np = (uint32_t)n.props.size();
  const bool required_left = n.first_required_from[f.count] < (int)np;
  Frame nf = f;
  switch (f.phase) {
    case kObjOpen:
      if (s != '{') return;
      nf.phase = kObjFirst;
      out.push_back(push(nf));
      return;
    case kObjFirst:
    case kObjAfterValue: {
      const bool room = f.whole < n.max_props && (f.count < np || n.additional >= 0);
      if (s == '}' && !required_left && f.whole >= n.min_props)
        return child_done(f.parent, -1, nullptr, out);
      if (f.phase == kObjFirst && s == '"' && room) return start_key(f, s, out);
      if (f.phase == kObjAfterValue && s == ',' && room) {
        nf.phase = kObjKey;
        out.push_back(push(nf));
      }
      return;
    }
    case kObjKey:
      if (s == '"') start_key(f, s, out);
      return;
    case kObjColon: {
      if (s != ':') return;
      nf.phase = kObjInValue;
      // Counted only where a bound needs it, so other objects keep sharing mask signatures.
      if (n.min_props > 0 || n.max_props != UINT32_MAX) ++nf.whole;
      int value = n.additional;
      if (f.sel >= 0) value = n.props[f.sel].value, nf.count = (uint32_t)f.sel + 1;
      enter(value, push(nf), out);
      return;
    }
    default:
      return;
  }
}

// After an object's opening quote of a key (or K3's <|open|> of an argument): a declared
// property from the next one up to the first required one, or, once nothing required is left,
// another key.
void GrammarMatcher::start_key(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  Frame obj = f;
  obj.phase = n.kind == Kind::kObject ? kObjInKey : kTaInKey;
  Top parent = push(obj);
  if (f.count < n.props.size()) {
    Frame key;
    key.node = f.node;
    key.parent = parent;
    key.type = kKey;
    key.sel = 0;
    if (n.kind == Kind::kObject)
      out.push_back(push(key));
    else
      feed_key(key, s, out);  // the <|open|> is the key string's first symbol
  }
  if (n.kind == Kind::kObject && n.additional >= 0 &&
      n.first_required_from[f.count] == (int)n.props.size()) {
    Frame key;
    key.node = f.node;
    key.parent = parent;
    key.type = kFreeKey;
    key.phase = kStrBody;
    key.sel = 0;
    if (n.key_rule >= 0 && g_.nodes[n.key_rule].dfa >= 0)
      key.whole = (uint64_t)g_.dfas[g_.nodes[n.key_rule].dfa].start;
    out.push_back(push(key));
  }
}

void GrammarMatcher::feed_key(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  const SymbolTrie& trie = g_.tries[n.trie];
  int c = trie.child(f.sel, s);
  if (c < 0) return;
  const Frame& obj = arena_[f.parent];
  const int np = (int)n.props.size();
  uint32_t first = obj.count;
  int last = std::min<int>(n.first_required_from[first], np - 1);
  // With maxProperties, skipping ahead to an optional property must leave room for the
  // required ones; with minProperties and no other keys, it must leave enough properties.
  if (obj.whole + 1 + (uint64_t)n.required_from[first] > n.max_props)
    first = (uint32_t)n.first_required_from[first];
  if (n.additional < 0 && n.min_props > obj.whole + 1)
    last = std::min<int>(last, np - (int)(n.min_props - obj.whole));
  const auto& v = trie.nodes[c].values;
  auto it = std::lower_bound(v.begin(), v.end(), (int)first);
  if (it == v.end() || *it > last) return;
  if (trie.nodes[c].terminal >= 0)
    return child_done(f.parent, trie.nodes[c].terminal, nullptr, out);
  Frame nf = f;
  nf.sel = c;
  out.push_back(push(nf));
}

// A key the schema does not declare: plain characters (no escapes), not equal to a declared
// key. `sel` follows the declared keys' trie while the text still matches one.
void GrammarMatcher::feed_free_key(const Frame& f, Symbol s, std::vector<Top>& out) {
  const SymbolTrie& trie = g_.tries[g_.nodes[f.node].trie];
  if (s >= kFirstSpecialSymbol || s == '\\') return;
  if (s == '"') {
    if (!string_can_end(f)) return;
    int c = f.sel >= 0 ? trie.child(f.sel, s) : -1;
    if (c >= 0 && trie.nodes[c].terminal >= 0) return;  // a declared key
    return child_done(f.parent, -1, nullptr, out);
  }
  Frame nf = f;
  if (!string_byte(nf, (uint8_t)s, false)) return;
  nf.sel = f.sel >= 0 ? trie.child(f.sel, s) : -1;
  out.push_back(push(nf));
}

void GrammarMatcher::feed_array(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  const bool more = f.count < n.max_items && (f.count < n.prefix.size() || n.items >= 0);
  Frame nf = f;
  switch (f.phase) {
    case kArrOpen:
      if (s != '[') return;
      nf.phase = kArrFirst;
      out.push_back(push(nf));
      return;
    case kArrAfterItem:
      if (s == ',' && more) {
        nf.phase = kArrNext;
        out.push_back(push(nf));
        return;
      }
      [[fallthrough]];
    case kArrFirst:
      if (s == ']') {
        if (f.count >= n.min_items) child_done(f.parent, -1, nullptr, out);
        return;
      }
      if (f.phase == kArrAfterItem || !more) return;
      [[fallthrough]];
    case kArrNext: {
      nf.phase = kArrInItem;
      int item = f.count < n.prefix.size() ? n.prefix[f.count] : n.items;
      std::vector<Top> entered;
      enter(item, push(nf), entered);
      for (Top t : entered) feed(t, s, out);
      return;
    }
    default:
      return;
  }
}

void GrammarMatcher::feed_typed_args(const Frame& f, Symbol s, std::vector<Top>& out) {
  const GrammarNode& n = g_.nodes[f.node];
  if (f.phase != kTaExpect) return;
  start_key(f, s, out);
  if (n.first_required_from[f.count] == (int)n.props.size()) child_done(f.parent, -1, &s, out);
}

bool GrammarMatcher::plain_string(Top t, bool& raw, uint32_t& room) const {
  if (t == kDone) return false;
  const Frame& f = arena_[t];
  if (f.type == kFreeKey) {
    // Plain characters only move `sel` along the declared keys; a key is checked at its quote.
    const int r = text_rule(f);
    if (pending(f.aux) != 0 || (r >= 0 && g_.nodes[r].dfa >= 0)) return false;
    raw = false;
    room = r < 0 || g_.nodes[r].max_len == UINT32_MAX ? UINT32_MAX : g_.nodes[r].max_len - f.count;
    return true;
  }
  if (f.type != kValue) return false;
  const GrammarNode& n = g_.nodes[f.node];
  if (n.kind != Kind::kString || f.phase != kStrBody || n.dfa >= 0 || pending(f.aux) != 0)
    return false;
  raw = n.raw;
  room = n.max_len == UINT32_MAX ? UINT32_MAX : n.max_len - f.count;
  return true;
}

bool GrammarMatcher::pattern_string(Top t, PatternString& p) const {
  if (t == kDone) return false;
  const Frame& f = arena_[t];
  if (f.type != kValue) return false;
  const GrammarNode& n = g_.nodes[f.node];
  if (n.kind != Kind::kString || f.phase != kStrBody || n.dfa < 0 || pending(f.aux) != 0)
    return false;
  p = {f.node, n.dfa, f.sel, f.count};
  return true;
}

void GrammarMatcher::signature(Top t, uint32_t long_token, std::string& out) const {
  for (; t >= 0; t = arena_[t].parent) {
    Frame f = arena_[t];
    f.parent = 0;
    const GrammarNode& n = g_.nodes[f.node];
    if (f.type == kValue && n.kind == Kind::kString && n.finish < 0 && f.count >= n.min_len &&
        (n.max_len == UINT32_MAX || n.max_len - f.count >= long_token))
      f.count = n.min_len;
    out.append(reinterpret_cast<const char*>(&f.node), sizeof f.node);
    out.append(reinterpret_cast<const char*>(&f.type), 8);  // type, phase, aux, count
    out.append(reinterpret_cast<const char*>(&f.sel), sizeof f.sel);
    out.append(reinterpret_cast<const char*>(&f.whole), sizeof f.whole);
    out.append(reinterpret_cast<const char*>(&f.frac), sizeof f.frac);
  }
  out.push_back('|');
}

bool GrammarMatcher::same(Top a, Top b) const {
  while (a >= 0 && b >= 0) {
    if (a == b) return true;
    const Frame &x = arena_[a], &y = arena_[b];
    if (x.node != y.node || x.type != y.type || x.phase != y.phase || x.aux != y.aux ||
        x.count != y.count || x.sel != y.sel || x.whole != y.whole || x.frac != y.frac)
      return false;
    a = x.parent, b = y.parent;
  }
  return a == b;
}

void GrammarMatcher::commit(const std::vector<Top>& next) {
  std::vector<Top> unique;
  for (Top t : next) {
    bool dup = false;
    for (Top u : unique) dup = dup || same(t, u);
    if (!dup && unique.size() < kMaxThreads) unique.push_back(t);
  }
  // Copy the live chains into a fresh arena, sharing frames that several threads share.
  std::vector<Frame> fresh;
  std::unordered_map<Top, Top> moved;
  auto copy = [&](auto&& self, Top t) -> Top {
    if (t < 0) return t;
    if (auto it = moved.find(t); it != moved.end()) return it->second;
    Frame f = arena_[t];
    f.parent = self(self, f.parent);
    fresh.push_back(f);
    return moved[t] = (Top)fresh.size() - 1;
  };
  threads_.clear();
  for (Top t : unique) threads_.push_back(copy(copy, t));
  arena_ = std::move(fresh);
}

}  // namespace waste
