#include "engine/file_read.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace waste {

void read_exact(int fd, void* dst, uint64_t n, uint64_t off, const std::string& what) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, (off_t)off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      fail<IoError>("{}: read failed at offset {}: {}", what, off,
                    r < 0 ? std::strerror(errno) : "unexpected end of file");
    p += r;
    n -= (uint64_t)r;
    off += (uint64_t)r;
  }
}

}  // namespace waste
