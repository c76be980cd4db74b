// The RAM planner's budget rules (the cgroup limits it honours are platform_test's).
#include <gtest/gtest.h>

#include <memory>

#include "engine/base/error.h"
#include "engine/experts/ram_budget.h"
#include "engine/format/container.h"
#include "engine/kernels/kernels.h"
#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

MemoryPlan plan(uint64_t floor, uint64_t ws) {
  MemoryPlan p;
  p.ctx = 4096;
  p.floor_bytes = floor;
  p.working_set_bytes = ws;
  p.min_cache_bytes = 100;
  p.window_token_bytes = 1 << 20;
  return p;
}

// What a budget holds: the floor (with a 64-token window and the minimum cache), the window's
// tokens beyond 64, and the cache beyond its minimum.
uint64_t held(const MemoryPlan& p, const Budget& b) {
  return p.floor_bytes + (uint64_t)(b.window - kMinWindowTokens) * p.window_token_bytes +
         b.cache_bytes - p.min_cache_bytes;
}

constexpr uint64_t G = 1ull << 30;

// The tiny K3 (it has MLA layers, so its floor grows with the context), manifest only.
std::unique_ptr<Container> tiny_k3_manifest(const test::TempDir& d) {
  write_synthetic(d / "k3.waste", {Arch::kK3, "tiny", 3});
  OpenOptions o;
  o.load_trunk = false;
  return Container::open(d / "k3.waste", o);
}

TEST(Budget, DefaultIsFloorPlusUpToThreeWorkingSetsUnderSevenEighths) {
  // 64 GiB usable: cap 56 GiB. Floor 29, ws 17: 29+17 = 46 fits, 29+34 = 63 does not.
  Budget b = plan_budget(plan(29 * G, 17 * G), std::nullopt, 64 * G);
  EXPECT_EQ(b.cap, 56 * G);
  EXPECT_EQ(b.working_sets, 1);
  EXPECT_EQ(b.budget, 46 * G);
  EXPECT_EQ(b.window, kMaxWindowTokens);  // a quarter of 17 GiB holds more
  EXPECT_EQ(b.cache_bytes, 17 * G + 100 - (uint64_t)(kMaxWindowTokens - 64) * (1 << 20));
  // Plenty of RAM: capped at three working sets.
  b = plan_budget(plan(1 * G, 1 * G), std::nullopt, 64 * G);
  EXPECT_EQ(b.working_sets, 3);
  EXPECT_EQ(b.budget, 4 * G);
  // Room for the floor only.
  b = plan_budget(plan(50 * G, 17 * G), std::nullopt, 64 * G);
  EXPECT_EQ(b.working_sets, 0);
  EXPECT_EQ(b.budget, 50 * G);
  EXPECT_LE(b.budget, b.cap);
}

// The prefill window takes a quarter of the room above the floor, in steps of 64 tokens, between
// 64 (at the floor) and kMaxWindowTokens; the cache has the rest, and nothing exceeds the budget.
TEST(Budget, ThePrefillWindowShrinksWithTheBudget) {
  const MemoryPlan p = plan(10 * G, G);
  const uint64_t M = 1 << 20;
  struct Case {
    uint64_t above;
    int64_t window;
  } cases[] = {{0, 64},        {255 * M, 64}, {256 * M, 128},
               {400 * M, 128}, {2 * G, 576},  {100 * G, kMaxWindowTokens}};
  for (const Case& c : cases) {
    Budget b = plan_budget(p, p.floor_bytes + c.above, 64 * G);
    EXPECT_EQ(b.window, c.window) << c.above;
    EXPECT_EQ(held(p, b), b.budget) << c.above;
    EXPECT_GE(b.cache_bytes, p.min_cache_bytes) << c.above;
  }
  // The default budget's room is shared the same way.
  Budget d = plan_budget(plan(1 * G, 1 * G), std::nullopt, 64 * G);
  EXPECT_EQ(held(plan(1 * G, 1 * G), d), d.budget);
}

TEST(Budget, UnderTheFloorIsRefusedWithTheNumbers) {
  try {
    plan_budget(plan(29 * G, 17 * G), 20 * G, 64 * G);
    FAIL() << "accepted a budget under the floor";
  } catch (const UsageError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("20.00 GiB is under this model's floor of 29.00 GiB"), std::string::npos) << m;
  }
  EXPECT_THROW(plan_budget(plan(60 * G, G), std::nullopt, 64 * G), UsageError);
  Budget b = plan_budget(plan(29 * G, 17 * G), 40 * G, 16 * G);  // explicit: used as given
  EXPECT_EQ(b.budget, 40 * G);
  EXPECT_TRUE(b.explicit_budget);
}

// The default context is the largest (in steps of 1024) that keeps the cache the budget gives at
// 4096 positions: one step more would cost a cached working set (or, with an explicit budget,
// leave less than one).
TEST(Budget, DefaultContextIsTheLargestThatKeepsTheCache) {
  test::TempDir d;
  auto c = tiny_k3_manifest(d);
  const Manifest& m = c->manifest();
  constexpr int kThreads = 3;
  const MemoryPlan base = plan_memory(m, 4096, kThreads);
  const uint64_t per_position = plan_memory(m, 4097, kThreads).floor_bytes - base.floor_bytes;
  ASSERT_GT(per_position, 0u) << "the tiny K3 has MLA layers";
  const int64_t most = m.config.max_positions > 0 ? m.config.max_positions : 1 << 20;

  // Without a budget: the working sets the default rule caches stay as at 4096.
  const uint64_t usable =
      (base.floor_bytes + 2 * base.working_set_bytes + 3000 * per_position) * 8 / 7;
  const int working_sets = plan_budget(base, std::nullopt, usable).working_sets;
  const int64_t ctx = default_context(m, std::nullopt, usable, kThreads);
  EXPECT_GT(ctx, 4096);
  EXPECT_EQ(ctx % 1024, 0);
  EXPECT_EQ(plan_budget(plan_memory(m, ctx, kThreads), std::nullopt, usable).working_sets,
            working_sets);
  if (ctx < most) {
    EXPECT_LT(plan_budget(plan_memory(m, ctx + 1024, kThreads), std::nullopt, usable).working_sets,
              working_sets);
  }
  EXPECT_EQ(default_context(m, std::nullopt, uint64_t{1} << 50, kThreads), most);  // RAM to spare

  // An explicit budget: at least one working set stays cached.
  const uint64_t budget = base.floor_bytes + base.working_set_bytes + 5000 * per_position;
  const int64_t fixed = default_context(m, budget, usable, kThreads);
  EXPECT_GE(plan_budget(plan_memory(m, fixed, kThreads), budget, usable).cache_bytes,
            base.min_cache_bytes + base.working_set_bytes);
  EXPECT_LT(plan_budget(plan_memory(m, fixed + 1024, kThreads), budget, usable).cache_bytes,
            base.min_cache_bytes + base.working_set_bytes);

  // Too little RAM for 4096: 4096, which the budget then refuses with the numbers.
  EXPECT_EQ(default_context(m, std::nullopt, base.floor_bytes / 2, kThreads), 4096);
  EXPECT_EQ(choose_context(m, 123, std::nullopt, usable, kThreads), 123);
}

// Each compute thread scores a unit of MLA heads and queries against the whole context in
// buffers of its own; the floor counts them for every thread, so it grows with the threads and the
// context.
TEST(Budget, TheFloorCountsEveryThreadsAttentionScores) {
  test::TempDir d;
  auto c = tiny_k3_manifest(d);
  const ModelConfig& cfg = c->config();
  ASSERT_GT(cfg.kv_lora, 0) << "the tiny K3 has MLA layers";
  const uint64_t scores_per_position =
      (uint64_t)std::min<int64_t>(kHeadsPerUnit, cfg.n_heads) * kQueriesPerUnit * sizeof(float);
  // One thread's own buffers at 8192 positions: KDA's decays, W_kb(h), the expert kernel's
  // panel (8 rows of the widest expert input), the trunk matmul's buffers for the widest trunk
  // matrix and the scores.
  const uint64_t panel = 8 * (uint64_t)std::max<int64_t>(cfg.expert_in(), cfg.moe_inter);
  int64_t widest = 0;
  for (const TrunkEntry& t : c->manifest().trunk)
    if (t.shape.size() == 2) widest = std::max(widest, t.cols());
  const uint64_t inputs = (uint64_t)matmul_scratch_floats(widest);
  const uint64_t per_thread =
      ((uint64_t)cfg.kda_dim + (uint64_t)cfg.qk_nope * cfg.kv_lora + panel + inputs) *
          sizeof(float) +
      8192 * scores_per_position;
  const MemoryPlan one = plan_memory(c->manifest(), 8192, 1);
  const MemoryPlan four = plan_memory(c->manifest(), 8192, 4);
  EXPECT_EQ(four.state_bytes, one.state_bytes);  // one session, whatever the threads
  EXPECT_EQ(four.floor_bytes - one.floor_bytes, 3 * per_thread);
  const MemoryPlan longer = plan_memory(c->manifest(), 16384, 4);
  EXPECT_EQ(longer.scratch_bytes - four.scratch_bytes, 4 * 8192 * scores_per_position);
}

// Sessions beyond the first hold their state in the RAM beside the budget, under the cap: the
// default takes as many as fit (at least one, at most kDefaultParallel); a number that does not
// fit is refused with the numbers.
TEST(Budget, ParallelSessionsFitBesideTheBudget) {
  MemoryPlan p = plan(29 * G, 17 * G);
  p.state_bytes = 4 * G;
  Budget b = plan_budget(p, std::nullopt, 64 * G);  // budget 46 of a 56 GiB cap: 10 GiB beside
  EXPECT_EQ(plan_parallel(p, b, 0), 3);
  EXPECT_EQ(plan_parallel(p, b, 3), 3);
  try {
    plan_parallel(p, b, 4);
    ADD_FAILURE() << "4 sessions do not fit";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("3 more session states of 4.00 GiB"), std::string::npos) << m;
    EXPECT_NE(m.find("3 fit"), std::string::npos) << m;
  }
  p.state_bytes = 1 << 20;  // small state: the default stops at kDefaultParallel
  EXPECT_EQ(plan_parallel(p, b, 0), kDefaultParallel);
  EXPECT_EQ(plan_parallel(p, b, 200), 200);
  b.budget = b.cap;  // nothing beside: one session, the one the floor holds
  p.state_bytes = 4 * G;
  EXPECT_EQ(plan_parallel(p, b, 0), 1);
  EXPECT_EQ(plan_parallel(p, b, 1), 1);
}

TEST(Budget, ParsesSizes) {
  EXPECT_EQ(parse_bytes("48G"), 48 * G);
  EXPECT_EQ(parse_bytes("1.5GiB"), 3 * G / 2);
  EXPECT_EQ(parse_bytes("512M"), 512ull << 20);
  EXPECT_EQ(parse_bytes("4096"), 4096u);
  for (const char* bad : {"", "G", "-1G", "12Q", "nan", "1e30G"})
    EXPECT_THROW(parse_bytes(bad), UsageError) << bad;
}

}  // namespace
}  // namespace waste
