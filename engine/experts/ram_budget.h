// How much RAM the engine may use: the machine's usable memory (physical, or a cgroup limit where
// one applies), the default budget rule, and the refusal of budgets under the model's floor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/experts/planner.h"

namespace waste {

struct UsableMemory {
  uint64_t bytes = 0;
  std::string source;  // "physical RAM" or the cgroup file that limits it
};

// Physical RAM, lowered by the smallest finite cgroup v1 or v2 limit on this process's cgroup or
// any ancestor. `root` and `proc_cgroup` are parameters so tests can lay out a fake hierarchy.
UsableMemory usable_memory(const std::filesystem::path& root = "/sys/fs/cgroup",
                           const std::filesystem::path& proc_cgroup = "/proc/self/cgroup");

struct Budget {
  uint64_t budget = 0;       // total RAM the engine plans to use
  uint64_t cache_bytes = 0;  // of which the expert cache
  uint64_t cap = 0;          // 7/8 of usable memory
  int working_sets = 0;      // cached token working sets beyond the floor (default rule)
  bool explicit_budget = false;
};

// With `requested`, that budget (refused with the numbers if under the floor). Without, the
// largest floor + k * working set (k <= 3) under 7/8 of usable memory, stepping down one working
// set at a time; refused with the numbers if even the floor does not fit.
Budget plan_budget(const MemoryPlan& plan, std::optional<uint64_t> requested, uint64_t usable);

// "48G", "512M", "1.5GiB", "123456" (bytes); G and GiB both mean 2^30. Throws UsageError.
uint64_t parse_bytes(const std::string& text);

}  // namespace waste
