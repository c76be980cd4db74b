// The bookkeeping of the expert cache: which (layer, expert) record sits in which slot, which
// slots may not be evicted, and the replacement policy. No buffers and no I/O here, so the
// policy simulator replays routing traces through exactly the code the engine runs.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace waste {

enum class CachePolicy {
  kLru,   // least recently used
  kLfru,  // the original's: sample 16 slots, evict the fewest hits, then the oldest
  kLfu,   // fewest uses, counted across evictions (a record's history outlives its slot)
  kLrfu,  // uses weighted by recency (each use's weight halves every `half_life` accesses),
          // counted across evictions; between LFU (infinite half-life) and LRU (zero)
};

// kLrfu's half-life in tokens: chosen by replaying the Kimi-Linear trace (docs/PERFORMANCE.md).
constexpr double kLrfuHalfLifeTokens = 5;

const char* policy_name(CachePolicy p);
CachePolicy parse_policy(const std::string& name);  // throws UsageError naming the value

class ExpertCache {
 public:
  // `half_life` (accesses) matters only for kLrfu; callers pass a few tokens' worth.
  ExpertCache(int n_slots, CachePolicy policy, double half_life = 1000);

  static uint32_t key(int layer, int expert) { return (uint32_t)layer << 16 | (uint32_t)expert; }

  int n_slots() const { return (int)slots_.size(); }
  // Slot holding `key`, or -1. Does not count as a use.
  int find(uint32_t key) const;
  // Records a use of a resident slot (a demand hit or the first demand of a prefetched one).
  void touch(int slot);
  // Picks a slot for `key` (a free one, else the policy's victim among evictable ones), binds it
  // and returns it; -1 when every slot is pinned.
  int admit(uint32_t key);
  // Pinned slots are never evicted (in flight, or in use by the current layer).
  void pin(int slot) {
    if (slots_[slot].pins++ == 0) n_pinned_++;
  }
  void unpin(int slot) {
    if (--slots_[slot].pins == 0) n_pinned_--;
  }
  int n_pinned() const { return n_pinned_; }
  int n_free() const { return (int)free_.size(); }
  // Forgets a slot's record (after a failed read).
  void drop(int slot);

  uint64_t evictions() const { return evictions_; }

  // Demands of every record ever demanded, whatever the policy (speculative reads are not
  // demands): what a later run warms its cache with. The store counts each demand; a loaded
  // usage file carries an earlier run's counts forward.
  const std::unordered_map<uint32_t, uint64_t>& uses() const { return uses_; }
  void add_uses(uint32_t key, uint64_t n) { uses_[key] += n; }

 private:
  struct Slot {
    uint32_t key = 0;
    bool used = false;
    int pins = 0;
    uint64_t hits = 0;
    uint64_t last = 0;
    double score = 0;  // kLrfu: log2(weighted uses) + lambda * last use; comparable across slots
  };
  struct History {
    double crf = 0;  // recency-weighted use count at `last`
    uint64_t last = 0;
  };
  void use(Slot& s);
  int victim();
  uint64_t& history(uint32_t key) { return freq_[key]; }

  CachePolicy policy_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
  std::unordered_map<uint32_t, int> where_;
  std::unordered_map<uint32_t, uint64_t> freq_;  // LFU: uses per record, ever
  std::unordered_map<uint32_t, History> hist_;   // LRFU: per record, ever
  std::unordered_map<uint32_t, uint64_t> uses_;  // every policy: per record, ever
  double lambda_ = 0;
  uint64_t clock_ = 0;
  uint64_t lcg_ = 0x9e3779b9;
  uint64_t evictions_ = 0;
  int n_pinned_ = 0;
};

}  // namespace waste
