#include "engine/expert_store.h"

#include <algorithm>
#include <chrono>

namespace waste {

ExpertStore::ExpertStore(const Container& c) : c_(c) {
  uint64_t stride = 0;
  for (auto& [layer, b] : c.manifest().banks) stride = std::max(stride, b.stride());
  if (stride) buf_ = std::make_unique<AlignedBuffer>(stride);
}

void ExpertStore::fetch(int layer, std::span<const int> experts,
                        const std::function<void(size_t, const ExpertView&)>& fn) {
  const ExpertBank& bank = c_.bank(layer);
  for (size_t i = 0; i < experts.size(); i++) {
    auto t0 = std::chrono::steady_clock::now();
    bank.read(experts[i], buf_->data());
    stats_.read_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    stats_.misses++;
    stats_.bytes_read += bank.stride();
    fn(i, view_record(buf_->data(), bank.geometry()));
  }
}

}  // namespace waste
