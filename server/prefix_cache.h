// Snapshots of sessions at message boundaries, so a conversation that re-sends its history only
// prefills what is new. Memory-bounded, least recently used out first.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>

#include "engine/session.h"

namespace waste {

class PrefixCache {
 public:
  explicit PrefixCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // A copy of the longest snapshot whose tokens are a proper prefix of `prompt` (at least one
  // prompt token is always left to compute, since its logits are needed).
  std::optional<Session> longest_prefix(std::span<const int32_t> prompt);
  // Keeps a copy of `s`; an identical token history replaces the older entry.
  void put(const Session& s);

  size_t size() const;
  uint64_t bytes() const;

 private:
  mutable std::mutex mu_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::list<Session> entries_;  // front = most recently used
};

}  // namespace waste
