// The files the daemon keeps across restarts (prompt snapshots, expert usage) in one checked
// shape: a 64-byte header (magic, version, the model's content fingerprint, two counts and a key
// hash of the kind's choosing, the payload's size and XXH3, and an XXH3 of the header itself),
// then the payload. Written atomically; a reader refuses, naming the file and the reason, one
// that is truncated, damaged, of another kind or version, or written for another model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "engine/base/hash.h"

namespace waste {

struct CheckedHeader {
  uint32_t magic = 0;
  uint32_t version = 0;
  uint64_t fingerprint = 0;
  int64_t a = 0, b = 0;  // counts, as the file's kind defines them
  uint64_t key_hash = 0;
  uint64_t payload_bytes = 0;  // set by write_checked_file
  uint64_t payload_hash = 0;   // set by write_checked_file
  uint64_t header_hash = 0;    // of the bytes before it; set by write_checked_file

  uint64_t own_hash() const { return hash64(this, offsetof(CheckedHeader, header_hash)); }
};
static_assert(sizeof(CheckedHeader) == 64);

// One piece of a payload, written and hashed in order without first gathering it.
struct FilePiece {
  const void* data;
  size_t bytes;
};

template <typename T>
FilePiece piece(const std::vector<T>& v, size_t from = 0, size_t n = SIZE_MAX) {
  n = std::min(n, v.size() - from);
  return {v.data() + from, n * sizeof(T)};
}

// Atomic (temporary name, fsync, rename, fsync of the folder); IoError on failure.
void write_checked_file(const std::filesystem::path& target, CheckedHeader h,
                        std::span<const FilePiece> pieces);

// An open file read from its start, every payload byte hashed on the way.
class CheckedReader {
 public:
  explicit CheckedReader(const std::filesystem::path& p);  // IoError when it cannot be opened
  ~CheckedReader();
  CheckedReader(const CheckedReader&) = delete;
  CheckedReader& operator=(const CheckedReader&) = delete;

  // The header, after every check it can pass alone; FormatError otherwise.
  CheckedHeader header(uint32_t magic, uint32_t version, uint64_t fingerprint);
  void read(void* dst, size_t bytes);
  template <typename T>
  void read(std::vector<T>& v, size_t from, size_t n) {
    read(v.data() + from, n * sizeof(T));
  }
  // After the whole payload: its hash must be the header's.
  void check_payload(const CheckedHeader& h);
  uint64_t size() const { return size_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0, at_ = 0;
  StreamHash hash_;
};

}  // namespace waste
