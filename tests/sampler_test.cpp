// The token sampler: greedy ties, seeded reproducibility, the sampled distribution against a
// double-precision softmax, top-k / top-p / min-p keeping exactly the ids they should (ties to the
// lower id), each penalty moving exactly the right logits by the right amount, logit_bias, the
// constraint mask, NaN logits, validation messages, and the vector tables agreeing bit for bit.
#include "engine/model/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/base/hash.h"
#include "engine/model/sampler_lanes.h"

namespace waste {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

SamplerParams seeded(float temperature, uint64_t seed = 42) {
  SamplerParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

std::vector<int> draws(Sampler& s, const std::vector<float>& logits, int n,
                       const std::vector<int32_t>& history = {}, const uint8_t* mask = nullptr) {
  std::vector<int> out;
  for (int i = 0; i < n; i++) out.push_back(s.sample(logits, history, mask));
  return out;
}

std::vector<int> draws(SamplerParams p, const std::vector<float>& logits, int n) {
  Sampler s(std::move(p), (int)logits.size());
  return draws(s, logits, n);
}

std::set<int> distinct(const std::vector<int>& ids) {
  return {ids.begin(), ids.end()};
}

std::vector<double> softmax(const std::vector<float>& logits, double temperature) {
  double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < p.size(); i++) p[i] = std::exp((logits[i] - max) / temperature);
  double sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (double& x : p) x /= sum;
  return p;
}

// Pearson's chi-square of observed draws against expected probabilities, pooling the categories
// expected fewer than 5 times, checked at p = 0.001 (Wilson-Hilferty critical value). The seed is
// fixed, so the outcome is too: this guards against a wrong distribution, not bad luck.
void expect_matches(const std::vector<int>& ids, const std::vector<double>& expected) {
  double n = (double)ids.size();
  std::vector<double> seen(expected.size(), 0.0);
  for (int id : ids) seen.at(id) += 1;
  double chi2 = 0, pooled_seen = 0, pooled_expected = 0;
  int categories = 0;
  for (size_t i = 0; i < expected.size(); i++) {
    if (expected[i] == 0) {
      EXPECT_EQ(seen[i], 0) << "id " << i << " cannot be drawn";
    }
    double e = expected[i] * n;
    if (e < 5) {
      pooled_seen += seen[i];
      pooled_expected += e;
      continue;
    }
    chi2 += (seen[i] - e) * (seen[i] - e) / e;
    categories++;
  }
  if (pooled_expected >= 5) {
    chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected;
    categories++;
  } else {
    EXPECT_LE(pooled_seen, 20) << "ids expected almost never were drawn " << pooled_seen
                               << " times";
  }
  double df = categories - 1, z = 3.09;
  double critical = df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3);
  EXPECT_LT(chi2, critical) << "chi-square " << chi2 << " over " << df << " degrees of freedom";
}

// Greedy choice between `logit` (token 0) and a reference (token 1, never in `history`; token 2
// stands for other generated tokens): tells whether the penalized logit ended below the reference.
bool penalized_below(SamplerParams p, float logit, float reference,
                     const std::vector<int32_t>& history) {
  p.temperature = 0;
  Sampler s(std::move(p), 3);
  return s.sample(std::vector<float>{logit, reference, -50.0f}, history) == 1;
}

// The penalized logit of token 0 lies within 0.01 of `expected`.
void expect_penalized(const SamplerParams& p, float logit, float expected,
                      const std::vector<int32_t>& history) {
  EXPECT_TRUE(penalized_below(p, logit, expected + 0.01f, history)) << logit << " -> " << expected;
  EXPECT_FALSE(penalized_below(p, logit, expected - 0.01f, history)) << logit << " -> " << expected;
}

std::string usage_error(const SamplerParams& p, int vocab = 10) {
  try {
    validate(p, vocab);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Sampler, GreedyPicksMaxAndBreaksTiesToLowestId) {
  Sampler s(seeded(0), 6);
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 2, 0, -1, 2.5f}, {}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{1, 3, 2, 3, -1, 3}, {}), 1);
  EXPECT_EQ(s.sample(std::vector<float>{5, 5, 5, 5, 5, 5}, {}), 0);
  EXPECT_EQ(s.sample(std::vector<float>{-kInf, -7, -7, -kInf, -8, -7}, {}), 1);
}

TEST(Sampler, GreedyTiesAcrossVectorLanesGoToLowestId) {
  std::vector<float> logits(1000, 0.0f);
  for (int id : {999, 517, 130, 64, 63, 9}) logits[id] = 4.0f;
  Sampler s(seeded(0), 1000);
  EXPECT_EQ(s.sample(logits, {}), 9);
  logits[9] = 3.0f;
  EXPECT_EQ(s.sample(logits, {}), 63);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  std::vector<float> logits(300);
  for (int i = 0; i < 300; i++) logits[i] = (float)std::sin(i * 0.37) * 2;
  auto a = draws(seeded(1.0f, 7), logits, 200);
  auto b = draws(seeded(1.0f, 7), logits, 200);
  auto c = draws(seeded(1.0f, 8), logits, 200);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Sampler, UnseededRequestsGetDistinctReportedSeeds) {
  SamplerParams p;
  Sampler a(p, 100), b(p, 100);
  EXPECT_NE(a.seed(), b.seed());
  std::vector<float> logits(100, 0.0f);
  // The reported seed reproduces the stream.
  Sampler replay(seeded(1.0f, a.seed()), 100);
  EXPECT_EQ(draws(a, logits, 50), draws(replay, logits, 50));
}

// A reply's seed: the request's wins over the server's, and only with neither is one drawn.
TEST(Sampler, ReplySeedPrefersTheRequestThenTheServer) {
  EXPECT_EQ(reply_seed(5, 9), 5u);
  EXPECT_EQ(reply_seed(0, 9), 0u);  // a request's seed 0 is a seed, not "none"
  EXPECT_EQ(reply_seed(std::nullopt, 9), 9u);
  EXPECT_NE(reply_seed(std::nullopt), reply_seed(std::nullopt));
}

TEST(Sampler, DistributionMatchesSoftmaxAtTemperatureOne) {
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f, -2.0f, 0.75f};
  expect_matches(draws(seeded(1.0f), logits, 20000), softmax(logits, 1.0));
}

TEST(Sampler, DistributionMatchesSoftmaxAtOtherTemperatures) {
  std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};
  expect_matches(draws(seeded(0.6f, 3), logits, 20000), softmax(logits, 0.6));
  expect_matches(draws(seeded(1.7f, 4), logits, 20000), softmax(logits, 1.7));
}

// Several blocks of the dense draw, heavy ids spread across them and a light tail.
TEST(Sampler, DistributionMatchesSoftmaxOverALargeVocabulary) {
  std::vector<float> logits(5000, -3.0f);
  for (int id : {3, 700, 701, 2048, 4095, 4999}) logits[id] = 2.0f + id % 3;
  expect_matches(draws(seeded(1.0f, 5), logits, 20000), softmax(logits, 1.0));
}

TEST(Sampler, TopKOneEqualsGreedy) {
  std::mt19937 g(1);
  std::normal_distribution<float> normal(0, 2);
  for (int trial = 0; trial < 20; trial++) {
    std::vector<float> logits(777);
    for (float& x : logits) x = normal(g);
    logits[trial * 31] = logits[trial * 31 + 1] = 9.0f;  // a tie for the top
    SamplerParams p = seeded(1.5f, trial);
    p.top_k = 1;
    Sampler topk(p, 777), greedy(seeded(0), 777);
    EXPECT_EQ(topk.sample(logits, {}), greedy.sample(logits, {}));
  }
}

TEST(Sampler, TopKKeepsTheKBestWithTiesToLowerIds) {
  // Small k (heap) and large k (nth_element): all logits tie, so exactly ids [0, k) survive.
  for (auto [vocab, k] : {std::pair{200, 10}, std::pair{12000, 5000}}) {
    std::vector<float> logits(vocab, 1.0f);
    SamplerParams p = seeded(1.0f);
    p.top_k = k;
    auto ids = draws(p, logits, k <= 10 ? 20000 : 2000);
    EXPECT_LT(*std::max_element(ids.begin(), ids.end()), k) << "k " << k;
    if (k <= 10) {
      EXPECT_EQ(distinct(ids).size(), (size_t)k);
    }
  }
}

// Large k estimates a floor from every 16th id; here those ids hold the best logits, so the
// estimate keeps too few and every finite logit is considered instead.
TEST(Sampler, LargeTopKRecoversFromAShortEstimate) {
  std::vector<float> logits(12000, 0.0f);
  std::vector<int> rest;
  for (int id = 0; id < 12000; id++) {
    if (id % 16 == 0)
      logits[id] = 1.0f;
    else
      rest.push_back(id);
  }
  SamplerParams p = seeded(20.0f);  // nearly uniform over the survivors
  p.top_k = 5000;                   // the 750 ids at 1.0, then the 4250 lowest others
  auto ids = draws(p, logits, 20000);
  int last = rest[5000 - 750 - 1];
  for (int id : ids) ASSERT_TRUE(id % 16 == 0 || id <= last) << id;
  EXPECT_TRUE(distinct(ids).count(0));
  EXPECT_GT(*std::max_element(ids.begin(), ids.end()), last - 100);
}

TEST(Sampler, TopKLargerThanTheFiniteLogitsKeepsThemAll) {
  std::vector<float> logits(12000, 0.0f);
  std::vector<uint8_t> mask(1500, 0);
  for (int b = 0; b < 1500; b += 25) mask[b] = 0xFF;  // 480 allowed ids
  SamplerParams p = seeded(1.0f);
  p.top_k = 1000;
  Sampler s(p, 12000);
  EXPECT_EQ(distinct(draws(s, logits, 20000, {}, mask.data())).size(), 480u);
}

TEST(Sampler, TopKRenormalizesOverTheSurvivors) {
  std::vector<float> logits = {0.0f, 2.0f, -1.0f, 1.0f, 0.5f, -3.0f};
  SamplerParams p = seeded(1.0f);
  p.top_k = 3;
  std::vector<float> kept = {-kInf, 2.0f, -kInf, 1.0f, 0.5f, -kInf};
  expect_matches(draws(p, logits, 20000), softmax(kept, 1.0));
}

TEST(Sampler, SmallTopPKeepsOnlyTheTopToken) {
  std::vector<float> logits = {0.5f, 1.0f, 0.9f, 0.0f, 0.95f};
  SamplerParams p = seeded(1.0f);
  p.top_p = 0.01f;
  EXPECT_EQ(distinct(draws(p, logits, 2000)), std::set<int>{1});
}

TEST(Sampler, TopPKeepsTheSmallestPrefixReachingTheMass) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  SamplerParams p = seeded(1.0f);
  p.top_p = 0.75f;
  auto ids = draws(p, logits, 20000);
  expect_matches(ids, {0, 0.5 / 0.8, 0, 0.3 / 0.8});
  p.top_p = 0.85f;
  ids = draws(p, logits, 20000);
  expect_matches(ids, {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95});
}

// Large vocabulary: the top-p candidates are found from an estimate, checked exactly.
TEST(Sampler, TopPOverALargeVocabularyKeepsExactlyThePrefix) {
  int vocab = 163840;
  std::mt19937 g(5);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(vocab);
  for (float& x : logits) x = normal(g);
  std::vector<double> prob = softmax(logits, 0.8);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return prob[a] > prob[b]; });
  // top_p halfway between two prefix masses, so rounding cannot move the cut.
  double mass = 0;
  size_t keep = 0;
  while (mass < 0.9) mass += prob[order[keep++]];
  float top_p = (float)(mass - prob[order[keep - 1]] / 2);
  SamplerParams p = seeded(0.8f);
  p.top_p = top_p;
  Sampler s(p, vocab);
  std::set<int> allowed(order.begin(), order.begin() + keep);
  for (int id : draws(s, logits, 500)) ASSERT_TRUE(allowed.count(id)) << id;
}

// The estimate reads every 16th id; mass hidden from it makes the exact check fail, and the
// sampler must retry lower and, failing again, take every id. Equal weights also test the
// lower-id tie rule at the cut.
TEST(Sampler, TopPFindsMassTheEstimateMisses) {
  int vocab = 163840;
  for (float hidden_logit : {-2.2f, -9.2f}) {  // weights 0.11 and 1e-4 of the top one
    std::vector<float> logits(vocab, -80.0f);
    logits[5] = 0.0f;
    int hidden = hidden_logit > -5 ? 1000 : 150000;
    std::vector<int> hidden_ids;
    for (int id = 7; (int)hidden_ids.size() < hidden; id++) {
      if (id % 16 == 0) continue;
      logits[id] = hidden_logit;
      hidden_ids.push_back(id);
    }
    double w = std::exp((double)hidden_logit), total = 1 + hidden * w;
    double needed = (0.5 * total - 1) / w;  // hidden ids needed after the top one
    ASSERT_GT(needed - std::floor(needed), 0.1);
    ASSERT_LT(needed - std::floor(needed), 0.9);
    int kept = (int)std::ceil(needed);
    SamplerParams p = seeded(1.0f);
    p.top_p = 0.5f;
    Sampler s(p, vocab);
    auto ids = draws(s, logits, hidden == 1000 ? 2000 : 100);
    std::set<int> allowed(hidden_ids.begin(), hidden_ids.begin() + kept);
    allowed.insert(5);
    for (int id : ids) ASSERT_TRUE(allowed.count(id)) << id;
    if (hidden == 1000) {  // the ids just before the cut are drawn too
      auto seen = distinct(ids);
      EXPECT_TRUE(std::any_of(hidden_ids.begin() + kept - 10, hidden_ids.begin() + kept,
                              [&](int id) { return seen.count(id) > 0; }));
    }
  }
}

TEST(Sampler, MinPDropsTokensBelowTheFractionOfTheTop) {
  std::vector<float> logits = {-2.0f, 0.0f, -1.0f, -3.0f, -0.5f};
  SamplerParams p = seeded(1.0f);
  p.min_p = (float)std::exp(-1.5);  // keeps logits within 1.5 of the top
  std::vector<float> kept = {-kInf, 0.0f, -1.0f, -kInf, -0.5f};
  expect_matches(draws(p, logits, 20000), softmax(kept, 1.0));
  p.min_p = 1.0f;
  EXPECT_EQ(distinct(draws(p, logits, 500)), std::set<int>{1});
}

// min_p keeps exactly the weights >= min_p (the top weight is 1), so it measures a weight: a
// threshold just above exp(-d) must drop the second token and one just below must keep it.
TEST(Sampler, WeightsAreAccurateToFiveDigits) {
  for (float d : {0.05f, 0.3f, 0.69f, 1.5f, 3.0f, 6.0f}) {
    std::vector<float> logits = {0.0f, -d};
    double w = std::exp(-(double)d);
    SamplerParams p = seeded(1.0f);
    p.min_p = (float)(w * (1 + 1e-5));
    EXPECT_EQ(distinct(draws(p, logits, 2000)), std::set<int>{0}) << "d " << d;
    p.min_p = (float)(w * (1 - 1e-5));
    EXPECT_TRUE(distinct(draws(p, logits, (int)(30 / w))).count(1)) << "d " << d;
  }
}

TEST(Sampler, MinPOverALargeVocabulary) {
  std::vector<float> logits(100000, -10.0f);
  logits[40000] = 0.0f;
  logits[77777] = -0.5f;
  logits[99999] = -2.0f;
  SamplerParams p = seeded(1.0f);
  p.min_p = 0.3f;
  EXPECT_EQ(distinct(draws(p, logits, 500)), (std::set<int>{40000, 77777}));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  SamplerParams p;
  p.repetition_penalty = 2.0f;
  expect_penalized(p, 4.0f, 2.0f, {0});
  expect_penalized(p, -1.0f, -2.0f, {0});
  expect_penalized(p, 4.0f, 2.0f, {0, 0, 0});  // once per id, however often it occurs
  expect_penalized(p, 4.0f, 4.0f, {2});        // ids not in history keep their logit
  p.repetition_penalty = 0.5f;
  expect_penalized(p, 3.0f, 6.0f, {0});
}

TEST(Sampler, FrequencyPenaltyScalesWithCount) {
  SamplerParams p;
  p.frequency_penalty = 0.5f;
  expect_penalized(p, 3.0f, 2.5f, {0});
  expect_penalized(p, 3.0f, 1.5f, {0, 2, 0, 0});
  expect_penalized(p, 3.0f, 3.0f, {2, 2});
  p.frequency_penalty = -1.0f;
  expect_penalized(p, 3.0f, 5.0f, {0, 0});
}

TEST(Sampler, PresencePenaltyAppliesOnceToPresentIds) {
  SamplerParams p;
  p.presence_penalty = 0.75f;
  expect_penalized(p, 3.0f, 2.25f, {0});
  expect_penalized(p, 3.0f, 2.25f, {0, 0, 0});
  expect_penalized(p, 3.0f, 3.0f, {2});
}

TEST(Sampler, PenaltiesCombineInOrder) {
  SamplerParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  expect_penalized(p, 6.0f, 6.0f / 2 - 3 * 0.5f - 0.25f, {0, 0, 0});
  // The reference token was generated too: it is penalized the same way.
  Sampler s(
      [&] {
        SamplerParams q = p;
        q.temperature = 0;
        return q;
      }(),
      3);
  std::vector<float> logits = {5.0f, 4.0f, 1.0f};
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0, 1, 1, 1, 1}), 0);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{0, 0, 0, 0, 1}), 1);
}

TEST(Sampler, LogitBiasAddsAndMinusHundredBans) {
  std::vector<float> logits = {10.0f, 0.0f, 0.0f, 0.0f};
  SamplerParams p = seeded(1.0f);
  p.logit_bias = {{0, -100.0f}};
  auto ids = draws(p, logits, 5000);
  EXPECT_FALSE(distinct(ids).count(0));
  expect_matches(ids, {0, 1 / 3.0, 1 / 3.0, 1 / 3.0});
  p.temperature = 0;
  p.logit_bias = {{2, 10.5f}};
  EXPECT_EQ(draws(p, logits, 1), std::vector<int>{2});
}

TEST(Sampler, MaskRestrictsChoices) {
  std::vector<float> logits(20, 0.0f);
  logits[3] = 50.0f;                                       // best, but disallowed
  uint8_t mask[3] = {0b00000000, 0b10000010, 0b00001000};  // ids 9, 15, 19
  Sampler s(seeded(1.0f), 20);
  EXPECT_EQ(distinct(draws(s, logits, 2000, {}, mask)), (std::set<int>{9, 15, 19}));
  Sampler greedy(seeded(0), 20);
  EXPECT_EQ(greedy.sample(logits, {}, mask), 9);
}

TEST(Sampler, MaskBitsPastTheVocabularyDoNotCount) {
  std::vector<float> logits(10, 0.0f);
  uint8_t mask[2] = {0, 0b11111100};  // only bits for ids 10..15, which do not exist
  Sampler s(seeded(1.0f), 10);
  EXPECT_THROW(s.sample(logits, {}, mask), UsageError);
  mask[1] = 0b00000010;  // id 9
  EXPECT_EQ(s.sample(logits, {}, mask), 9);
}

TEST(Sampler, AllZeroMaskThrows) {
  std::vector<float> logits(100, 0.0f);
  std::vector<uint8_t> mask(13, 0);
  Sampler s(seeded(1.0f), 100);
  try {
    s.sample(logits, {}, mask.data());
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "constraint left no allowed token");
  }
}

TEST(Sampler, MaskWorksWithEveryStage) {
  std::mt19937 g(2);
  std::normal_distribution<float> normal(0, 2);
  std::vector<float> logits(3000);
  for (float& x : logits) x = normal(g);
  std::vector<uint8_t> mask(375, 0);
  std::set<int> allowed;
  for (int id = 11; id < 3000; id += 97) {
    mask[id / 8] |= 1 << (id % 8);
    allowed.insert(id);
  }
  for (int variant = 0; variant < 4; variant++) {
    SamplerParams p = seeded(1.0f, variant);
    if (variant == 1) p.top_k = 5;
    if (variant == 2) p.top_p = 0.5f;
    if (variant == 3) p.min_p = 0.05f;
    Sampler s(p, 3000);
    for (int id : draws(s, logits, 500, {}, mask.data())) ASSERT_TRUE(allowed.count(id)) << id;
  }
}

TEST(Sampler, NaNLogitsAreNeverChosen) {
  std::vector<float> logits(40, 0.0f);
  for (int id : {0, 1, 7, 8, 23, 39}) logits[id] = kNaN;
  Sampler greedy(seeded(0), 40), sampled(seeded(1.0f), 40);
  EXPECT_EQ(greedy.sample(logits, {}), 2);
  for (int id : draws(sampled, logits, 5000)) ASSERT_FALSE(std::isnan(logits[id])) << id;
  SamplerParams p = seeded(1.0f);
  p.top_k = 3;
  p.top_p = 0.9f;
  Sampler filtered(p, 40);
  for (int id : draws(filtered, logits, 2000)) ASSERT_FALSE(std::isnan(logits[id])) << id;
}

TEST(Sampler, NoFiniteLogitThrows) {
  Sampler s(seeded(1.0f), 3);
  EXPECT_THROW(s.sample(std::vector<float>{kNaN, -kInf, kNaN}, {}), UsageError);
}

TEST(Sampler, InfiniteLogitWins) {
  std::vector<float> logits = {1.0f, kInf, 3.0f, kInf};
  Sampler greedy(seeded(0), 4), sampled(seeded(1.0f), 4);
  EXPECT_EQ(greedy.sample(logits, {}), 1);
  EXPECT_EQ(distinct(draws(sampled, logits, 1000)), (std::set<int>{1, 3}));
}

TEST(Sampler, BadInputsNameTheirField) {
  Sampler s(seeded(1.0f), 10);
  std::vector<float> logits(10, 0.0f);
  try {
    s.sample(std::vector<float>(9, 0.0f), {});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("logits"), std::string::npos) << e.what();
  }
  SamplerParams p = seeded(0);
  p.presence_penalty = 1;
  Sampler penalized(p, 10);
  try {
    penalized.sample(logits, std::vector<int32_t>{1, 2, 10});
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("history"), std::string::npos) << e.what();
  }
  // The failed call left no counts behind: id 1 is penalized (5 - 1 < 4.5) on its next use.
  std::vector<float> next = {0, 5, 4.5f, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(penalized.sample(next, std::vector<int32_t>{1}), 2);
}

TEST(Sampler, ValidationNamesTheField) {
  auto with = [](auto set) {
    SamplerParams p;
    set(p);
    return p;
  };
  EXPECT_EQ(usage_error(SamplerParams{}), "");
  struct Case {
    SamplerParams p;
    const char* field;
  };
  std::vector<Case> cases = {
      {with([](SamplerParams& p) { p.logprobs = 21; }), "top_logprobs"},
      {with([](SamplerParams& p) { p.temperature = -0.1f; }), "temperature"},
      {with([](SamplerParams& p) { p.temperature = kNaN; }), "temperature"},
      {with([](SamplerParams& p) { p.top_k = -1; }), "top_k"},
      {with([](SamplerParams& p) { p.top_p = 0; }), "top_p"},
      {with([](SamplerParams& p) { p.top_p = 1.01f; }), "top_p"},
      {with([](SamplerParams& p) { p.top_p = kNaN; }), "top_p"},
      {with([](SamplerParams& p) { p.min_p = -0.01f; }), "min_p"},
      {with([](SamplerParams& p) { p.min_p = 1.5f; }), "min_p"},
      {with([](SamplerParams& p) { p.repetition_penalty = 0; }), "repetition_penalty"},
      {with([](SamplerParams& p) { p.repetition_penalty = kNaN; }), "repetition_penalty"},
      {with([](SamplerParams& p) { p.presence_penalty = 2.5f; }), "presence_penalty"},
      {with([](SamplerParams& p) { p.presence_penalty = kNaN; }), "presence_penalty"},
      {with([](SamplerParams& p) { p.frequency_penalty = -2.01f; }), "frequency_penalty"},
      {with([](SamplerParams& p) {
         p.logit_bias = {{10, 1.0f}};
       }),
       "logit_bias"},
      {with([](SamplerParams& p) {
         p.logit_bias = {{-1, 1.0f}};
       }),
       "logit_bias"},
      {with([](SamplerParams& p) {
         p.logit_bias = {{3, 100.5f}};
       }),
       "logit_bias"},
  };
  for (const Case& c : cases) {
    std::string msg = usage_error(c.p);
    EXPECT_EQ(msg.rfind(c.field, 0), 0u) << "'" << msg << "' should start with " << c.field;
  }
  EXPECT_THROW(Sampler(with([](SamplerParams& p) { p.top_p = 0; }), 10), UsageError);
  // The edges of each range are allowed.
  SamplerParams edges;
  edges.temperature = 0;
  edges.top_p = 1;
  edges.min_p = 1;
  edges.presence_penalty = -2;
  edges.frequency_penalty = 2;
  edges.logit_bias = {{0, -100.0f}, {9, 100.0f}};
  EXPECT_EQ(usage_error(edges), "");
}

// The baseline (SSE2) and AVX2 tables must give the same tokens for the same seed.
// The report is log softmax(logits / T) over what the mask allows, checked against a double
// reference computed here; top-k and top-p do not change it, and the top list is the best ids in
// order, ties to the lower id.
TEST(Sampler, LogprobsAreTheMaskedSoftmaxBeforeTheCuts) {
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, 2.5f, -4.0f};
  std::vector<uint8_t> mask = {0xFF & ~(1u << 6)};  // id 6 disallowed
  std::vector<float> allowed = logits;
  allowed[6] = -std::numeric_limits<float>::infinity();
  for (float t : {0.7f, 1.0f, 1.6f}) {
    std::vector<double> ref = softmax(allowed, t);
    for (int variant = 0; variant < 3; variant++) {
      SamplerParams p = seeded(t, 9);
      p.logprobs = 3;
      if (variant == 1) p.top_k = 2;
      if (variant == 2) p.top_p = 0.5f;
      Sampler s(p, (int)logits.size());
      for (int i = 0; i < 20; i++) {
        int id = s.sample(logits, {}, mask.data());
        const TokenLogprobs& r = s.last_logprobs();
        EXPECT_EQ(r.id, id);
        EXPECT_NEAR(r.logprob, std::log(ref[id]), 1e-5) << "T " << t << " id " << id;
        ASSERT_EQ(r.top.size(), 3u);
        EXPECT_EQ(r.top[0].first, 1);  // 3.0 twice: the lower id first
        EXPECT_EQ(r.top[1].first, 3);
        EXPECT_EQ(r.top[2].first, 2);  // 2.5 (id 6) is masked
        for (auto [tid, lp] : r.top) EXPECT_NEAR(lp, std::log(ref[tid]), 1e-5);
      }
    }
  }
}

TEST(Sampler, GreedyLogprobsUseTemperatureOne) {
  std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  SamplerParams p = seeded(0);
  p.logprobs = 0;
  Sampler s(p, 3);
  EXPECT_EQ(s.sample(logits, {}), 1);
  EXPECT_NEAR(s.last_logprobs().logprob, std::log(softmax(logits, 1.0)[1]), 1e-6);
  EXPECT_TRUE(s.last_logprobs().top.empty());
}

// Placement never changes results: asking for the report draws the same ids.
TEST(Sampler, ReportingLogprobsDrawsTheSameIds) {
  std::mt19937 g(5);
  std::normal_distribution<float> normal(0, 2);
  std::vector<float> logits(5000);
  for (float& x : logits) x = normal(g);
  for (int variant = 0; variant < 3; variant++) {
    SamplerParams p = seeded(0.8f, 11);
    if (variant == 1) p.top_k = 40;
    if (variant == 2) p.top_p = 0.9f;
    SamplerParams q = p;
    q.logprobs = 20;
    EXPECT_EQ(draws(p, logits, 200), draws(q, logits, 200)) << "variant " << variant;
  }
}

TEST(Sampler, VectorTablesAgreeBitForBit) {
  std::mt19937 g(9);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(20001);
  for (float& x : logits) x = normal(g);
  logits[77] = kNaN;
  std::vector<uint8_t> mask(2501, 0xFF);
  mask[3] = 0x5A;
  const char* outer = std::getenv("WASTE_ISA");
  std::string saved = outer ? outer : "";
  auto run = [&](const char* isa) {
    if (isa) setenv("WASTE_ISA", isa, 1);
    if (!isa) unsetenv("WASTE_ISA");
    std::vector<int> out;
    for (int variant = 0; variant < 4; variant++) {
      SamplerParams p = seeded(0.9f, variant);
      if (variant == 1) p.top_k = 50;
      if (variant == 2) p.top_p = 0.8f;
      if (variant == 3) {
        p.min_p = 0.01f;
        p.repetition_penalty = 1.3f;
      }
      Sampler s(p, 20001);
      std::vector<int32_t> history = {1, 2, 3};
      for (int i = 0; i < 300; i++) out.push_back(s.sample(logits, history, mask.data()));
    }
    return out;
  };
  const std::vector<int> baseline = run("scalar");
  EXPECT_EQ(run(nullptr), baseline);
  if (outer) setenv("WASTE_ISA", saved.c_str(), 1);
  if (!outer) unsetenv("WASTE_ISA");  // the tests after this one run on this CPU's own choice
}

// Every pass's output from one table, hashed: weights and block sums at K3's vocabulary (every
// weight a normal float, so the exp polynomial runs in full), the loaded logits with a NaN and a
// mask, the maximum, a cut, the collected candidates and a top-k heap.
uint64_t pass_outputs(const SamplerKernels& k) {
  constexpr size_t kVocab = 163840;  // a whole number of blocks
  std::vector<float> logits(kVocab);
  uint32_t h = 1;
  for (float& x : logits) {  // in [-16, 16), every value exact; no library distribution
    h = h * 1664525u + 1013904223u;
    x = (float)((int32_t)(h >> 12) - (1 << 19)) / 32768.0f;
  }
  logits[77] = kNaN;
  std::vector<uint8_t> mask(kVocab / 8, 0xFF);
  mask[3] = 0x5A;
  std::vector<float> x(kVocab), w(kVocab);
  std::vector<double> sums(kVocab / 256);
  StreamHash out;
  SamplerKernels::Cand best = k.load(logits.data(), x.data(), kVocab, mask.data());
  out.add(x.data(), kVocab * sizeof(float));
  SamplerKernels::Cand again = k.find_max(x.data(), kVocab);
  double total = k.weights(x.data(), w.data(), sums.data(), sums.size(), best.first, 1 / 0.7f);
  out.add(w.data(), kVocab * sizeof(float));
  out.add(sums.data(), sums.size() * sizeof(double));
  out.add(&total, sizeof total);
  std::vector<SamplerKernels::Cand> cands(kVocab);
  size_t n = k.collect(w.data(), kVocab, 0.01f, cands.data());
  out.add(cands.data(), n * sizeof(cands[0]));
  n = k.top_k(x.data(), kVocab, 40, cands.data());
  out.add(cands.data(), n * sizeof(cands[0]));
  k.cut(x.data(), kVocab, x[1000], 1000, -1.0f);
  out.add(x.data(), kVocab * sizeof(float));
  for (const SamplerKernels::Cand& c : {best, again}) {
    out.add(&c.first, sizeof c.first);
    out.add(&c.second, sizeof c.second);
  }
  return out.digest();
}

// The passes' bits, beyond what the draws show (a draw moves only when a weight's last bit lands
// on a boundary, so a fused multiply-add in one table would pass the test above): the vector
// table gives the baseline's bits, and both give the same bits on every machine, x86-64 or arm64.
TEST(Sampler, PassesGiveTheSameBitsOnEveryMachine) {
  const uint64_t baseline = pass_outputs(baseline_sampler_kernels());
  EXPECT_EQ(baseline, 15405626166615093028ull);
  if (detect_isa() == Isa::kScalar || !vector_sampler_kernels()) GTEST_SKIP() << "no wider table";
  EXPECT_EQ(pass_outputs(*vector_sampler_kernels()), baseline);
}

}  // namespace
}  // namespace waste
