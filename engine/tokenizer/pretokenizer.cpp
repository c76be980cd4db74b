#include "engine/tokenizer/pretokenizer.h"

#include <unicode/uchar.h>
#include <unicode/uscript.h>

#include <array>
#include <bit>
#include <cstring>

namespace waste {

namespace {

constexpr std::size_t npos = std::string_view::npos;

// Per-character facts the pattern needs. kUpper and kLower are the two letter classes of the
// pattern, [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]] and [\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]];
// they overlap on Lm, Lo and marks, which is what makes the backtracking cases below matter.
enum : std::uint8_t {
  kHan = 1,        // Script=Han (tiktoken's regex crate reads a bare \p{Han} as Script, not scx)
  kUpper = 2,      // the first class (letters that may start a capitalised word)
  kLower = 4,      // the second class
  kLetter = 8,     // \p{L}
  kNumber = 16,    // \p{N}
  kSpace = 32,     // \s: the White_Space property
  kPySpace = 64,   // Python's str.isspace, used only by the release's run-length cuts
  kNewline = 128,  // \r or \n
};

bool python_isspace(UChar32 c) {
  // CPython's rule: bidirectional class WS, B or S, or general category Zs.
  const UCharDirection d = u_charDirection(c);
  return d == U_WHITE_SPACE_NEUTRAL || d == U_BLOCK_SEPARATOR || d == U_SEGMENT_SEPARATOR ||
         u_charType(c) == U_SPACE_SEPARATOR;
}

std::uint8_t category_flags(UChar32 c) {
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_TITLECASE_LETTER:
      return kLetter | kUpper;
    case U_LOWERCASE_LETTER:
      return kLetter | kLower;
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter | kUpper | kLower;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kUpper | kLower;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return 0;
  }
}

std::uint8_t compute_flags(char32_t cp) {
  const auto c = static_cast<UChar32>(cp);
  std::uint8_t f = category_flags(c);
  UErrorCode err = U_ZERO_ERROR;
  if (uscript_getScript(c, &err) == USCRIPT_HAN && U_SUCCESS(err)) {
    f = static_cast<std::uint8_t>((f & ~(kUpper | kLower)) | kHan);
  }
  if (u_hasBinaryProperty(c, UCHAR_WHITE_SPACE)) f |= kSpace;
  if (python_isspace(c)) f |= kPySpace;
  if (c == '\r' || c == '\n') f |= kNewline;
  return f;
}

// Planes 0-3 hold nearly all text (plane 2 and 3 are rare Han); the rest asks ICU each time.
constexpr char32_t kTableSize = 0x40000;

const std::uint8_t* flag_table() {
  static const std::vector<std::uint8_t> table = [] {
    std::vector<std::uint8_t> t(kTableSize);
    for (char32_t c = 0; c < kTableSize; ++c) t[c] = compute_flags(c);
    return t;
  }();
  return table.data();
}

std::uint8_t flags_of(const std::uint8_t* table, char32_t cp) {
  return cp < kTableSize ? table[cp] : compute_flags(cp);
}

bool is_newline_byte(char b) {
  return b == '\r' || b == '\n';
}

// ASCII character classes for the fast path of PretokenScanner; kEnd stands past the text.
enum AsciiClass : std::uint8_t {
  kAsciiUpper,
  kAsciiLower,
  kAsciiDigit,
  kAsciiSpace,  // White_Space other than \r \n: \t \v \f and the space
  kAsciiNewline,
  kAsciiPunct,
  kNonAscii,
  kEnd,
};

constexpr AsciiClass ascii_class(int c) {
  if (c >= 0x80) return kNonAscii;
  if (c >= 'A' && c <= 'Z') return kAsciiUpper;
  if (c >= 'a' && c <= 'z') return kAsciiLower;
  if (c >= '0' && c <= '9') return kAsciiDigit;
  if (c == '\r' || c == '\n') return kAsciiNewline;
  if (c == ' ' || (c >= 0x09 && c <= 0x0C)) return kAsciiSpace;
  return kAsciiPunct;
}

constexpr std::array<AsciiClass, 256> make_ascii_classes() {
  std::array<AsciiClass, 256> t{};
  for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = ascii_class(c);
  return t;
}
constexpr std::array<AsciiClass, 256> kAsciiClass = make_ascii_classes();

}  // namespace

Utf8Step utf8_step(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const unsigned b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  int need;
  char32_t cp;
  unsigned lo = 0x80, hi = 0xBF;  // range of the next continuation byte (Unicode Table 3-7)
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Utf8Step::kInvalid, 1, 0};
  }
  for (int k = 1; k <= need; ++k) {
    const auto len = static_cast<std::uint8_t>(k);
    if (static_cast<std::size_t>(k) >= bytes.size()) return {Utf8Step::kTruncated, len, 0};
    const unsigned b = p[k];
    if (b < lo || b > hi) return {Utf8Step::kInvalid, len, 0};
    cp = (cp << 6) | (b & 0x3F);
    lo = 0x80, hi = 0xBF;
  }
  return {Utf8Step::kValid, static_cast<std::uint8_t>(need + 1), cp};
}

bool is_valid_utf8(std::string_view bytes) {
  std::size_t i = 0;
  while (i < bytes.size()) {
    if (i + 8 <= bytes.size()) {  // eight ASCII bytes at a time
      std::uint64_t w;
      std::memcpy(&w, bytes.data() + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        i += 8;
        continue;
      }
    }
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step st = utf8_step(bytes.substr(i));
    if (st.kind != Utf8Step::kValid) return false;
    i += st.len;
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() + 16);
  for (std::size_t i = 0; i < bytes.size();) {
    const Utf8Step st = utf8_step(bytes.substr(i));
    if (st.kind == Utf8Step::kValid) {
      out.append(bytes.substr(i, st.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.len;
  }
  return out;
}

namespace {

constexpr std::uint64_t kByteOnes = 0x0101010101010101ull;
constexpr std::uint64_t kByteHighs = 0x8080808080808080ull;

// For 8 bytes below 0x80: the high bit of each byte that lies in [lo, hi] (no carries cross
// bytes, since every sum stays below 0x100).
std::uint64_t bytes_between(std::uint64_t x, unsigned lo, unsigned hi) {
  const std::uint64_t at_least_lo = x + kByteOnes * (0x80 - lo);
  const std::uint64_t above_hi = x + kByteOnes * (0x7F - hi);
  return at_least_lo & ~above_hi & kByteHighs;
}

// The run-length state of _split_whitespaces_or_nonwhitespaces over one slice.
class Cutter {
 public:
  Cutter(std::string_view text, std::size_t start, std::size_t max_chars, std::size_t max_run,
         const std::uint8_t* table, std::vector<std::string_view>& out)
      : text_(text),
        i_(start),
        part_start_(start),
        max_chars_(max_chars),
        max_run_(max_run),
        table_(table),
        out_(out) {}

  // Returns where the slice ended.
  std::size_t run() {
    while (i_ < text_.size() && count_ < max_chars_) {
      ascii_blocks();
      if (i_ < text_.size() && count_ < max_chars_) one_character();
    }
    out_.push_back(text_.substr(part_start_, i_ - part_start_));
    return i_;
  }

 private:
  // Whole blocks of 8 ASCII characters in which no cut falls; the rest is left to
  // one_character. Word boundaries every few characters would defeat branch prediction there.
  void ascii_blocks() {
    if (max_run_ < 8) return;  // a run inside one block could need a cut
    while (i_ + 8 <= text_.size() && count_ + 8 <= max_chars_) {
      std::uint64_t x;
      std::memcpy(&x, text_.data() + i_, 8);
      if (x & kByteHighs) return;
      const std::uint64_t space = bytes_between(x, 0x09, 0x0D) | bytes_between(x, 0x1C, 0x20);
      const std::uint64_t other_than_run = run_space_ ? ~space & kByteHighs : space;
      // The run in progress goes on through the block's first bytes of its class.
      const std::size_t lead = other_than_run ? std::countr_zero(other_than_run) / 8 : 8;
      if (count_ > 0 && run_len_ + lead > max_run_) return;
      const bool last_space = space >> 63;
      const std::uint64_t other_than_last = last_space ? ~space & kByteHighs : space;
      std::size_t run_len = static_cast<std::size_t>(std::countl_zero(other_than_last)) / 8;
      if (!other_than_last) run_len = (count_ > 0 && run_space_ == last_space) ? run_len_ + 8 : 8;
      if (run_len > max_run_) return;
      run_len_ = run_len, run_space_ = last_space, i_ += 8, count_ += 8;
    }
  }

  void one_character() {
    const std::size_t start = i_;
    const auto b = static_cast<unsigned char>(text_[i_]);
    bool space;
    if (b < 0x80) {
      space = table_[b] & kPySpace, ++i_;
    } else {
      const Utf8Step st = utf8_step(text_.substr(i_));
      space = st.kind == Utf8Step::kValid && (flags_of(table_, st.cp) & kPySpace);
      i_ += st.len;
    }
    run_len_ = (count_ != 0 && space == run_space_) ? run_len_ + 1 : 1;
    run_space_ = space;
    if (run_len_ > max_run_) {
      out_.push_back(text_.substr(part_start_, start - part_start_));
      part_start_ = start, run_len_ = 1;
    }
    ++count_;
  }

  std::string_view text_;
  std::size_t i_, part_start_, max_chars_, max_run_;
  std::size_t count_ = 0, run_len_ = 0;
  bool run_space_ = false;
  const std::uint8_t* table_;
  std::vector<std::string_view>& out_;
};

}  // namespace

std::vector<std::string_view> split_for_encoding(std::string_view text, std::size_t max_chars,
                                                 std::size_t max_run) {
  std::vector<std::string_view> out;
  if (text.empty()) return out;
  // A text has no more characters than bytes, so a short one is never cut.
  if (text.size() <= max_chars && text.size() <= max_run) {
    out.push_back(text);
    return out;
  }
  // Slices of max_chars characters; the run count starts afresh in each, as upstream.
  const std::uint8_t* table = flag_table();
  for (std::size_t i = 0; i < text.size();) {
    i = Cutter(text, i, max_chars, max_run, table, out).run();
  }
  return out;
}

PretokenScanner::PretokenScanner(std::string_view text) : s_(text), table_(flag_table()) {}

PretokenScanner::Char PretokenScanner::at_multibyte(std::size_t i) const {
  const Utf8Step st = utf8_step(s_.substr(i));
  // Ill-formed input breaks the caller's contract; a flagless byte still makes progress.
  if (st.kind != Utf8Step::kValid) return {0, st.len, 0xFFFD};
  return {flags_of(table_, st.cp), st.len, st.cp};
}

std::size_t PretokenScanner::run(std::size_t i, std::uint8_t mask) const {
  while (i < s_.size()) {
    const Char c = at(i);
    if (!(c.flags & mask)) break;
    i += c.len;
  }
  return i;
}

// Alternatives 2 (upper_first false: U* L+) and 3 (upper_first true: U+ L*) from `start`, after
// the optional leading character. Greedy U* followed by L+ backtracks into the U run when the
// character after it is not in L: the match then ends just after the last L character inside
// the run (an Lm, Lo or mark, which both classes hold).
std::size_t PretokenScanner::word(std::size_t start, bool upper_first) const {
  std::size_t i = start, last_lower_end = npos;
  while (i < s_.size()) {
    const Char c = at(i);
    if (!(c.flags & kUpper)) break;
    i += c.len;
    if (c.flags & kLower) last_lower_end = i;
  }
  std::size_t end;
  if (upper_first) {
    if (i == start) return npos;
    end = run(i, kLower);
  } else if (i < s_.size() && (at(i).flags & kLower)) {
    end = run(i, kLower);
  } else if (last_lower_end != npos) {
    end = last_lower_end;
  } else {
    return npos;
  }
  return end + contraction(end);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at i: its length, or 0. Simple case folding adds only U+017F
// (long s, which folds to s) to the ASCII letters.
std::size_t PretokenScanner::contraction(std::size_t i) const {
  if (i + 1 >= s_.size() || s_[i] != '\'') return 0;
  auto lower = [&](std::size_t k) -> char {
    if (k >= s_.size()) return 0;
    const char b = s_[k];
    return (b >= 'A' && b <= 'Z') ? static_cast<char>(b - 'A' + 'a') : b;
  };
  switch (lower(i + 1)) {
    case 's':
    case 't':
    case 'm':
    case 'd':
      return 2;
    case 'r':
    case 'v':
      return lower(i + 2) == 'e' ? 3 : 0;
    case 'l':
      return lower(i + 2) == 'l' ? 3 : 0;
    default:
      return s_.substr(i + 1, 2) == "\xC5\xBF" ? 3 : 0;  // U+017F
  }
}

// Alternative 5:  ?[^\s\p{L}\p{N}]+[\r\n]*
std::size_t PretokenScanner::punctuation(std::size_t pos) const {
  auto is_punct = [](const Char& c) { return !(c.flags & (kSpace | kLetter | kNumber)); };
  std::size_t i = pos;
  if (s_[i] == ' ') ++i;  // a space is not punctuation, so without it there is no match either
  if (i >= s_.size() || !is_punct(at(i))) return npos;
  while (i < s_.size()) {
    const Char c = at(i);
    if (!is_punct(c)) break;
    i += c.len;
  }
  while (i < s_.size() && is_newline_byte(s_[i])) ++i;
  return i;
}

// Alternatives 6-8 on a whitespace run: up to its last \r or \n if it has one; otherwise all
// of it at the end of the text; otherwise all but its last character when that leaves at least
// one (the look-ahead rule), else the single character.
std::size_t PretokenScanner::whitespace(std::size_t pos) const {
  std::size_t i = pos, last_start = pos, last_newline_end = npos;
  while (i < s_.size()) {
    const Char c = at(i);
    if (!(c.flags & kSpace)) break;
    last_start = i;
    i += c.len;
    if (c.flags & kNewline) last_newline_end = i;
  }
  if (i == pos) return pos + at(pos).len;  // unreachable: every other character matched earlier
  if (last_newline_end != npos) return last_newline_end;
  if (i == s_.size()) return i;
  return last_start > pos ? last_start : i;
}

// The common all-ASCII cases, decided without the general machinery: npos whenever a non-ASCII
// character could change the outcome (it might be a letter, number, mark or space).
std::size_t PretokenScanner::ascii_end_of(std::size_t pos) const {
  auto cls = [&](std::size_t i) {
    return i < s_.size() ? kAsciiClass[static_cast<unsigned char>(s_[i])] : kEnd;
  };
  auto skip = [&](std::size_t i, AsciiClass k) {
    while (cls(i) == k) ++i;
    return i;
  };
  const AsciiClass c = cls(pos), next = cls(pos + 1);
  const bool lead = c == kAsciiSpace || c == kAsciiPunct;
  if (c == kAsciiUpper || c == kAsciiLower ||
      (lead && (next == kAsciiUpper || next == kAsciiLower))) {
    // U* L+ when there are lower-case letters, else U+ (ASCII capitals are not in L).
    const std::size_t l = skip(skip(lead ? pos + 1 : pos, kAsciiUpper), kAsciiLower);
    if (cls(l) == kNonAscii) return npos;
    return l + contraction(l);
  }
  if (lead && next == kNonAscii) return npos;
  if (c == kAsciiDigit) {
    std::size_t e = pos + 1;
    while (e - pos < 3 && cls(e) == kAsciiDigit) ++e;
    if (e - pos < 3 && cls(e) == kNonAscii) return npos;
    return e;
  }
  if (c == kAsciiPunct || (s_[pos] == ' ' && next == kAsciiPunct)) {
    const std::size_t e = skip(pos + 1, kAsciiPunct);
    if (cls(e) == kNonAscii) return npos;
    return skip(e, kAsciiNewline);
  }
  std::size_t i = pos, last_newline_end = npos;
  for (AsciiClass k; (k = cls(i)) == kAsciiSpace || k == kAsciiNewline;) {
    if (k == kAsciiNewline) last_newline_end = i + 1;
    ++i;
  }
  if (cls(i) == kNonAscii) return npos;  // the run may go on with a non-ASCII space
  if (last_newline_end != npos) return last_newline_end;
  if (i == s_.size()) return i;
  return i - pos >= 2 ? i - 1 : i;
}

// The alternatives in the pattern's order; the first that matches wins.
std::size_t PretokenScanner::end_of(std::size_t pos) const {
  if (static_cast<unsigned char>(s_[pos]) < 0x80) {
    const std::size_t e = ascii_end_of(pos);
    if (e != npos) return e;
  }
  return general_end_of(pos);
}

std::size_t PretokenScanner::general_end_of(std::size_t pos) const {
  const Char c = at(pos);
  if (c.flags & kHan) return run(pos, kHan);
  // [^\r\n\p{L}\p{N}]? is greedy: with the leading character first, then without it (which
  // differs only when that character is a mark, as marks are in both letter classes).
  const bool lead = !(c.flags & (kLetter | kNumber | kNewline));
  for (const bool upper_first : {false, true}) {
    if (lead) {
      const std::size_t e = word(pos + c.len, upper_first);
      if (e != npos) return e;
    }
    const std::size_t e = word(pos, upper_first);
    if (e != npos) return e;
  }
  if (c.flags & kNumber) {
    std::size_t e = pos;
    for (int k = 0; k < 3 && e < s_.size(); ++k) {
      const Char d = at(e);
      if (!(d.flags & kNumber)) break;
      e += d.len;
    }
    return e;
  }
  const std::size_t e = punctuation(pos);
  return e != npos ? e : whitespace(pos);
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  std::vector<std::string_view> out;
  const PretokenScanner scan(text);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = scan.end_of(pos);
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

}  // namespace waste
