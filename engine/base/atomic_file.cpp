#include "engine/base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/base/error.h"

namespace waste {

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  tmp_ = target_;
  tmp_ += fmt::format(".tmp.{}", ::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail<IoError>("{}: cannot create: {}", tmp_.string(), std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail<IoError>("{}: write failed: {}", tmp_.string(), std::strerror(errno));
    p += w;
    n -= (size_t)w;
    written_ += (uint64_t)w;
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail<IoError>("{}: fsync failed: {}", tmp_.string(), std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    fail<IoError>("{}: rename failed: {}", target_.string(), std::strerror(e));
  }
  sync_dir(target_.parent_path().empty() ? "." : target_.parent_path());
}

void write_file_atomic(const std::filesystem::path& target, std::string_view bytes) {
  AtomicFile f(target);
  f.write(bytes);
  f.commit();
}

void sync_dir(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: some file systems refuse to open folders
  ::fsync(fd);
  ::close(fd);
}

}  // namespace waste
