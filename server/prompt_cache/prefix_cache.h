// Snapshots of sessions at message boundaries, so a conversation that re-sends its history only
// prefills what is new. Memory-bounded, least recently used out first.
//
// Entries match on a key per position, not on token ids alone: an image position's id is the
// same <|media_pad|> for every image, so its key is a hash of the image (PromptImages::keys).
// Callers pass `media` keys for the positions they know (a prompt's); a position past them, or
// every position when none are given, is keyed by its token id.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/model/session.h"

namespace waste {

class PrefixCache {
 public:
  explicit PrefixCache(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // A copy of the longest snapshot whose keys are a proper prefix of `prompt`'s (at least one
  // prompt token is always left to compute, since its logits are needed).
  std::optional<Session> longest_prefix(std::span<const int32_t> prompt,
                                        std::span<const uint64_t> media = {});
  // Keeps a copy of `s`; an identical key history replaces the older entry.
  void put(const Session& s, std::span<const uint64_t> media = {});

  size_t size() const;
  uint64_t bytes() const;

 private:
  struct Entry {
    Session session;
    std::vector<uint64_t> keys;
  };

  mutable std::mutex mu_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  std::list<Entry> entries_;  // front = most recently used
};

// The key of each position of `tokens`: media[i] where given, else the id.
std::vector<uint64_t> position_keys(std::span<const int32_t> tokens,
                                    std::span<const uint64_t> media);

}  // namespace waste
