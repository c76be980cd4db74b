// Files written so that a crash leaves either the old file or the complete new one: write to a
// temporary name beside the target, fsync, rename, fsync the folder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace waste {

class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();  // removes the temporary file if commit() was not reached
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }
  uint64_t size() const { return written_; }
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

void write_file_atomic(const std::filesystem::path& target, std::string_view bytes);

// fsync of a directory, so that a rename inside it is durable.
void sync_dir(const std::filesystem::path& dir);

}  // namespace waste
