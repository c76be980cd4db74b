#include "engine/experts/expert_cache.h"

#include <cmath>

#include "engine/base/error.h"

namespace waste {

const char* policy_name(CachePolicy p) {
  switch (p) {
    case CachePolicy::kLru:
      return "lru";
    case CachePolicy::kLfru:
      return "lfru";
    case CachePolicy::kLfu:
      return "lfu";
    case CachePolicy::kLrfu:
      return "lrfu";
  }
  return "?";
}

CachePolicy parse_policy(const std::string& name) {
  for (CachePolicy p :
       {CachePolicy::kLru, CachePolicy::kLfru, CachePolicy::kLfu, CachePolicy::kLrfu})
    if (name == policy_name(p)) return p;
  fail<UsageError>("cache policy '{}' is unknown (lru, lfru, lfu or lrfu)", name);
}

ExpertCache::ExpertCache(int n_slots, CachePolicy policy, double half_life)
    : policy_(policy), slots_(n_slots), lambda_(half_life > 0 ? 1.0 / half_life : 0) {
  for (int i = n_slots - 1; i >= 0; i--) free_.push_back(i);
}

int ExpertCache::find(uint32_t key) const {
  auto it = where_.find(key);
  return it == where_.end() ? -1 : it->second;
}

// One use of the record in slot s: the bookkeeping every policy keeps.
void ExpertCache::use(Slot& s) {
  s.last = ++clock_;
  if (policy_ == CachePolicy::kLfu) s.hits = ++history(s.key);
  if (policy_ == CachePolicy::kLrfu) {
    History& h = hist_[s.key];
    h.crf = h.crf * std::exp2(-lambda_ * (double)(s.last - h.last)) + 1.0;
    h.last = s.last;
    s.score = std::log2(h.crf) + lambda_ * (double)s.last;
  }
}

void ExpertCache::touch(int slot) {
  Slot& s = slots_[slot];
  s.hits++;
  use(s);
}

int ExpertCache::admit(uint32_t key) {
  int slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = victim();
    if (slot < 0) return -1;
    where_.erase(slots_[slot].key);
    evictions_++;
  }
  Slot& s = slots_[slot];
  s.key = key;
  s.used = true;
  s.hits = 1;
  use(s);
  where_[key] = slot;
  return slot;
}

void ExpertCache::drop(int slot) {
  Slot& s = slots_[slot];
  if (!s.used) return;
  where_.erase(s.key);
  s.used = false;
  free_.push_back(slot);
}

int ExpertCache::victim() {
  const int n = (int)slots_.size();
  auto better = [&](int a, int b) {  // is slot a a better victim than b?
    const Slot &x = slots_[a], &y = slots_[b];
    if (policy_ == CachePolicy::kLru) return x.last < y.last;
    if (policy_ == CachePolicy::kLrfu) return x.score < y.score;
    if (x.hits != y.hits) return x.hits < y.hits;
    return x.last < y.last;
  };
  int best = -1;
  if (policy_ == CachePolicy::kLfru) {
    for (int i = 0; i < 16; i++) {
      lcg_ = lcg_ * 1664525u + 1013904223u;
      int s = (int)((lcg_ & 0xffffffffu) % (uint64_t)n);
      if (slots_[s].pins == 0 && (best < 0 || better(s, best))) best = s;
    }
    if (best >= 0) return best;
  }
  for (int s = 0; s < n; s++)
    if (slots_[s].pins == 0 && (best < 0 || better(s, best))) best = s;
  return best;
}

}  // namespace waste
