// Fast non-cryptographic 64-bit hashing (XXH3, from Debian's libxxhash): checksums of files we
// write, fingerprints of the files a model is made of, and hashes of token histories. Nothing
// here defends against an adversary; it tells a damaged or foreign file from the right one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace waste {

uint64_t hash64(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t hash64(std::string_view s, uint64_t seed = 0) {
  return hash64(s.data(), s.size(), seed);
}

// The hash of a sequence extended by one 64-bit value: chain_hash(chain_hash(0, a), b) is the
// hash of [a, b]. Every prefix of a sequence has its hash on the way to the whole one.
uint64_t chain_hash(uint64_t h, uint64_t value);

// Incremental hash64 of a stream of bytes fed in pieces.
class StreamHash {
 public:
  explicit StreamHash(uint64_t seed = 0);
  ~StreamHash();
  StreamHash(const StreamHash&) = delete;
  StreamHash& operator=(const StreamHash&) = delete;

  void add(const void* data, size_t n);
  void add(std::string_view s) { add(s.data(), s.size()); }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
  uint64_t digest() const;

 private:
  void* state_;
};

}  // namespace waste
