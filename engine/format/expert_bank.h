// One layer's bank file of expert records, read with one aligned direct read per expert.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/format/expert_record.h"

namespace waste {

class ExpertBank {
 public:
  // Opens the bank and checks its size against the manifest. With `direct`, bypasses the page
  // cache when the file system allows it (a probe read decides; see direct_io()).
  ExpertBank(const std::filesystem::path& path, const BankEntry& entry, const RecordGeometry& g,
             bool direct, bool verify_crc);
  ~ExpertBank();
  ExpertBank(const ExpertBank&) = delete;
  ExpertBank& operator=(const ExpertBank&) = delete;

  // Reads record `expert` into `buf` (stride bytes, 4096-aligned) and checks it. Throws IoError on
  // a failed or short read and FormatError on a bad record, naming layer and expert.
  void read(int expert, uint8_t* buf) const;
  // The read alone: the bytes that arrived, with the errno of a failure in `*err` (0 if none).
  // finish_read() then checks them.
  size_t read_raw(int expert, uint8_t* buf, int* err) const;

  // For readers that issue the I/O themselves (an AsyncReader): where record `expert` lies, and the
  // same checks read() makes once `got` bytes arrived (or errno `err` came back).
  int fd() const { return fd_; }
  uint64_t offset(int expert) const;
  void finish_read(int expert, const uint8_t* buf, size_t got, int err) const;

  const RecordGeometry& geometry() const { return geom_; }
  const BankEntry& entry() const { return entry_; }
  bool direct_io() const { return direct_; }
  uint64_t stride() const { return geom_.stride; }

 private:
  std::string path_;
  BankEntry entry_;
  RecordGeometry geom_;
  int fd_ = -1;
  bool direct_ = false;
  bool verify_crc_ = false;
};

// A heap buffer aligned for direct I/O.
struct AlignedBuffer {
  // `zero` = false leaves the bytes as the allocator gives them (for buffers a read fills).
  explicit AlignedBuffer(size_t n, bool zero = true);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() { return p_; }
  const uint8_t* data() const { return p_; }
  size_t size() const { return n_; }

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace waste
