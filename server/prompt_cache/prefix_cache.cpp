#include "server/prompt_cache/prefix_cache.h"

#include <algorithm>

namespace waste {

std::vector<uint64_t> position_keys(std::span<const int32_t> tokens,
                                    std::span<const uint64_t> media) {
  std::vector<uint64_t> keys(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++)
    keys[i] = i < media.size() ? media[i] : (uint64_t)(uint32_t)tokens[i];
  return keys;
}

std::optional<PrefixCache::Claim> PrefixCache::claim(std::span<const int32_t> prompt,
                                                     std::span<const uint64_t> media, size_t have,
                                                     std::span<const size_t> points) {
  std::vector<uint64_t> want = position_keys(prompt, media);
  auto claimed = [&] {  // under mu_
    for (const auto& [id, c] : claims_) {
      const size_t common =
          std::mismatch(c.keys.begin(), c.keys.end(), want.begin(), want.end()).first -
          c.keys.begin();
      for (size_t q : c.points)
        if (q > have && q <= common && q < want.size()) return true;
    }
    return false;
  };
  std::unique_lock<std::mutex> lock(mu_);
  if (claimed()) {
    claims_cv_.wait(lock, [&] { return !claimed(); });
    return std::nullopt;
  }
  Claimed c{std::move(want), {}};
  for (size_t q : points)
    if (q > have && q < prompt.size()) c.points.push_back(q);
  const uint64_t id = next_claim_++;
  claims_.emplace(id, std::move(c));
  return Claim(this, id);
}

void PrefixCache::release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  claims_.erase(id);
  claims_cv_.notify_all();
}

PrefixCache::Claim& PrefixCache::Claim::operator=(Claim&& o) noexcept {
  if (this != &o) {
    if (cache_) cache_->release(id_);
    cache_ = o.cache_;
    id_ = o.id_;
    o.cache_ = nullptr;
  }
  return *this;
}

PrefixCache::Claim::~Claim() {
  if (cache_) cache_->release(id_);
}

void PrefixCache::Claim::reached(size_t point) {
  if (!cache_) return;
  std::lock_guard<std::mutex> lock(cache_->mu_);
  auto it = cache_->claims_.find(id_);
  if (it == cache_->claims_.end()) return;
  std::erase(it->second.points, point);
  cache_->claims_cv_.notify_all();
}

std::optional<Session> PrefixCache::longest_prefix(std::span<const int32_t> prompt,
                                                   std::span<const uint64_t> media) {
  std::vector<uint64_t> want = position_keys(prompt, media);
  std::shared_ptr<const Session> found;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto best = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      const auto& k = it->keys;
      if (k.empty() || k.size() >= want.size()) continue;
      if (best != entries_.end() && k.size() <= best->keys.size()) continue;
      if (std::equal(k.begin(), k.end(), want.begin())) best = it;
    }
    if (best != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, best);
      found = entries_.front().session;
    }
  }
  const int64_t in_memory = found ? found->pos() : 0;
  if (disk_)
    if (std::optional<Session> s = disk_->longest_prefix(want, in_memory)) {
      // The next turn finds it in memory; the disk has it already. The disk does not say whether
      // it was partial, so memory lets a longer snapshot of its positions replace it: the disk
      // keeps its copy either way.
      want.resize((size_t)s->pos());
      remember(std::make_shared<const Session>(*s), std::move(want), SnapshotKind::kPartial);
      return s;
    }
  std::lock_guard<std::mutex> lock(mu_);
  if (!found) {
    stats_.misses++;
    return std::nullopt;
  }
  stats_.hits++;
  stats_.tokens_reused += (uint64_t)in_memory;
  return *found;
}

void PrefixCache::put(const Session& s, std::span<const uint64_t> media, SnapshotKind kind) {
  if (s.broken || s.tokens.empty()) return;
  if (!disk_ && s.bytes() > max_bytes_) return;  // nowhere to keep it
  std::vector<uint64_t> keys = position_keys(s.tokens, media);
  auto copy = std::make_shared<const Session>(s);  // the one copy both tiers share
  if (disk_) disk_->put(copy, keys);
  remember(std::move(copy), std::move(keys), kind);
}

void PrefixCache::remember(std::shared_ptr<const Session> copy, std::vector<uint64_t> keys,
                           SnapshotKind kind) {
  const uint64_t need = copy->bytes();
  if (need > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    const auto& k = it->keys;
    const bool same = k == keys;
    const bool outgrown = it->kind == SnapshotKind::kPartial && k.size() < keys.size() &&
                          std::equal(k.begin(), k.end(), keys.begin());
    if (!same && !outgrown) {
      ++it;
      continue;
    }
    if (same && it->kind == SnapshotKind::kLasting) kind = SnapshotKind::kLasting;
    bytes_ -= it->session->bytes();
    it = entries_.erase(it);
  }
  while (!entries_.empty() && bytes_ + need > max_bytes_) {
    bytes_ -= entries_.back().session->bytes();
    entries_.pop_back();
    stats_.evictions++;
  }
  entries_.push_front({std::move(copy), std::move(keys), kind});
  bytes_ += need;
}

size_t PrefixCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t PrefixCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

MemoryCacheStats PrefixCache::memory_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryCacheStats s = stats_;
  s.bytes = bytes_;
  s.snapshots = entries_.size();
  return s;
}

}  // namespace waste
