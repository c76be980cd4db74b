#include "engine/experts/ram_budget.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "engine/base/error.h"
#include "engine/base/human_bytes.h"

namespace waste {

int64_t default_context(const Manifest& m, std::optional<uint64_t> requested, uint64_t usable,
                        int threads) {
  constexpr int64_t kBase = 4096, kStep = 1024, kUnstatedMost = int64_t{1} << 20;
  const int64_t most = std::min<int64_t>(
      m.config.max_positions > 0 ? m.config.max_positions : kUnstatedMost, int64_t{1} << 24);
  const int64_t base = std::min(kBase, most);
  const MemoryPlan at_base = plan_memory(m, base, threads);
  Budget b;
  try {
    b = plan_budget(at_base, requested, usable);
  } catch (const UsageError&) {
    return base;  // the load refuses it with the numbers
  }
  // The floor is linear in the context (the session's state and the threads' attention scores);
  // what else the budget holds does not move.
  const uint64_t per_position = plan_memory(m, base + 1, threads).floor_bytes - at_base.floor_bytes;
  if (per_position == 0) return most;  // only fixed-size (KDA) state
  // The cache and the prefill window share what is above the floor.
  const uint64_t above =
      b.cache_bytes + (uint64_t)(b.window - kMinWindowTokens) * at_base.window_token_bytes;
  const uint64_t keep =
      requested ? std::min(above, at_base.min_cache_bytes + at_base.working_set_bytes) : above;
  const uint64_t limit = requested ? *requested : b.cap;
  // Everything but the positions' share of the floor, with the cache to keep.
  const uint64_t fixed =
      at_base.floor_bytes - per_position * (uint64_t)base - at_base.min_cache_bytes + keep;
  if (limit <= fixed) return base;
  const uint64_t fits = (limit - fixed) / per_position;
  const int64_t ctx = (int64_t)std::min<uint64_t>(fits, (uint64_t)most) / kStep * kStep;
  return std::clamp(ctx, base, most);
}

int plan_parallel(const MemoryPlan& plan, const Budget& b, int requested) {
  const uint64_t beside = b.cap > b.budget ? b.cap - b.budget : 0;
  const uint64_t per = std::max<uint64_t>(plan.state_bytes, 1);
  const uint64_t fit = 1 + beside / per;
  if (requested <= 0) return (int)std::min<uint64_t>(fit, kDefaultParallel);
  if ((uint64_t)requested > fit)
    fail<UsageError>(
        "{} parallel sessions need {} more session states of {} each (context {}) beside the "
        "budget of {}, but the cap (7/8 of usable memory) is {}: {} fit; lower --parallel, "
        "--ctx or --budget",
        requested, requested - 1, human_bytes(per), plan.ctx, human_bytes(b.budget),
        human_bytes(b.cap), fit);
  return requested;
}

int64_t choose_context(const Manifest& m, int64_t ctx, std::optional<uint64_t> requested,
                       uint64_t usable, int threads) {
  return ctx > 0 ? ctx : default_context(m, requested, usable, threads);
}

Budget plan_budget(const MemoryPlan& plan, std::optional<uint64_t> requested, uint64_t usable) {
  Budget b;
  b.cap = usable - usable / 8;
  if (requested) {
    if (*requested < plan.floor_bytes)
      fail<UsageError>(
          "a budget of {} is under this model's floor of {} at context {} "
          "(trunk {}, state {}, scratch {}, minimum expert cache {})",
          human_bytes(*requested), human_bytes(plan.floor_bytes), plan.ctx,
          human_bytes(plan.trunk_bytes), human_bytes(plan.state_bytes),
          human_bytes(plan.scratch_bytes), human_bytes(plan.min_cache_bytes));
    b.budget = *requested;
    b.explicit_budget = true;
  } else {
    if (plan.floor_bytes > b.cap)
      fail<UsageError>(
          "this model needs at least {} at context {} but only {} (7/8 of {} "
          "usable) is available; lower --ctx or pass --budget explicitly",
          human_bytes(plan.floor_bytes), plan.ctx, human_bytes(b.cap), human_bytes(usable));
    uint64_t ws = std::max<uint64_t>(plan.working_set_bytes, 1);
    b.working_sets = (int)std::min<uint64_t>(3, (b.cap - plan.floor_bytes) / ws);
    b.budget = plan.floor_bytes + (uint64_t)b.working_sets * plan.working_set_bytes;
  }
  const uint64_t spare = b.budget - plan.floor_bytes;
  const uint64_t per = std::max<uint64_t>(plan.window_token_bytes, 1);
  const uint64_t more = std::min<uint64_t>(spare / 4 / per / kMinWindowTokens * kMinWindowTokens,
                                           kMaxWindowTokens - kMinWindowTokens);
  b.window = kMinWindowTokens + (int64_t)more;
  b.cache_bytes = b.budget - plan.floor_bytes - more * per + plan.min_cache_bytes;
  return b;
}

uint64_t parse_bytes(const std::string& text) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  std::string unit = text.substr(used);
  double mul = 0;
  if (unit.empty() || unit == "B") mul = 1;
  for (auto [names, m] :
       {std::pair{"K KB KiB k", 1024.0}, std::pair{"M MB MiB m", 1048576.0},
        std::pair{"G GB GiB g", 1073741824.0}, std::pair{"T TB TiB t", 1099511627776.0}}) {
    std::stringstream ss(names);
    std::string n;
    while (ss >> n)
      if (unit == n) mul = m;
  }
  if (used == 0 || mul == 0 || !(v >= 0) || !std::isfinite(v * mul) || v * mul > 1.8e19)
    fail<UsageError>("'{}' is not a size (examples: 48G, 512M, 1.5GiB)", text);
  return (uint64_t)(v * mul);
}

}  // namespace waste
