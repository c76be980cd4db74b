// Reading exactly a byte range of an open file, for the readers of containers, checkpoints and
// the vision tower.
#pragma once

#include <cstdint>
#include <string>

namespace waste {

// Reads n bytes at `off` into dst, retrying short reads and EINTR. Throws IoError naming `what`
// (a path) and the offset on a failed read or an early end of file.
void read_exact(int fd, void* dst, uint64_t n, uint64_t off, const std::string& what);

}  // namespace waste
