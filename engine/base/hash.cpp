#include "engine/base/hash.h"

#include <xxhash.h>

#include <new>

namespace waste {

uint64_t hash64(const void* data, size_t n, uint64_t seed) {
  return XXH3_64bits_withSeed(data, n, seed);
}

uint64_t chain_hash(uint64_t h, uint64_t value) {
  return XXH3_64bits_withSeed(&value, sizeof value, h);
}

StreamHash::StreamHash(uint64_t seed) : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  XXH3_64bits_reset_withSeed(static_cast<XXH3_state_t*>(state_), seed);
}

StreamHash::~StreamHash() {
  XXH3_freeState(static_cast<XXH3_state_t*>(state_));
}

void StreamHash::add(const void* data, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}

uint64_t StreamHash::digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace waste
