// Reading exactly a byte range of an open file, for the readers of containers, checkpoints and
// the vision tower.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace waste {

// Reads n bytes at `off` into dst, retrying short reads and EINTR. Throws IoError naming `what`
// (a path) and the offset on a failed read or an early end of file.
void read_exact(int fd, void* dst, uint64_t n, uint64_t off, const std::string& what);

// Reads a whole small file, naming it in the error; more than `max_bytes` is refused.
std::string read_small_file(const std::filesystem::path& p, uint64_t max_bytes);

}  // namespace waste
