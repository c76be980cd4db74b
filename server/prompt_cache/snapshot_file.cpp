#include "server/prompt_cache/snapshot_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/base/hash.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

constexpr uint32_t kSnapMagic = 0x53435057;  // "WPCS"
constexpr uint32_t kRowsMagic = 0x52435057;  // "WPCR"
constexpr uint32_t kVersion = 1;

struct FileHeader {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t fingerprint = 0;
  int64_t a = 0;  // .snap: tokens; .rows: first position
  int64_t b = 0;  // .snap: segments; .rows: end position
  uint64_t key_hash = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_hash = 0;
  uint64_t header_hash = 0;  // of the bytes before it

  uint64_t own_hash() const { return hash64(this, offsetof(FileHeader, header_hash)); }
};
static_assert(sizeof(FileHeader) == 64);

// One piece of a payload, written and hashed in order without first gathering it.
struct Piece {
  const void* data;
  size_t bytes;
};

template <typename T>
Piece piece(const std::vector<T>& v, size_t from = 0, size_t n = SIZE_MAX) {
  n = std::min(n, v.size() - from);
  return {v.data() + from, n * sizeof(T)};
}

void write_file(const fs::path& target, FileHeader h, const std::vector<Piece>& pieces) {
  StreamHash hash;
  h.payload_bytes = 0;
  for (const Piece& p : pieces) {
    if (p.bytes) hash.add(p.data, p.bytes);
    h.payload_bytes += p.bytes;
  }
  h.version = kVersion;
  h.payload_hash = hash.digest();
  h.header_hash = h.own_hash();
  AtomicFile f(target);
  f.write(&h, sizeof h);
  for (const Piece& p : pieces)
    if (p.bytes) f.write(p.data, p.bytes);
  f.commit();
}

// The checks every file's header passes before its payload is trusted.
void check_header(const FileHeader& h, uint32_t magic, uint64_t fingerprint, uint64_t file_bytes,
                  const fs::path& where) {
  if (file_bytes < sizeof h)
    fail("{}: truncated ({} bytes, no complete header)", where.string(), file_bytes);
  if (h.magic != magic) fail("{}: not a prompt-cache file of this kind", where.string());
  if (h.header_hash != h.own_hash()) fail("{}: the header is damaged", where.string());
  if (h.version != kVersion)
    fail("{}: format version {} (this build reads {})", where.string(), h.version, kVersion);
  if (h.fingerprint != fingerprint)
    fail("{}: written for another model (fingerprint {:016x}, this model {:016x})", where.string(),
         h.fingerprint, fingerprint);
  if (file_bytes != sizeof h + h.payload_bytes)
    fail("{}: {} bytes, but its header describes {}", where.string(), file_bytes,
         sizeof h + h.payload_bytes);
}

// An open file read from its start, every payload byte hashed on the way.
class FileReader {
 public:
  explicit FileReader(const fs::path& p) : path_(p) {
    fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail<IoError>("{}: cannot open: {}", p.string(), std::strerror(errno));
    off_t end = ::lseek(fd_, 0, SEEK_END);
    size_ = end < 0 ? 0 : (uint64_t)end;
  }
  ~FileReader() { ::close(fd_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  FileHeader header(uint32_t magic, uint64_t fingerprint) {
    FileHeader h;
    if (size_ >= sizeof h) read_exact(fd_, &h, sizeof h, 0, path_.string());
    check_header(h, magic, fingerprint, size_, path_);
    at_ = sizeof h;
    return h;
  }
  void read(void* dst, size_t bytes) {
    if (bytes == 0) return;
    read_exact(fd_, dst, bytes, at_, path_.string());
    hash_.add(dst, bytes);
    at_ += bytes;
  }
  template <typename T>
  void read(std::vector<T>& v, size_t from, size_t n) {
    read(v.data() + from, n * sizeof(T));
  }
  // After the whole payload: its hash must be the header's.
  void check_payload(const FileHeader& h) {
    if (at_ != size_ || hash_.digest() != h.payload_hash)
      fail("{}: the payload is damaged (its hash does not match the header)", path_.string());
  }
  uint64_t size() const { return size_; }

 private:
  fs::path path_;
  int fd_ = -1;
  uint64_t size_ = 0, at_ = 0;
  StreamHash hash_;
};

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
  FileHeader h;
  h.magic = kSnapMagic;
  h.fingerprint = fingerprint;
  h.a = info.n_tokens;
  h.b = (int64_t)info.segments.size();
  h.key_hash = info.key_hash;
  std::vector<Piece> pieces = {{info.segments.data(), info.segments.size() * sizeof(RowSegment)},
                               {keys.data(), keys.size_bytes()},
                               piece(s.tokens)};
  for (size_t l = 0; l < s.kda.size(); l++) {
    pieces.push_back(piece(s.kda[l].S));
    pieces.push_back(piece(s.kda[l].conv));
  }
  write_file(dir / info.file_name(), h, pieces);
}

void write_rows_file(const fs::path& dir, uint64_t fingerprint, const Session& s,
                     const RowSegment& seg) {
  if (seg.start < 0 || seg.start >= seg.end || seg.end > s.pos())
    fail<UsageError>("row segment [{}, {}) is outside the session's {} positions", seg.start,
                     seg.end, s.pos());
  FileHeader h;
  h.magic = kRowsMagic;
  h.fingerprint = fingerprint;
  h.a = seg.start;
  h.b = seg.end;
  h.key_hash = seg.key_hash;
  std::vector<Piece> pieces;
  for (size_t l = 0; l < s.mla.size(); l++) {
    if (!is_mla(s, l)) continue;
    const size_t width = (size_t)s.latent_width();
    pieces.push_back(
        piece(s.mla[l].latents, (size_t)seg.start * width, (size_t)(seg.end - seg.start) * width));
  }
  write_file(dir / seg.file_name(), h, pieces);
}

SnapshotInfo read_snapshot_info(const fs::path& file, uint64_t fingerprint) {
  FileReader r(file);
  FileHeader h = r.header(kSnapMagic, fingerprint);
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
  FileReader r(file);
  FileHeader h = r.header(kSnapMagic, fingerprint);
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
    FileReader rows(*bad_file);
    FileHeader rh = rows.header(kRowsMagic, fingerprint);
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
