#include "server/prefix_cache.h"

#include <algorithm>

namespace waste {

std::optional<Session> PrefixCache::longest_prefix(std::span<const int32_t> prompt) {
  std::lock_guard<std::mutex> lock(mu_);
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto& t = it->tokens;
    if (t.empty() || t.size() >= prompt.size()) continue;
    if (best != entries_.end() && t.size() <= best->tokens.size()) continue;
    if (std::equal(t.begin(), t.end(), prompt.begin())) best = it;
  }
  if (best == entries_.end()) return std::nullopt;
  entries_.splice(entries_.begin(), entries_, best);
  return entries_.front();
}

void PrefixCache::put(const Session& s) {
  if (s.broken || s.tokens.empty()) return;
  uint64_t need = s.bytes();
  if (need > max_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->tokens == s.tokens) {
      bytes_ -= it->bytes();
      entries_.erase(it);
      break;
    }
  while (!entries_.empty() && bytes_ + need > max_bytes_) {
    bytes_ -= entries_.back().bytes();
    entries_.pop_back();
  }
  entries_.push_front(s);
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
