// `waste cachesim`: replays a routing trace through each cache policy at several sizes.
#include <fmt/format.h>

#include "config/option_values.h"
#include "engine/base/error.h"
#include "engine/experts/cache_sim.h"
#include "protocol/json/json_writer.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace waste::cli {

int cmd_cachesim(int argc, char** argv) {
  Args a(argc, argv, 2, {"--percent", "--experts"}, {"--json"});
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one TRACE path"};
  RoutingTrace t = read_routing_trace(a.positional()[0]);
  int experts = (int)a.get_int("--experts", 256, 1, 65536);
  int64_t records = (int64_t)t[0].size() * experts;
  std::vector<double> percents;
  for (const std::string& item : option_list(a.get_or("--percent", "1.5,3,6,12,24,48"))) {
    try {
      percents.push_back(option_number(item, 0, 100));
    } catch (const UsageError& e) {
      throw UsageFailure{fmt::format("--percent: {}", e.what())};
    }
  }
  JsonWriter w;
  w.begin_object().key("tokens").value((int64_t)t.size()).key("records").value(records);
  w.key("results").begin_array();
  if (!a.has("--json"))
    fmt::print(
        "{} tokens, {} layers x {} experts = {} records\n{:>8} {:>7} {:>8} {:>8} {:>8} {:>8} "
        "{:>8}\n",
        t.size(), t[0].size(), experts, records, "cache %", "slots", "lru", "lfru", "lfu", "lrfu",
        "optimal");
  for (double pct : percents) {
    int slots = (int)(records * pct / 100.0);
    int need = 0;
    for (const auto& l : t[0]) need = std::max(need, (int)l.size());
    if (slots < need) slots = need;
    const CachePolicy ps[4] = {CachePolicy::kLru, CachePolicy::kLfru, CachePolicy::kLfu,
                               CachePolicy::kLrfu};
    double rates[5];
    for (int i = 0; i < 4; i++) rates[i] = simulate_policy(t, slots, ps[i]).hit_rate();
    rates[4] = simulate_optimal(t, slots).hit_rate();
    w.begin_object().key("percent").value(pct).key("slots").value(slots);
    for (int i = 0; i < 4; i++) w.key(policy_name(ps[i])).value(rates[i]);
    w.key("optimal").value(rates[4]).end_object();
    if (!a.has("--json"))
      fmt::print("{:>7.1f}% {:>7} {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}% {:>7.1f}%\n", pct, slots,
                 100 * rates[0], 100 * rates[1], 100 * rates[2], 100 * rates[3], 100 * rates[4]);
  }
  if (a.has("--json")) fmt::print("{}\n", w.end_array().end_object().str());
  return 0;
}

}  // namespace waste::cli
