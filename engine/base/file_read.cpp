#include "engine/base/file_read.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/base/error.h"

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

std::string read_small_file(const std::filesystem::path& p, uint64_t max_bytes) {
  std::error_code ec;
  uint64_t size = std::filesystem::file_size(p, ec);
  if (ec) fail<IoError>("{}: cannot read: {}", p.string(), ec.message());
  if (size > max_bytes)
    fail("{}: {} bytes is more than the {} allowed", p.string(), size, max_bytes);
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  if (!f) fail<IoError>("{}: cannot read", p.string());
  return ss.str();
}

}  // namespace waste
