#include "engine/format/content_fingerprint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/base/error.h"
#include "engine/base/hash.h"

namespace waste {
namespace {

// The bytes a bank file starts with that are hashed: its first page, where a converter or a
// synthesiser writing a different model differs first, with the file's size.
constexpr uint64_t kBankHeadBytes = 4096;

// Hashes the name, the size and up to `limit` leading bytes of `p`; a missing file hashes as
// absent, since optional files (specials, vision) change the model by being there.
void add_file(StreamHash& h, const std::filesystem::path& p, uint64_t limit) {
  h.add(p.filename().string());
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return h.add_u64(~uint64_t{0});
    fail<IoError>("{}: cannot open: {}", p.string(), std::strerror(errno));
  }
  std::vector<char> buf(8 << 20);
  uint64_t total = 0;
  while (total < limit) {
    ssize_t n = ::read(fd, buf.data(), (size_t)std::min<uint64_t>(buf.size(), limit - total));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      fail<IoError>("{}: read failed: {}", p.string(), std::strerror(e));
    }
    if (n == 0) break;
    h.add(buf.data(), (size_t)n);
    total += (uint64_t)n;
  }
  off_t size = ::lseek(fd, 0, SEEK_END);
  ::close(fd);
  h.add_u64((uint64_t)size);
}

}  // namespace

uint64_t content_fingerprint(const Container& c) {
  StreamHash h;
  const auto& dir = c.dir();
  const uint64_t all = ~uint64_t{0};
  for (const char* name : {"manifest.json", "trunk.bin", "codebooks.bin", "tokenizer.model",
                           "specials.json", "vision.json"})
    add_file(h, dir / name, all);
  for (const auto& [layer, bank] : c.manifest().banks) add_file(h, dir / bank.file, kBankHeadBytes);
  return h.digest();
}

}  // namespace waste
