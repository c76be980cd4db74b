// Elapsed time for stats and logs, on the steady clock.
#pragma once

#include <chrono>

namespace waste {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace waste
