// How much RAM the engine may use of the machine's usable memory (usable_memory() in
// engine/base/platform.h): the default budget rule, and the refusal of budgets under the model's
// floor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "engine/experts/planner.h"

namespace waste {

struct Budget {
  uint64_t budget = 0;       // total RAM the engine plans to use
  uint64_t cache_bytes = 0;  // of which the expert cache
  uint64_t cap = 0;          // 7/8 of usable memory
  int working_sets = 0;      // cached token working sets beyond the floor (default rule)
  int64_t window = 0;        // prompt tokens per prefill window (the floor holds 64)
  bool explicit_budget = false;
};

// With `requested`, that budget (refused with the numbers if under the floor). Without, the
// largest floor + k * working set (k <= 3) under 7/8 of usable memory, stepping down one working
// set at a time; refused with the numbers if even the floor does not fit. The prefill window
// takes up to a quarter of the RAM above the floor (in steps of 64 tokens, at most
// kMaxWindowTokens); the expert cache has the rest.
Budget plan_budget(const MemoryPlan& plan, std::optional<uint64_t> requested, uint64_t usable);

// The context a session holds when the user names none: the largest multiple of 1024 positions,
// at most the model's own maximum (2^20 where it states none) and at least 4096 (or that
// maximum), whose state and attention scores (`threads` as plan_memory's) fit beside the expert
// cache the budget gives at 4096 positions. Without an explicit budget they grow into the RAM the
// default rule leaves unused (it caches at most three working sets), so the cache does not shrink
// at all; with one it may shrink to one cached working set. When 4096 positions do not fit, 4096
// is returned and plan_budget refuses.
int64_t default_context(const Manifest& m, std::optional<uint64_t> requested, uint64_t usable,
                        int threads);

// `ctx` when positive, else default_context.
int64_t choose_context(const Manifest& m, int64_t ctx, std::optional<uint64_t> requested,
                       uint64_t usable, int threads);

// Conversations the daemon runs at once when the user names no number (waste serve --parallel).
constexpr int kDefaultParallel = 4;

// How many sessions run at once: each beyond the first holds its own state at the plan's context
// (plan.state_bytes), in the RAM beside the budget under the cap. `requested` > 0 is that number,
// refused with the numbers if its sessions do not fit; 0 is as many as fit, at least 1 and at
// most kDefaultParallel.
int plan_parallel(const MemoryPlan& plan, const Budget& b, int requested);

// "48G", "512M", "1.5GiB", "123456" (bytes); G and GiB both mean 2^30. Throws UsageError.
uint64_t parse_bytes(const std::string& text);

}  // namespace waste
