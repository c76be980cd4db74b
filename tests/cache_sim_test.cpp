// The cache policies on the real Kimi-Linear routing trace: the optimal policy bounds them all,
// and the engine's default policy is the best one measured where the cache is scarce.
#include <gtest/gtest.h>

#include "engine/base/error.h"
#include "engine/experts/cache_sim.h"
#include "engine/experts/expert_store.h"
#include "tests/test_util.h"

namespace waste {
namespace {

const RoutingTrace& trace() {
  static const RoutingTrace t =
      read_routing_trace((test::fixtures_dir() / "traces/kimi_linear_300.jsonl").string());
  return t;
}

TEST(CacheSim, ReadsTheRealTrace) {
  const RoutingTrace& t = trace();
  ASSERT_EQ(t.size(), 300u);
  ASSERT_EQ(t[0].size(), 26u);
  for (const auto& layer : t[0]) EXPECT_EQ(layer.size(), 8u);
  EXPECT_EQ(accesses_per_token(t), 208);
}

TEST(CacheSim, OptimalBoundsEveryPolicyAndHitsGrowWithSize) {
  const RoutingTrace& t = trace();
  for (CachePolicy p :
       {CachePolicy::kLru, CachePolicy::kLfru, CachePolicy::kLfu, CachePolicy::kLrfu}) {
    double prev = -1;
    for (int slots : {100, 400, 1600}) {
      SimResult r = simulate_policy(t, slots, p);
      EXPECT_EQ(r.hits + r.misses, 300u * 208u);
      EXPECT_LE(r.hits, simulate_optimal(t, slots).hits) << policy_name(p) << " " << slots;
      EXPECT_GT(r.hit_rate(), prev) << policy_name(p) << " " << slots;
      prev = r.hit_rate();
    }
  }
}

TEST(CacheSim, DefaultPolicyIsTheBestMeasuredWhenTheCacheIsScarce) {
  const RoutingTrace& t = trace();
  CachePolicy def = StoreOptions{}.policy;
  for (int slots : {99, 199, 399, 798}) {  // 1.5% .. 12% of the 6656 records
    double best = simulate_policy(t, slots, def).hit_rate();
    for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kLfru, CachePolicy::kLfu})
      EXPECT_GE(best, simulate_policy(t, slots, p).hit_rate()) << policy_name(p) << " " << slots;
  }
  // Below one token's working set LRU thrashes completely; the default still hits.
  EXPECT_EQ(simulate_policy(t, 199, CachePolicy::kLru).hits, 0u);
  EXPECT_GT(simulate_policy(t, 199, def).hit_rate(), 0.25);
}

TEST(CacheSim, RefusesACacheSmallerThanOneLayer) {
  EXPECT_THROW(simulate_policy(trace(), 7, CachePolicy::kLru), UsageError);
}

TEST(CacheSim, BadTraceLinesAreNamed) {
  test::TempDir d;
  test::write_file(d / "t.jsonl",
                   "{\"tok\":0,\"layers\":[[1,2]]}\n{\"tok\":1,\"layers\":[[1,\"x\"]]}\n");
  try {
    read_routing_trace((d / "t.jsonl").string());
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("t.jsonl:2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace waste
