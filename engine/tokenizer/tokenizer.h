// The Kimi byte-level BPE tokenizer (tiktoken rank file + special tokens), exactly as the release's
// tokenization_kimi.py encodes: the 400,000 / 25,000-character cuts, Kimi's pre-tokenization
// pattern, then tiktoken rank merging per pre-token. Immutable after construction, so one
// instance serves all threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace waste {

using TokenId = int;

// A special token as listed in a container's specials.json.
struct SpecialToken {
  int id = 0;
  std::string text;
};

class Tokenizer {
 public:
  // `rank_file`: one line per token, "base64(bytes) SP rank", ranks dense from 0 (docs/FORMAT.md
  // §6). Every single byte must have a rank, so any input can be encoded. `specials` must not reuse
  // a rank's id. Like the release, every id between the ranks and the highest special that has
  // no name is registered as the special "<|reserved_token_ID|>". Throws FormatError naming the
  // file (and line) for an unreadable or malformed file and for a special that does not fit.
  Tokenizer(const std::filesystem::path& rank_file, const std::vector<SpecialToken>& specials);

  // Every byte goes through pre-tokenization and BPE: special-token strings stay ordinary text
  // (the injection-safe mode for all client text).
  std::vector<TokenId> encode_text(std::string_view text) const;
  // Special-token strings (leftmost, then longest) become their ids; the text between them is
  // encoded as by encode_text, each stretch on its own.
  std::vector<TokenId> encode_markup(std::string_view text) const;

  // Raw bytes, specials as their text. Not necessarily valid UTF-8 (see StreamDecoder).
  std::string decode(std::span<const TokenId> ids) const;
  // Throws UsageError for an id outside [0, vocab_size()).
  std::string_view token_bytes(TokenId id) const;

  // Ranks plus the special block.
  std::size_t vocab_size() const { return offsets_.size() - 1; }
  std::size_t rank_count() const { return n_ranks_; }
  std::optional<TokenId> find_special(std::string_view text) const;
  bool is_special(TokenId id) const {
    return id >= (TokenId)n_ranks_ && id < (TokenId)vocab_size();
  }
  // The rank whose bytes are exactly `bytes`.
  std::optional<TokenId> find_rank(std::string_view bytes) const;

  // The BPE of one pre-token (no pre-tokenization): appends its ids to `out`. Short pieces use
  // tiktoken's quadratic loop, long ones a heap with the same merge order (lowest rank first,
  // leftmost on ties); `how` forces one of them, for the test that they agree.
  enum class Merge { kAuto, kLinear, kHeap };
  void encode_piece(std::string_view piece, std::vector<TokenId>& out,
                    Merge how = Merge::kAuto) const;

 private:
  struct Slot {
    std::uint32_t id_plus_one;  // 0: empty
    std::uint32_t tag;          // high hash bits, to skip most byte comparisons
  };
  class Merger;

  std::vector<std::size_t> load_ranks(const std::filesystem::path& rank_file);
  void build_index(const std::filesystem::path& rank_file, const std::vector<std::size_t>& line_of);
  void add_specials(const std::filesystem::path& rank_file,
                    const std::vector<SpecialToken>& specials);
  std::int64_t rank_of(std::string_view bytes) const;  // -1 when absent
  void encode_piece(std::string_view piece, std::vector<TokenId>& out, Merger& m, Merge how) const;
  void encode_ordinary(std::string_view text, std::vector<TokenId>& out, Merger& m) const;
  void encode_markup_part(std::string_view text, std::vector<TokenId>& out, Merger& m) const;
  std::size_t special_at(std::string_view text, std::size_t pos, TokenId* id) const;

  std::size_t n_ranks_ = 0;
  std::string bytes_;                   // every token's bytes back to back, ranks then specials
  std::vector<std::uint32_t> offsets_;  // token id -> start in bytes_; one extra at the end
  std::vector<Slot> slots_;             // open-addressing index of the ranks by bytes
  std::uint64_t slot_mask_ = 0;
  struct TextHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, TextHash, std::equal_to<>> special_ids_;
  std::vector<std::size_t> special_lengths_;  // distinct, longest first
  bool special_first_byte_[256] = {};
};

// Turns a stream of ids into text that is always whole UTF-8 characters: push() returns the
// bytes of the characters completed so far and holds back a trailing sequence that may still
// be completed by the next token. An ill-formed subpart becomes U+FFFD as soon as it can no
// longer become valid, and a held incomplete sequence becomes U+FFFD at flush() (Python's
// decode(errors="replace") over the whole output gives the same text).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  std::string push(TokenId id);
  std::string flush();

 private:
  std::string drain(bool final);

  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace waste
