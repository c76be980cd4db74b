#include "engine/format/expert_bank.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "engine/base/error.h"
#include "engine/base/platform.h"

namespace waste {

namespace {

// Reads exactly n bytes at off; returns the count actually read (short at end of file).
size_t pread_full(int fd, uint8_t* buf, size_t n, uint64_t off, int* err) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, buf + got, n - got, (off_t)(off + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return got;
    }
    if (r == 0) break;
    got += (size_t)r;
  }
  *err = 0;
  return got;
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t n, bool zero) : n_(n) {
  size_t padded = (n + kDirectIoAlign - 1) / kDirectIoAlign * kDirectIoAlign;
  if (padded == 0) padded = kDirectIoAlign;
  p_ = static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlign, padded));
  if (!p_) fail<IoError>("out of memory allocating a {}-byte I/O buffer", n);
  if (zero) std::memset(p_, 0, padded);
}

AlignedBuffer::~AlignedBuffer() {
  std::free(p_);
}

ExpertBank::ExpertBank(const std::filesystem::path& path, const BankEntry& entry,
                       const RecordGeometry& g, bool direct, bool verify_crc)
    : path_(path.string()), entry_(entry), geom_(g), verify_crc_(verify_crc) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail<IoError>("{}: cannot open expert bank: {}", path_, std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || (uint64_t)st.st_size != entry.bytes) {
    uint64_t size = (uint64_t)st.st_size;
    ::close(fd_);
    fd_ = -1;
    fail("{}: file is {} bytes but manifest layers.\"{}\".bytes says {} (truncated or replaced?)",
         path_, size, entry.layer, entry.bytes);
  }
  if (!direct || g.stride % kDirectIoAlign != 0) return;
  int dfd = open_direct(path_);
  if (dfd < 0) return;
  AlignedBuffer probe(kDirectIoAlign);
  if (::pread(dfd, probe.data(), kDirectIoAlign, 0) == (ssize_t)kDirectIoAlign) {
    ::close(fd_);
    fd_ = dfd;
    direct_ = true;
  } else {
    ::close(dfd);
  }
  if (!direct_) advise_random_reads(fd_);
}

ExpertBank::~ExpertBank() {
  if (fd_ >= 0) ::close(fd_);
}

uint64_t ExpertBank::offset(int expert) const {
  if (expert < 0 || expert >= entry_.experts)
    fail<UsageError>("layer {}: expert id {} is out of range (0..{})", entry_.layer, expert,
                     entry_.experts - 1);
  return (uint64_t)expert * geom_.stride;
}

void ExpertBank::read(int expert, uint8_t* buf) const {
  int err = 0;
  size_t got = read_raw(expert, buf, &err);
  finish_read(expert, buf, got, err);
}

size_t ExpertBank::read_raw(int expert, uint8_t* buf, int* err) const {
  *err = 0;
  return pread_full(fd_, buf, geom_.stride, offset(expert), err);
}

void ExpertBank::finish_read(int expert, const uint8_t* buf, size_t got, int err) const {
  uint64_t off = offset(expert);
  if (err)
    fail<IoError>("expert {} of layer {}: read of {} bytes at offset {} of {} failed: {}", expert,
                  entry_.layer, geom_.stride, off, path_, std::strerror(err));
  if (got != geom_.stride)
    fail<IoError>("expert {} of layer {}: short read ({} of {} bytes at offset {} of {})", expert,
                  entry_.layer, got, geom_.stride, off, path_);
  check_record(buf, geom_, entry_.layer, expert, entry_.codebook_base, verify_crc_);
}

}  // namespace waste
