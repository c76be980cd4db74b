#include "engine/tokenizer/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "engine/base/base64.h"
#include "engine/base/error.h"
#include "engine/tokenizer/pretokenizer.h"

namespace waste {

namespace {

constexpr std::uint32_t kNoRank = std::numeric_limits<std::uint32_t>::max();

// Above this many bytes a piece is merged with the heap: tiktoken's loop is quadratic, and the
// release's cuts still allow pre-tokens of 25,000 characters.
constexpr std::size_t kLinearMergeMax = 128;
// A rank-file token longer than this is refused as corrupt.
constexpr std::size_t kMaxTokenBytes = 1 << 16;

// Ids above the ranks that we are willing to name; the releases use 256.
constexpr std::int64_t kMaxSpecialBlock = 1 << 20;

std::uint64_t load64(const char* p) {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

std::uint64_t load32(const char* p) {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

std::uint64_t mix(std::uint64_t x) {
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 31;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 29);
}

// Most lookups are of pieces up to 8 bytes, which take a single mixing round.
std::uint64_t hash_bytes(std::string_view b) {
  const char* p = b.data();
  const std::size_t n = b.size();
  std::uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
  if (n >= 8) {
    for (std::size_t i = 0; i + 8 < n; i += 8) h = mix(h ^ load64(p + i));
    return mix(h ^ load64(p + n - 8));  // the last 8 bytes, overlapping the loop's
  }
  std::uint64_t w = 0;
  if (n >= 4) {
    w = load32(p) | load32(p + n - 4) << 32;
  } else if (n > 0) {
    w = static_cast<unsigned char>(p[0]) | static_cast<unsigned char>(p[n / 2]) << 8 |
        static_cast<std::uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16;
  }
  return mix(h ^ w);
}

bool parse_rank(std::string_view s, std::uint32_t& rank) {
  if (s.empty() || s.size() > 10) return false;
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (v > static_cast<std::uint64_t>(std::numeric_limits<TokenId>::max() - kMaxSpecialBlock))
    return false;
  rank = static_cast<std::uint32_t>(v);
  return true;
}

std::string read_whole_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot open the tokenizer rank file", p.string());
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: cannot read the tokenizer rank file", p.string());
  return std::move(ss).str();
}

// The fields of one rank-file line: "base64 rank", separated by spaces or tabs (Python's
// str.split() in tiktoken's loader), an optional trailing \r.
bool split_line(std::string_view line, std::string_view& token, std::string_view& rank) {
  auto is_blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  std::size_t i = 0;
  std::string_view fields[3];
  std::size_t n = 0;
  while (i < line.size()) {
    while (i < line.size() && is_blank(line[i])) ++i;
    if (i == line.size()) break;
    const std::size_t start = i;
    while (i < line.size() && !is_blank(line[i])) ++i;
    if (n == 3) return false;
    fields[n++] = line.substr(start, i - start);
  }
  if (n != 2) return false;
  token = fields[0], rank = fields[1];
  return true;
}

struct RankLine {
  std::uint32_t rank;
  std::uint32_t offset;  // of the decoded bytes in the scratch buffer
  std::uint32_t len;
  std::size_t line;
};

}  // namespace

// Scratch space for merging, kept across the pieces of one encode call.
class Tokenizer::Merger {
 public:
  explicit Merger(const Tokenizer& t) : t_(t) {}
  void linear(std::string_view piece, std::vector<TokenId>& out);
  void heap(std::string_view piece, std::vector<TokenId>& out);

 private:
  std::uint32_t rank(std::string_view p, std::size_t a, std::size_t b) const {
    const std::int64_t r = t_.rank_of(p.substr(a, b - a));
    return r < 0 ? kNoRank : static_cast<std::uint32_t>(r);
  }
  std::uint32_t pair_rank(std::string_view p, std::uint32_t i) const;

  const Tokenizer& t_;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> parts_;  // (start, rank of joining next)
  std::vector<std::uint32_t> next_, prev_, pair_;
  std::vector<std::uint64_t> heap_;  // (rank << 32 | start), smallest first
};

// tiktoken's _byte_pair_merge: parts[i].second is the rank of joining part i with part i+1.
void Tokenizer::Merger::linear(std::string_view p, std::vector<TokenId>& out) {
  parts_.clear();
  for (std::uint32_t i = 0; i + 1 < p.size(); ++i) parts_.emplace_back(i, rank(p, i, i + 2));
  parts_.emplace_back(static_cast<std::uint32_t>(p.size() - 1), kNoRank);
  parts_.emplace_back(static_cast<std::uint32_t>(p.size()), kNoRank);
  // Part i+1 is still present when these run, hence i+3.
  auto joined = [&](std::size_t i) {
    return i + 3 < parts_.size() ? rank(p, parts_[i].first, parts_[i + 3].first) : kNoRank;
  };
  for (;;) {
    std::uint32_t best = kNoRank;
    std::size_t at = 0;
    for (std::size_t i = 0; i + 1 < parts_.size(); ++i) {
      if (parts_[i].second < best) best = parts_[i].second, at = i;
    }
    if (best == kNoRank) break;
    if (at > 0) parts_[at - 1].second = joined(at - 1);
    parts_[at].second = joined(at);
    parts_.erase(parts_.begin() + static_cast<std::ptrdiff_t>(at + 1));
  }
  for (std::size_t i = 0; i + 1 < parts_.size(); ++i) {
    out.push_back(static_cast<TokenId>(rank(p, parts_[i].first, parts_[i + 1].first)));
  }
}

// The rank of joining the part that starts at byte i with the part after it.
std::uint32_t Tokenizer::Merger::pair_rank(std::string_view p, std::uint32_t i) const {
  const std::uint32_t j = next_[i];
  if (j >= p.size()) return kNoRank;
  return rank(p, i, next_[j]);
}

// The same merge order with a heap of (rank, start): popping the smallest key is picking the
// lowest rank, leftmost on ties. An entry is stale when its part's pair rank has changed since;
// a pair's bytes only grow, so a rank never comes back to a part once it has changed.
void Tokenizer::Merger::heap(std::string_view p, std::vector<TokenId>& out) {
  const auto n = static_cast<std::uint32_t>(p.size());
  next_.resize(n), prev_.resize(n), pair_.resize(n);
  for (std::uint32_t i = 0; i < n; ++i) next_[i] = i + 1, prev_[i] = i - 1;  // prev_[0] wraps
  heap_.clear();
  for (std::uint32_t i = 0; i < n; ++i) {
    pair_[i] = pair_rank(p, i);
    if (pair_[i] != kNoRank) heap_.push_back(std::uint64_t{pair_[i]} << 32 | i);
  }
  std::make_heap(heap_.begin(), heap_.end(), std::greater<>());
  auto push = [&](std::uint32_t i) {
    if (pair_[i] == kNoRank) return;
    heap_.push_back(std::uint64_t{pair_[i]} << 32 | i);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  };
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const std::uint64_t key = heap_.back();
    heap_.pop_back();
    const auto i = static_cast<std::uint32_t>(key);
    if (pair_[i] != key >> 32) continue;
    const std::uint32_t j = next_[i];
    next_[i] = next_[j];
    if (next_[j] < n) prev_[next_[j]] = i;
    pair_[j] = kNoRank;  // j is gone
    pair_[i] = pair_rank(p, i);
    push(i);
    if (i > 0) {
      pair_[prev_[i]] = pair_rank(p, prev_[i]);
      push(prev_[i]);
    }
  }
  for (std::uint32_t i = 0; i < n; i = next_[i]) {
    out.push_back(static_cast<TokenId>(rank(p, i, next_[i])));
  }
}

Tokenizer::Tokenizer(const std::filesystem::path& rank_file,
                     const std::vector<SpecialToken>& specials) {
  const std::vector<std::size_t> line_of = load_ranks(rank_file);
  build_index(rank_file, line_of);
  add_specials(rank_file, specials);
}

// Returns the line number of each rank, for the messages of later checks.
std::vector<std::size_t> Tokenizer::load_ranks(const std::filesystem::path& rank_file) {
  const std::string file = rank_file.string();
  const std::string text = read_whole_file(rank_file);
  std::string decoded;
  std::vector<RankLine> lines;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    const std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1, ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // as tiktoken
    std::string_view b64, rank_text;
    if (!split_line(line, b64, rank_text)) fail("{}:{}: expected \"base64 rank\"", file, line_no);
    const std::size_t before = decoded.size();
    try {
      const std::vector<uint8_t> bytes = base64_decode(b64, kMaxTokenBytes);
      decoded.append(bytes.begin(), bytes.end());
    } catch (const UsageError& e) {
      fail("{}:{}: bad base64 \"{}\" ({})", file, line_no, b64, e.what());
    }
    if (decoded.size() == before) fail("{}:{}: empty token", file, line_no);
    std::uint32_t rank;
    if (!parse_rank(rank_text, rank)) fail("{}:{}: bad rank \"{}\"", file, line_no, rank_text);
    lines.push_back({rank, static_cast<std::uint32_t>(before),
                     static_cast<std::uint32_t>(decoded.size() - before), line_no});
  }
  if (lines.empty()) fail("{}: no tokens", file);

  // Ranks are ids: each of 0..n-1 exactly once, in any line order.
  const std::size_t n = lines.size();
  std::vector<const RankLine*> by_rank(n, nullptr);
  for (const RankLine& l : lines) {
    if (l.rank >= n) {
      fail("{}:{}: rank {} leaves a gap: {} tokens must have the ranks 0..{}", file, l.line, l.rank,
           n, n - 1);
    }
    if (by_rank[l.rank]) {
      fail("{}:{}: duplicate rank {} (also on line {})", file, l.line, l.rank,
           by_rank[l.rank]->line);
    }
    by_rank[l.rank] = &l;
  }
  n_ranks_ = n;
  bytes_.reserve(decoded.size() + 8192);
  offsets_.reserve(n + 512);
  std::vector<std::size_t> line_of;
  line_of.reserve(n);
  for (const RankLine* l : by_rank) {
    offsets_.push_back(static_cast<std::uint32_t>(bytes_.size()));
    bytes_.append(decoded, l->offset, l->len);
    line_of.push_back(l->line);
  }
  offsets_.push_back(static_cast<std::uint32_t>(bytes_.size()));
  return line_of;
}

void Tokenizer::build_index(const std::filesystem::path& rank_file,
                            const std::vector<std::size_t>& line_of) {
  const std::string file = rank_file.string();
  std::size_t cap = 1024;
  while (cap < 3 * n_ranks_) cap *= 2;  // load factor at most 1/3
  slots_.assign(cap, Slot{0, 0});
  slot_mask_ = cap - 1;
  for (std::size_t id = 0; id < n_ranks_; ++id) {
    const std::string_view b(bytes_.data() + offsets_[id], offsets_[id + 1] - offsets_[id]);
    if (const std::int64_t other = rank_of(b); other >= 0) {
      fail("{}:{}: rank {} has the same bytes as rank {} (line {})", file, line_of[id], id, other,
           line_of[static_cast<std::size_t>(other)]);
    }
    const std::uint64_t h = hash_bytes(b);
    std::uint64_t s = h & slot_mask_;
    while (slots_[s].id_plus_one) s = (s + 1) & slot_mask_;
    slots_[s] = {static_cast<std::uint32_t>(id + 1), static_cast<std::uint32_t>(h >> 32)};
  }
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    if (rank_of(std::string_view(&c, 1)) < 0) {
      fail("{}: byte 0x{:02X} has no rank; a byte-level BPE file needs all 256 bytes", file, b);
    }
  }
}

void Tokenizer::add_specials(const std::filesystem::path& rank_file,
                             const std::vector<SpecialToken>& specials) {
  const std::string file = rank_file.string();
  std::int64_t top = static_cast<std::int64_t>(n_ranks_) - 1;
  for (const SpecialToken& s : specials) {
    if (s.id < 0) fail("{}: special token \"{}\" has a negative id {}", file, s.text, s.id);
    if (s.id < static_cast<std::int64_t>(n_ranks_)) {
      fail("{}: special token \"{}\" has id {}, which is already a rank of this file", file, s.text,
           s.id);
    }
    if (s.id - static_cast<std::int64_t>(n_ranks_) >= kMaxSpecialBlock) {
      fail("{}: special token \"{}\" has id {}, more than {} above the {} ranks", file, s.text,
           s.id, kMaxSpecialBlock, n_ranks_);
    }
    if (s.text.empty()) fail("{}: special token {} has an empty text", file, s.id);
    top = std::max<std::int64_t>(top, s.id);
  }
  std::vector<const std::string*> names(static_cast<std::size_t>(top + 1) - n_ranks_, nullptr);
  for (const SpecialToken& s : specials) {
    const std::string*& slot = names[static_cast<std::size_t>(s.id) - n_ranks_];
    if (slot) fail("{}: special id {} is given twice (\"{}\", \"{}\")", file, s.id, *slot, s.text);
    slot = &s.text;
    if (!special_ids_.emplace(s.text, s.id).second) {
      fail("{}: special token \"{}\" is given twice", file, s.text);
    }
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    const auto id = static_cast<TokenId>(n_ranks_ + k);
    const std::string name = names[k] ? *names[k] : fmt::format("<|reserved_token_{}|>", id);
    if (!names[k]) special_ids_.emplace(name, id);  // a given name of that text wins
    bytes_ += name;
    offsets_.push_back(static_cast<std::uint32_t>(bytes_.size()));
  }
  for (const auto& [text, id] : special_ids_) {
    special_lengths_.push_back(text.size());
    special_first_byte_[static_cast<unsigned char>(text[0])] = true;
  }
  std::sort(special_lengths_.begin(), special_lengths_.end(), std::greater<>());
  special_lengths_.erase(std::unique(special_lengths_.begin(), special_lengths_.end()),
                         special_lengths_.end());
}

namespace {
// Equal n-byte strings, with loads that cover all n bytes by overlapping rather than a call.
bool same_bytes(const char* a, const char* b, std::size_t n) {
  if (n >= 8) {
    if (n > 16) return std::memcmp(a, b, n) == 0;
    return load64(a) == load64(b) && load64(a + n - 8) == load64(b + n - 8);
  }
  if (n >= 4) return load32(a) == load32(b) && load32(a + n - 4) == load32(b + n - 4);
  return n == 0 || (a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1]);
}
}  // namespace

std::int64_t Tokenizer::rank_of(std::string_view b) const {
  const std::uint64_t h = hash_bytes(b);
  const auto tag = static_cast<std::uint32_t>(h >> 32);
  for (std::uint64_t s = h & slot_mask_;; s = (s + 1) & slot_mask_) {
    const Slot& slot = slots_[s];
    if (!slot.id_plus_one) return -1;
    if (slot.tag != tag) continue;
    const std::uint32_t id = slot.id_plus_one - 1;
    if (offsets_[id + 1] - offsets_[id] == b.size() &&
        same_bytes(bytes_.data() + offsets_[id], b.data(), b.size()))
      return id;
  }
}

std::optional<TokenId> Tokenizer::find_rank(std::string_view bytes) const {
  const std::int64_t r = rank_of(bytes);
  if (r < 0) return std::nullopt;
  return static_cast<TokenId>(r);
}

std::optional<TokenId> Tokenizer::find_special(std::string_view text) const {
  const auto it = special_ids_.find(text);
  if (it == special_ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::token_bytes(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= vocab_size()) {
    fail<UsageError>("token id {} is outside the vocabulary (0..{})", id, vocab_size() - 1);
  }
  const auto i = static_cast<std::size_t>(id);
  return std::string_view(bytes_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
  std::string out;
  for (TokenId id : ids) out += token_bytes(id);
  return out;
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out, Merge how) const {
  Merger m(*this);
  encode_piece(piece, out, m, how);
}

void Tokenizer::encode_piece(std::string_view piece, std::vector<TokenId>& out, Merger& m,
                             Merge how) const {
  if (piece.empty()) return;
  if (how == Merge::kAuto) {
    if (const std::int64_t r = rank_of(piece); r >= 0) {  // tiktoken's fast path
      out.push_back(static_cast<TokenId>(r));
      return;
    }
    how = piece.size() <= kLinearMergeMax ? Merge::kLinear : Merge::kHeap;
  }
  if (piece.size() == 1) {  // every byte has a rank (checked at load)
    out.push_back(static_cast<TokenId>(rank_of(piece)));
    return;
  }
  if (how == Merge::kLinear) {
    m.linear(piece, out);
  } else {
    m.heap(piece, out);
  }
}

void Tokenizer::encode_ordinary(std::string_view text, std::vector<TokenId>& out, Merger& m) const {
  const PretokenScanner scan(text);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = scan.end_of(pos);
    encode_piece(text.substr(pos, end - pos), out, m, Merge::kAuto);
    pos = end;
  }
}

// Input that is not UTF-8 cannot reach upstream: its encoder takes a Python str, and the HTTP
// layer in front of it decodes request bodies first. A str can hold lone surrogates from JSON
// "\ud800" escapes, which tiktoken turns into U+FFFD. We do the same for every ill-formed
// subpart, as Python's bytes.decode(errors="replace") would, so each such subpart encodes as
// U+FFFD and character counts for the cuts are those of the repaired text.
namespace {
std::string_view repair(std::string_view text, std::string& storage) {
  if (is_valid_utf8(text)) return text;
  storage = replace_invalid_utf8(text);
  return storage;
}
}  // namespace

std::vector<TokenId> Tokenizer::encode_text(std::string_view text) const {
  std::string storage;
  text = repair(text, storage);
  std::vector<TokenId> out;
  out.reserve(text.size() / 4 + 8);
  Merger m(*this);
  for (std::string_view part : split_for_encoding(text)) encode_ordinary(part, out, m);
  return out;
}

// Like upstream, the cuts come first and specials are looked for inside each part.
std::vector<TokenId> Tokenizer::encode_markup(std::string_view text) const {
  std::string storage;
  text = repair(text, storage);
  std::vector<TokenId> out;
  out.reserve(text.size() / 4 + 8);
  Merger m(*this);
  for (std::string_view part : split_for_encoding(text)) encode_markup_part(part, out, m);
  return out;
}

void Tokenizer::encode_markup_part(std::string_view text, std::vector<TokenId>& out,
                                   Merger& m) const {
  std::size_t start = 0;
  for (std::size_t pos = 0; pos < text.size(); ++pos) {
    if (!special_first_byte_[static_cast<unsigned char>(text[pos])]) continue;
    TokenId id;
    const std::size_t len = special_at(text, pos, &id);
    if (!len) continue;
    encode_ordinary(text.substr(start, pos - start), out, m);
    out.push_back(id);
    start = pos + len;
    pos = start - 1;
  }
  encode_ordinary(text.substr(start), out, m);
}

// The length of the longest special token at `pos`, or 0.
std::size_t Tokenizer::special_at(std::string_view text, std::size_t pos, TokenId* id) const {
  for (std::size_t len : special_lengths_) {
    if (len > text.size() - pos) continue;
    const auto it = special_ids_.find(text.substr(pos, len));
    if (it != special_ids_.end()) {
      *id = it->second;
      return len;
    }
  }
  return 0;
}

std::string StreamDecoder::push(TokenId id) {
  pending_ += tok_->token_bytes(id);
  return drain(false);
}

std::string StreamDecoder::flush() {
  return drain(true);
}

// Emits whole characters; an ill-formed subpart is final as soon as it is seen, so only a
// truncated sequence at the very end waits (until flush).
std::string StreamDecoder::drain(bool final) {
  std::string out;
  const std::string_view p(pending_);
  std::size_t i = 0;
  while (i < p.size()) {
    const Utf8Step st = utf8_step(p.substr(i));
    if (st.kind == Utf8Step::kTruncated && !final) break;
    if (st.kind == Utf8Step::kValid) {
      out.append(p.substr(i, st.len));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += st.len;
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace waste
