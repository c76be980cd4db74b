// What happens to text before byte-pair merging: UTF-8 checking and repair, the release's cuts of
// long inputs, and Kimi's tiktoken pre-tokenization pattern (docs/PROMPT_FORMAT.md §1) as a
// hand-written scanner. The scanner reproduces the regex match for match, with Unicode properties
// from ICU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace waste {

// One step of UTF-8 decoding at the front of `bytes`, by Unicode's "maximal subpart" rule (the
// rule of Python's bytes.decode(errors="replace")): a valid character, an ill-formed subpart that
// can never become valid (one U+FFFD), or a prefix of a valid character cut off by the end.
struct Utf8Step {
  enum Kind : std::uint8_t { kValid, kInvalid, kTruncated };
  Kind kind;
  std::uint8_t len;  // bytes the step covers (1..4)
  char32_t cp;       // the code point when kValid
};
Utf8Step utf8_step(std::string_view bytes);  // bytes must not be empty

bool is_valid_utf8(std::string_view bytes);

// Each ill-formed subpart, and a truncated sequence at the end, becomes U+FFFD.
std::string replace_invalid_utf8(std::string_view bytes);

// The cuts tokenization_kimi.py makes before tiktoken sees the text: slices of 400,000
// characters, each cut again so that no run of whitespace or of non-whitespace (Python's
// str.isspace) is longer than 25,000 characters. Each part is pre-tokenized on its own, so the
// cuts change token ids at those places. `text` must be valid UTF-8; characters are code points.
inline constexpr std::size_t kMaxEncodeChars = 400'000;
inline constexpr std::size_t kMaxRunChars = 25'000;
std::vector<std::string_view> split_for_encoding(std::string_view text,
                                                 std::size_t max_chars = kMaxEncodeChars,
                                                 std::size_t max_run = kMaxRunChars);

// Finds the pre-tokens of one text (valid UTF-8). Matches are contiguous, non-empty and cover
// the whole text, because every character starts a match of some alternative.
class PretokenScanner {
 public:
  explicit PretokenScanner(std::string_view text);
  // The end of the pre-token that starts at byte `pos` (pos < text size).
  std::size_t end_of(std::size_t pos) const;

 private:
  struct Char {
    std::uint8_t flags;
    std::uint8_t len;
    char32_t cp;
  };
  Char at(std::size_t i) const {
    const auto b = static_cast<unsigned char>(s_[i]);
    if (b < 0x80) return {table_[b], 1, b};
    return at_multibyte(i);
  }
  Char at_multibyte(std::size_t i) const;
  std::size_t ascii_end_of(std::size_t pos) const;
  std::size_t general_end_of(std::size_t pos) const;
  std::size_t run(std::size_t i, std::uint8_t mask) const;
  std::size_t word(std::size_t start, bool upper_first) const;
  std::size_t contraction(std::size_t i) const;
  std::size_t punctuation(std::size_t pos) const;
  std::size_t whitespace(std::size_t pos) const;

  std::string_view s_;
  const std::uint8_t* table_;
};

// All pre-tokens of `text` in order; they concatenate to `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

}  // namespace waste
