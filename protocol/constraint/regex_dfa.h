// A regular-expression subset compiled to a byte-level DFA, for JSON Schema `pattern` and
// `format` on strings that the constraint engine writes.
//
// Supported: literals (any UTF-8 character), `.`, escapes \d \D \w \W \s \S \n \r \t \f \v
// \uXXXX and escaped punctuation, classes [...] and [^...] with ASCII members and ranges, groups
// (...) and (?:...), alternation, quantifiers * + ? {n} {n,} {n,m} (a lazy `?` after them is
// accepted: it changes which match is found, not which strings match), ^ at the start of a
// branch and $ at its end. Patterns search like ECMA-262's RegExp.test: a branch without ^ may
// start anywhere, one without $ may end anywhere. Refused, with the construct named:
// backreferences, lookaround, \b, named groups, non-ASCII members of classes, anchors elsewhere.
// `.` and negated classes match any character except \n and \r (negated classes also match
// \n and \r unless listed), including multi-byte UTF-8 ones.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

// Which bytes a string may contain as written: inside a JSON string without escapes (no `"`,
// `\` or control characters), or raw text (no NUL).
enum class StringAlphabet { kJsonUnescaped, kRaw };

struct ByteDfa {
  int start = 0;
  std::vector<int32_t> next;       // state * 256 + byte -> state; -1: no transition
  std::vector<uint8_t> accepting;  // per state

  int states() const { return (int)accepting.size(); }
  int step(int state, uint8_t byte) const { return next[(size_t)state * 256 + byte]; }
};

// The subset construction's budget, in NFA states visited: about 10 ms of one core. A pattern
// whose DFA would grow past its state limit is refused at a small part of what reaching that
// limit costs (the fuzzer found ones that took 1.3 s); the largest schema in the tests needs
// about 7,000.
inline constexpr uint64_t kPatternWork = 1'000'000;

// Every state of the result can reach an accepting state and every transition stays inside the
// alphabet. Throws UsageError naming the unsupported construct, "pattern is too complex" past
// the size limits or `max_work`, or "pattern matches no string" when nothing in the alphabet
// matches.
ByteDfa compile_pattern(std::string_view pattern, StringAlphabet alphabet,
                        uint64_t max_work = kPatternWork);

// The strings both match, pruned as compile_pattern's results are; throws UsageError "pattern
// matches no string this engine can write" when they share none.
ByteDfa intersect_dfas(const ByteDfa& a, const ByteDfa& b);

// The strings of `a` without characters above U+FFFF (4-byte UTF-8), which count once in code
// points but twice in UTF-16 units: a length bound then means the same in both. Throws like
// intersect_dfas when nothing is left.
ByteDfa drop_supplementary(const ByteDfa& a);

// Whether `d` accepts all of `s`.
bool dfa_matches(const ByteDfa& d, std::string_view s);

// The regular expression (anchored) this engine uses for a JSON Schema `format`: date, time,
// date-time, email, uuid, uri. Empty for any other name.
std::string format_pattern(std::string_view format);

}  // namespace waste
