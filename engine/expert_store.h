// Hands the forward pass the expert records a layer asks for. A layer asks for all its experts
// at once and gets each one through a callback as soon as its bytes are in RAM; callers store
// results by slot, so the order of arrival never changes a result.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/container.h"
#include "engine/expert_bank.h"

namespace waste {

struct ExpertStats {
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t bytes_read = 0;
  double read_seconds = 0;
  double wait_seconds = 0;
};

class ExpertStore {
 public:
  explicit ExpertStore(const Container& c);

  // Calls fn(i, view) once for each experts[i], in arrival order. Throws IoError/FormatError
  // naming the layer and expert when a record cannot be read.
  void fetch(int layer, std::span<const int> experts,
             const std::function<void(size_t, const ExpertView&)>& fn);

  const ExpertStats& stats() const { return stats_; }

 private:
  const Container& c_;
  std::unique_ptr<AlignedBuffer> buf_;
  ExpertStats stats_;
};

}  // namespace waste
