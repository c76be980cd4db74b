#include "server/runtime/prefix_cache.h"

#include <algorithm>

namespace waste {

std::vector<uint64_t> position_keys(std::span<const int32_t> tokens,
                                    std::span<const uint64_t> media) {
  std::vector<uint64_t> keys(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++)
    keys[i] = i < media.size() ? media[i] : (uint64_t)(uint32_t)tokens[i];
  return keys;
}

std::optional<Session> PrefixCache::longest_prefix(std::span<const int32_t> prompt,
                                                   std::span<const uint64_t> media) {
  const std::vector<uint64_t> want = position_keys(prompt, media);
  std::lock_guard<std::mutex> lock(mu_);
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto& k = it->keys;
    if (k.empty() || k.size() >= want.size()) continue;
    if (best != entries_.end() && k.size() <= best->keys.size()) continue;
    if (std::equal(k.begin(), k.end(), want.begin())) best = it;
  }
  if (best == entries_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, best);
  return entries_.front().session;
}

void PrefixCache::put(const Session& s, std::span<const uint64_t> media) {
  if (s.broken || s.tokens.empty()) return;
  uint64_t need = s.bytes();
  if (need > max_bytes_) return;
  std::vector<uint64_t> keys = position_keys(s.tokens, media);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->keys == keys) {
      bytes_ -= it->session.bytes();
      entries_.erase(it);
      break;
    }
  while (!entries_.empty() && bytes_ + need > max_bytes_) {
    bytes_ -= entries_.back().session.bytes();
    entries_.pop_back();
  }
  entries_.push_front({s, std::move(keys)});
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

}  // namespace waste
