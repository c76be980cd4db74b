#include "server/prompt_cache/snapshot_file.h"

#include "engine/base/error.h"
#include "engine/base/hash.h"
#include "server/prompt_cache/checked_file.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSnapMagic = 0x53435057;  // "WPCS"
constexpr uint32_t kRowsMagic = 0x52435057;  // "WPCR"
// Of both kinds. 2: states from the expert arithmetic of docs/FORMAT.md §8.2 (summed weights);
// a version 1 state came from lookup tables. 3: trunk rows with one accumulator per output
// (kernels_body.h). An older state would not match a recomputation bit for bit.
constexpr uint32_t kVersion = 3;

bool is_mla(const Session& s, size_t l) {
  return s.kda[l].S.empty();
}

}  // namespace

std::string RowSegment::file_name() const {
  return fmt::format("{:016x}-{}-{}.rows", key_hash, start, end);
}

std::string SnapshotInfo::file_name() const {
  return fmt::format("{:016x}-{}.snap", key_hash, n_tokens);
}

std::vector<uint64_t> prefix_hashes(std::span<const uint64_t> keys) {
  std::vector<uint64_t> h(keys.size() + 1, 0);
  for (size_t i = 0; i < keys.size(); i++) h[i + 1] = chain_hash(h[i], keys[i]);
  return h;
}

void write_snapshot_file(const fs::path& dir, uint64_t fingerprint, const Session& s,
                         std::span<const uint64_t> keys, const SnapshotInfo& info) {
  if (keys.size() != s.tokens.size() || info.n_tokens != s.pos())
    fail<UsageError>("a snapshot's keys must match its tokens");
  CheckedHeader h;
  h.magic = kSnapMagic;
  h.version = kVersion;
  h.fingerprint = fingerprint;
  h.a = info.n_tokens;
  h.b = (int64_t)info.segments.size();
  h.key_hash = info.key_hash;
  std::vector<FilePiece> pieces = {
      {info.segments.data(), info.segments.size() * sizeof(RowSegment)},
      {keys.data(), keys.size_bytes()},
      piece(s.tokens)};
  for (size_t l = 0; l < s.kda.size(); l++) {
    pieces.push_back(piece(s.kda[l].S));
    pieces.push_back(piece(s.kda[l].conv));
  }
  write_checked_file(dir / info.file_name(), h, pieces);
}

void write_rows_file(const fs::path& dir, uint64_t fingerprint, const Session& s,
                     const RowSegment& seg) {
  if (seg.start < 0 || seg.start >= seg.end || seg.end > s.pos())
    fail<UsageError>("row segment [{}, {}) is outside the session's {} positions", seg.start,
                     seg.end, s.pos());
  CheckedHeader h;
  h.magic = kRowsMagic;
  h.version = kVersion;
  h.fingerprint = fingerprint;
  h.a = seg.start;
  h.b = seg.end;
  h.key_hash = seg.key_hash;
  std::vector<FilePiece> pieces;
  for (size_t l = 0; l < s.mla.size(); l++) {
    if (!is_mla(s, l)) continue;
    const size_t width = (size_t)s.latent_width();
    pieces.push_back(
        piece(s.mla[l].latents, (size_t)seg.start * width, (size_t)(seg.end - seg.start) * width));
  }
  write_checked_file(dir / seg.file_name(), h, pieces);
}

SnapshotInfo read_snapshot_info(const fs::path& file, uint64_t fingerprint) {
  CheckedReader r(file);
  CheckedHeader h = r.header(kSnapMagic, kVersion, fingerprint);
  SnapshotInfo info;
  info.n_tokens = h.a;
  info.key_hash = h.key_hash;
  if (h.a <= 0 || h.b <= 0 || (uint64_t)h.b > h.payload_bytes / sizeof(RowSegment))
    fail("{}: holds {} tokens in {} segments, which cannot be", file.string(), h.a, h.b);
  info.segments.resize((size_t)h.b);
  r.read(info.segments, 0, info.segments.size());
  int64_t at = 0;
  for (const RowSegment& g : info.segments) {
    if (g.start != at || g.end <= g.start)
      fail("{}: its row segments do not tile its positions", file.string());
    at = g.end;
  }
  if (at != info.n_tokens) fail("{}: its row segments do not tile its positions", file.string());
  return info;
}

void read_snapshot(const fs::path& file, uint64_t fingerprint, const SnapshotInfo& info,
                   std::span<const uint64_t> keys, Session& s, fs::path* bad_file,
                   uint64_t* bytes_read) {
  *bad_file = file;
  const size_t n = (size_t)info.n_tokens;
  if (keys.size() != n)
    fail<UsageError>("{}: asked for {} keys of {}", file.string(), keys.size(), n);
  if (info.n_tokens > s.ctx())
    fail("{}: holds {} positions but a session holds {}", file.string(), n, s.ctx());
  CheckedReader r(file);
  CheckedHeader h = r.header(kSnapMagic, kVersion, fingerprint);
  if (h.a != info.n_tokens || h.key_hash != info.key_hash || h.b != (int64_t)info.segments.size())
    fail("{}: changed since the cache was indexed", file.string());
  std::vector<RowSegment> segments(info.segments.size());
  r.read(segments, 0, segments.size());
  if (segments != info.segments) fail("{}: changed since the cache was indexed", file.string());
  std::vector<uint64_t> stored(n);
  r.read(stored, 0, n);
  s.tokens.resize(n);
  r.read(s.tokens, 0, n);
  for (size_t l = 0; l < s.kda.size(); l++) {
    r.read(s.kda[l].S, 0, s.kda[l].S.size());
    r.read(s.kda[l].conv, 0, s.kda[l].conv.size());
  }
  r.check_payload(h);
  *bytes_read += r.size();
  if (!std::equal(stored.begin(), stored.end(), keys.begin()))
    fail("{}: holds another token history under the same hash", file.string());
  for (int32_t t : s.tokens)
    if (t < 0 || t >= s.vocab())
      fail("{}: token id {} in the history is out of range", file.string(), t);
  const size_t width = (size_t)s.latent_width();
  for (size_t l = 0; l < s.mla.size(); l++)
    if (is_mla(s, l)) s.mla[l].latents.resize(n * width);
  for (const RowSegment& g : info.segments) {
    *bad_file = file.parent_path() / g.file_name();
    CheckedReader rows(*bad_file);
    CheckedHeader rh = rows.header(kRowsMagic, kVersion, fingerprint);
    if (rh.a != g.start || rh.b != g.end || rh.key_hash != g.key_hash)
      fail("{}: holds other rows than its name says", bad_file->string());
    for (size_t l = 0; l < s.mla.size(); l++)
      if (is_mla(s, l))
        rows.read(s.mla[l].latents, (size_t)g.start * width, (size_t)(g.end - g.start) * width);
    rows.check_payload(rh);
    *bytes_read += rows.size();
  }
}

}  // namespace waste
