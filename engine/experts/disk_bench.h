// Measures this machine's random direct-read bandwidth at the expert record size, the floor
// that decode speed is judged against.
#pragma once

#include <cstdint>

#include "engine/format/container.h"

namespace waste {

struct DiskBench {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  double seconds = 0;
  double gbps() const { return seconds > 0 ? (double)bytes / seconds / 1e9 : 0; }
};

// Reads `n_reads` random whole records from the container's banks (through the same checked,
// page-cache-bypassing path as the engine) with `threads` readers in parallel.
DiskBench measure_record_reads(const Container& c, int n_reads, int threads, uint64_t seed);

}  // namespace waste
