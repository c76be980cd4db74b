// Snapshots of sessions at message boundaries, so a conversation that re-sends its history only
// prefills what is new. Two tiers: memory (bounded, least recently used out first) and, when
// attached, disk (disk_prefix_cache.h), which every snapshot is also written to in the
// background and which survives restarts. A lookup takes the longer of the two tiers' matches,
// memory when they tie.
//
// Entries match on a key per position, not on token ids alone: an image position's id is the
// same <|media_pad|> for every image, so its key is a hash of the image (PromptImages::keys).
// Callers pass `media` keys for the positions they know (a prompt's); a position past them, or
// every position when none are given, is keyed by its token id.
//
// A partial snapshot (a prefill cut short, so that its retry resumes there) lies at no message
// boundary, so nothing but a longer run of the same prompt can use it: the memory tier keeps it
// only until a longer snapshot of the same positions arrives, so a request cancelled and retried
// several times holds one partial snapshot, not one per try. A snapshot restored from disk is
// treated so too (the disk does not record which were partial, and it keeps its own copy).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "engine/model/session.h"
#include "server/prompt_cache/disk_prefix_cache.h"

namespace waste {

struct MemoryCacheStats {
  uint64_t hits = 0, misses = 0, tokens_reused = 0, evictions = 0;
  uint64_t bytes = 0, snapshots = 0;
};

enum class SnapshotKind {
  kLasting,  // a message boundary or a reply's end: kept until the byte bound evicts it
  kPartial,  // a cut prefill: also dropped once a snapshot that extends it is kept
};

class PrefixCache {
 public:
  explicit PrefixCache(uint64_t max_bytes, std::unique_ptr<DiskPrefixCache> disk = nullptr)
      : max_bytes_(max_bytes), disk_(std::move(disk)) {}

  // A copy of the longest snapshot whose keys are a proper prefix of `prompt`'s (at least one
  // prompt token is always left to compute, since its logits are needed), from either tier.
  std::optional<Session> longest_prefix(std::span<const int32_t> prompt,
                                        std::span<const uint64_t> media = {});
  // Keeps a copy of `s` in memory (an identical key history replaces the older entry, and so
  // does any shorter partial snapshot it extends) and queues the same copy for the disk tier.
  void put(const Session& s, std::span<const uint64_t> media = {},
           SnapshotKind kind = SnapshotKind::kLasting);

  // Prefills under way, so that conversations running at once with the same preamble compute it
  // once: a prefill claims the snapshot points it will reach, and another whose prompt shares a
  // prefix up to such a point waits for that snapshot instead of computing the same positions
  // beside it.
  class Claim {
   public:
    Claim() = default;
    Claim(Claim&& o) noexcept : cache_(o.cache_), id_(o.id_) { o.cache_ = nullptr; }
    Claim& operator=(Claim&& o) noexcept;
    ~Claim();
    // The snapshot at `point` was kept, or will not be: its waiters look again.
    void reached(size_t point);

   private:
    friend class PrefixCache;
    Claim(PrefixCache* cache, uint64_t id) : cache_(cache), id_(id) {}
    PrefixCache* cache_ = nullptr;
    uint64_t id_ = 0;
  };
  // Claims the snapshot points (those past `have` and short of the prompt's end) of a prefill
  // of `prompt` that starts at `have` positions — unless another claim will snapshot a prefix of
  // this prompt longer than `have`: then waits until that snapshot is kept (or its prefill ends)
  // and returns nothing, and the caller looks the prompt up again and asks again.
  std::optional<Claim> claim(std::span<const int32_t> prompt, std::span<const uint64_t> media,
                             size_t have, std::span<const size_t> points);

  size_t size() const;
  uint64_t bytes() const;
  MemoryCacheStats memory_stats() const;
  // The disk tier, or null when there is none.
  DiskPrefixCache* disk() const { return disk_.get(); }

 private:
  struct Entry {
    std::shared_ptr<const Session> session;
    std::vector<uint64_t> keys;
    SnapshotKind kind = SnapshotKind::kLasting;
  };

  struct Claimed {
    std::vector<uint64_t> keys;  // the claiming prompt's
    std::vector<size_t> points;  // snapshot points not reached yet
  };
  void release(uint64_t id);

  // Into the memory tier only (see put() for what it replaces).
  void remember(std::shared_ptr<const Session> copy, std::vector<uint64_t> keys, SnapshotKind kind);

  mutable std::mutex mu_;
  uint64_t max_bytes_;
  MemoryCacheStats stats_;  // bytes and snapshots: see bytes_ and entries_
  uint64_t bytes_ = 0;
  std::list<Entry> entries_;  // front = most recently used
  std::map<uint64_t, Claimed> claims_;
  uint64_t next_claim_ = 1;
  std::condition_variable claims_cv_;  // a claim reached a point or ended
  std::unique_ptr<DiskPrefixCache> disk_;
};

// The key of each position of `tokens`: media[i] where given, else the id.
std::vector<uint64_t> position_keys(std::span<const int32_t> tokens,
                                    std::span<const uint64_t> media);

}  // namespace waste
