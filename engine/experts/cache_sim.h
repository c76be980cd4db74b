// Replays a routing trace (per token, the experts each MoE layer chose) through the expert cache's
// bookkeeping, exactly as the expert store drives it, and reports hit rates per policy and size.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/experts/expert_cache.h"

namespace waste {

// trace[token][layer] = the experts that layer routed to.
using RoutingTrace = std::vector<std::vector<std::vector<int>>>;

// Reads the JSON-lines trace format {"tok": n, "layers": [[ids...], ...]}; throws FormatError
// naming the line.
RoutingTrace read_routing_trace(const std::string& path);

struct SimResult {
  uint64_t hits = 0, misses = 0;
  double hit_rate() const { return hits + misses ? (double)hits / (double)(hits + misses) : 0; }
};

// Demand-only replay through ExpertCache with `slots` records, each layer's experts pinned while
// it runs (as in the store). Throws UsageError if slots cannot hold one layer's experts.
SimResult simulate_policy(const RoutingTrace& t, int slots, CachePolicy policy);

// Demand accesses per token of the trace (its first token's experts over all layers).
int accesses_per_token(const RoutingTrace& t);

// Belady's optimal replacement (evict the record used furthest in the future): the upper bound
// no online policy can beat.
SimResult simulate_optimal(const RoutingTrace& t, int slots);

}  // namespace waste
