// The expert store on its own: which reads it issues, what it keeps, and what it hands over.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "engine/base/error.h"
#include "engine/experts/expert_store.h"
#include "engine/format/container.h"
#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

class ExpertStoreTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl", {Arch::kKimiLinear, "tiny", 5});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::unique_ptr<Container> open() { return Container::open(dir_->path() / "kl"); }

  // Fetches and returns the delivered indices, in arrival order.
  static std::vector<size_t> fetch(ExpertStore& st, int layer, std::vector<int> experts,
                                   int next_layer = -1, std::vector<int> next = {},
                                   const std::function<void()>& overlap = {}) {
    std::vector<size_t> got;
    st.fetch(
        layer, experts, [&](size_t i, const ExpertView&) { got.push_back(i); }, next_layer, next,
        overlap);
    return got;
  }

  // Blocks until `n` records' bytes have landed (speculative reads finish on their own).
  static void await_bytes(const ExpertStore& st, uint64_t n) {
    for (int i = 0; i < 5000 && st.stats().bytes_read < n * st.record_bytes(); i++)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_EQ(st.stats().bytes_read, n * st.record_bytes());
  }

  static test::TempDir* dir_;
};
test::TempDir* ExpertStoreTest::dir_ = nullptr;

// A layer pins the records it already has before it admits its misses, so a miss can never
// evict a record the same layer is about to use. LFU makes the prefetched record (one use) the
// policy's victim over records used twice; it must survive the misses ahead of it anyway.
TEST_P(ExpertStoreTest, MissesNeverEvictWhatTheSameLayerUses) {
  auto c = open();
  const int K = c->config().top_k;
  StoreOptions o;  // the minimum cache: 2K slots
  o.policy = CachePolicy::kLfu;
  o.backend = GetParam();
  ExpertStore st(*c, o);
  ASSERT_EQ(st.n_slots(), 2 * K);
  std::vector<int> a, b;
  for (int e = 0; e < K; e++) a.push_back(e), b.push_back(K + e);
  for (int round = 0; round < 2; round++) fetch(st, 1, a), fetch(st, 1, b);  // full, 2 uses each
  const int spec = 2 * K + 1;
  st.prefetch(2, std::vector<int>{spec});
  await_bytes(st, 2 * K + 1);
  std::vector<int> demand;
  for (int e = 0; e < K - 1; e++) demand.push_back(e);  // ids below `spec`: claimed first
  demand.push_back(spec);
  ExpertStats before = st.stats();
  EXPECT_EQ(fetch(st, 2, demand).size(), demand.size());
  ExpertStats after = st.stats();
  EXPECT_EQ(after.hits - before.hits, 1u);
  EXPECT_EQ(after.prefetch_used - before.prefetch_used, 1u);
  EXPECT_EQ(after.misses - before.misses, (uint64_t)K - 1);
}

// The overlap callback runs once, after the reads are queued and before any record is handed
// over; an exception from it leaves the store usable.
TEST_P(ExpertStoreTest, OverlapRunsBeforeDeliveryAndMayThrow) {
  auto c = open();
  StoreOptions o;
  o.backend = GetParam();
  ExpertStore st(*c, o);
  int calls = 0;
  size_t delivered_at_call = 99;
  std::vector<size_t> got;
  st.fetch(
      1, std::vector<int>{3, 1, 2}, [&](size_t i, const ExpertView&) { got.push_back(i); }, -1, {},
      [&] {
        calls++;
        delivered_at_call = got.size();
      });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(delivered_at_call, 0u);
  EXPECT_EQ(got.size(), 3u);
  EXPECT_THROW(fetch(st, 2, {0, 4}, -1, {}, [] { throw IoError("overlap failed"); }), IoError);
  EXPECT_EQ(fetch(st, 2, {0, 4}).size(), 2u);  // the pins of the failed call were released
  EXPECT_EQ(fetch(st, 1, {}, -1, {}, [&] { calls++; }).size(), 0u);
  EXPECT_EQ(calls, 2) << "an empty demand still runs the overlap work";
}

// A demand that arrives while the io_uring loop is blocked on earlier reads is issued at once
// (the loop's eventfd), and many alternating demands and prefetches never lose a record.
TEST_P(ExpertStoreTest, InterleavedDemandsAndPrefetchesAllArrive) {
  auto c = open();
  const int E = c->config().n_experts;
  StoreOptions o;
  o.backend = GetParam();
  o.io_threads = 2;
  ExpertStore st(*c, o);
  uint64_t demanded = 0;
  for (int step = 0; step < 60; step++) {
    int layer = 1 + step % 4;
    std::vector<int> want{(step * 7) % E, (step * 7 + 3) % E, (step * 11 + 1) % E};
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    std::vector<int> next{(step * 5 + 2) % E, (step * 13 + 6) % E};
    EXPECT_EQ(fetch(st, layer, want, 1 + (step + 1) % 4, next).size(), want.size());
    demanded += want.size();
  }
  ExpertStats s = st.stats();
  EXPECT_EQ(s.hits + s.misses, demanded);
  EXPECT_LE(s.prefetch_used, s.prefetched);
}

// warm(): an earlier run's counts go into the store's own, and the most used records are read
// into free slots only (never past the room a demand needs, never evicting); a demand then finds
// them resident. Records the container does not have are ignored.
TEST_P(ExpertStoreTest, WarmReadsTheMostUsedRecordsIntoFreeSlots) {
  auto c = open();
  const int K = c->config().top_k;
  StoreOptions o;
  o.cache_bytes = 0;  // 2K slots: room for K warmed records beside a demand's K
  o.backend = GetParam();
  ExpertStore st(*c, o);
  const int layer = c->manifest().banks.begin()->first;
  std::vector<ExpertUse> earlier = {{layer, 9, 1}, {999, 0, 50}, {layer, 100000, 40}};
  for (int e = 0; e < 2 * K; e++) earlier.push_back({layer, e, (uint64_t)(100 - e)});
  const size_t queued = st.warm(earlier);
  EXPECT_EQ(queued, (size_t)(st.n_slots() - K));
  await_bytes(st, queued);
  EXPECT_EQ(st.stats().warmed, queued);
  // The most used: experts 0..queued-1 are resident, so demanding them reads nothing.
  std::vector<int> top;
  for (int e = 0; e < (int)queued; e++) top.push_back(e);
  ExpertStats before = st.stats();
  fetch(st, layer, top);
  EXPECT_EQ(st.stats().misses, before.misses);
  EXPECT_EQ(st.stats().hits - before.hits, queued);
  EXPECT_EQ(st.stats().prefetch_used, 0u);  // warm reads are not lookahead guesses
  // Counts carry forward, demands added: expert 0 was used 100 times before and once now.
  std::vector<ExpertUse> u = st.usage();
  ASSERT_FALSE(u.empty());
  EXPECT_EQ(u[0].layer, layer);
  EXPECT_EQ(u[0].expert, 0);
  EXPECT_EQ(u[0].uses, 101u);
  for (const ExpertUse& x : u) EXPECT_NE(x.layer, 999);
}

INSTANTIATE_TEST_SUITE_P(Backend, ExpertStoreTest,
                         ::testing::Values(IoBackend::kUring, IoBackend::kThreads),
                         [](const auto& param_info) {
                           return std::string(param_info.param == IoBackend::kUring ? "Uring"
                                                                                    : "Threads");
                         });

}  // namespace
}  // namespace waste
