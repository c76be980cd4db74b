#include "server/prompt_cache/checked_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"

namespace waste {

namespace fs = std::filesystem;

void write_checked_file(const fs::path& target, CheckedHeader h,
                        std::span<const FilePiece> pieces) {
  StreamHash hash;
  h.payload_bytes = 0;
  for (const FilePiece& p : pieces) {
    if (p.bytes) hash.add(p.data, p.bytes);
    h.payload_bytes += p.bytes;
  }
  h.payload_hash = hash.digest();
  h.header_hash = h.own_hash();
  AtomicFile f(target);
  f.write(&h, sizeof h);
  for (const FilePiece& p : pieces)
    if (p.bytes) f.write(p.data, p.bytes);
  f.commit();
}

CheckedReader::CheckedReader(const fs::path& p) : path_(p) {
  fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail<IoError>("{}: cannot open: {}", p.string(), std::strerror(errno));
  off_t end = ::lseek(fd_, 0, SEEK_END);
  size_ = end < 0 ? 0 : (uint64_t)end;
}

CheckedReader::~CheckedReader() {
  ::close(fd_);
}

CheckedHeader CheckedReader::header(uint32_t magic, uint32_t version, uint64_t fingerprint) {
  CheckedHeader h;
  const std::string where = path_.string();
  if (size_ < sizeof h) fail("{}: truncated ({} bytes, no complete header)", where, size_);
  read_exact(fd_, &h, sizeof h, 0, where);
  at_ = sizeof h;
  if (h.magic != magic) fail("{}: not a cache file of this kind", where);
  if (h.header_hash != h.own_hash()) fail("{}: the header is damaged", where);
  if (h.version != version)
    fail("{}: format version {} (this build reads {})", where, h.version, version);
  if (h.fingerprint != fingerprint)
    fail("{}: written for another model (fingerprint {:016x}, this model {:016x})", where,
         h.fingerprint, fingerprint);
  if (size_ != sizeof h + h.payload_bytes)
    fail("{}: {} bytes, but its header describes {}", where, size_, sizeof h + h.payload_bytes);
  return h;
}

void CheckedReader::read(void* dst, size_t bytes) {
  if (bytes == 0) return;
  read_exact(fd_, dst, bytes, at_, path_.string());
  hash_.add(dst, bytes);
  at_ += bytes;
}

void CheckedReader::check_payload(const CheckedHeader& h) {
  if (at_ != size_ || hash_.digest() != h.payload_hash)
    fail("{}: the payload is damaged (its hash does not match the header)", path_.string());
}

}  // namespace waste
