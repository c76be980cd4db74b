// The Decoder (server/runtime/decoder.h), the one decode loop of the daemon and the CLI: its end
// rules, forced tokens, stop strings, cancellation and the prefix snapshots it takes, on a tiny
// synthetic Kimi-Linear model. Logit biases make the model write what a rule needs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "engine/base/error.h"
#include "engine/synth/synth.h"
#include "prompt_templates/chat_format.h"
#include "server/runtime/decoder.h"
#include "server/runtime/model_host.h"
#include "tests/test_util.h"

namespace waste {
namespace {

// Records what reaches the sink; cancels once `cancel_after` tokens were chosen, or once
// `cancel_after_windows` prefill windows are done (-1: never).
class RecordingSink final : public ReplySink {
 public:
  bool cancelled() override {
    return (cancel_after >= 0 && (int)ids.size() >= cancel_after) ||
           (cancel_after_windows >= 0 && (int)progress.size() >= cancel_after_windows);
  }
  void prefill_progress(size_t done, size_t total) override { progress.push_back({done, total}); }
  void on_token(int32_t id, const TokenLogprobs* lp) override {
    ids.push_back(id);
    if (by_choice.size() <= current) by_choice.resize(current + 1);
    by_choice[current].push_back(id);
    if (lp) reports.push_back(*lp);
  }
  void on_prompt_token(int32_t id, const TokenLogprobs* lp) override {
    prompt.push_back({id, lp ? std::optional<float>(lp->logprob) : std::nullopt});
  }
  void begin_choice(size_t index) override {
    choices.push_back(index);
    current = index;
  }
  bool interleaves() const override { return interleave; }
  void on_event(const ReplyEvent& e) override {
    if (e.kind == ReplyEvent::Kind::kContent) content += e.text;
    if (e.kind == ReplyEvent::Kind::kEnd) ended++;
  }

  int cancel_after = -1;
  int cancel_after_windows = -1;
  std::vector<int32_t> ids;
  std::vector<TokenLogprobs> reports;
  std::vector<std::pair<int32_t, std::optional<float>>> prompt;
  std::vector<size_t> choices;
  bool interleave = false;  // replies may take turns
  size_t current = 0;
  std::vector<std::vector<int32_t>> by_choice;  // each reply's ids
  std::vector<std::pair<size_t, size_t>> progress;
  std::string content;
  int ended = 0;
};

class DecoderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 3});
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    EngineOptions eo;
    eo.threads = 2;
    eo.chunk = 4;
    host_ = std::make_unique<ModelHost>((dir_->path() / "kl.waste").string(), eo);
    format_ = std::make_unique<ChatFormat>(*host_->tokenizer(), host_->eos(), ChatDefaults{});
  }

  const Tokenizer& tok() const { return *host_->tokenizer(); }
  int32_t id_of(const std::string& text) const {
    std::vector<int> ids = tok().encode_text(text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.at(0);
  }

  // A greedy input over `prompt` that never picks an end id unless told to.
  DecodeInput input(std::vector<int32_t> prompt, int64_t max_new) const {
    DecodeInput in;
    in.prompt = std::move(prompt);
    in.end_ids = format_->end_ids();
    in.sampler.temperature = 0;
    in.max_new = max_new;
    for (int32_t end : in.end_ids) in.sampler.logit_bias.push_back({end, -100});
    return in;
  }

  DecodeResult run(DecodeInput& in, RecordingSink& sink, PrefixCache* cache = nullptr,
                   int64_t ctx = 256) {
    Session s = host_->model().new_session(ctx);
    Decoder d(host_->model(), cache);
    auto parser = format_->parser(false, 1);
    return d.run(s, in, parser.get(), sink);
  }

  // log softmax(logits(prefix) + bias) / t in double, from a fresh session fed `prefix` whole:
  // the reference for the sampler's reports.
  std::vector<double> reference_logprobs(const std::vector<int32_t>& prefix, const DecodeInput& in,
                                         double t) {
    Session s = host_->model().new_session(256);
    std::vector<float> logits(host_->model().config().vocab);
    host_->model().forward(s, prefix, logits.data());
    for (auto [id, bias] : in.sampler.logit_bias) logits[id] += bias;
    double max = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (float x : logits) sum += std::exp((x - max) / t);
    std::vector<double> out;
    for (float x : logits) out.push_back((x - max) / t - std::log(sum));
    return out;
  }

  static test::TempDir* dir_;
  std::unique_ptr<ModelHost> host_;
  std::unique_ptr<ChatFormat> format_;
};

test::TempDir* DecoderTest::dir_ = nullptr;

TEST_F(DecoderTest, AnEndIdEndsTheReplyAndIsNotContent) {
  ASSERT_FALSE(format_->end_ids().empty());
  for (int32_t end : format_->end_ids()) {
    DecodeInput in = input({1, 2, 3}, 20);
    in.sampler.logit_bias = {{end, 100}};
    RecordingSink sink;
    DecodeResult r = run(in, sink);
    EXPECT_EQ(r.finish, Finish::kEnd);
    EXPECT_EQ(r.tokens, std::vector<int32_t>{end});
    EXPECT_EQ(sink.content, "");
    EXPECT_EQ(sink.ended, 1);
  }
}

TEST_F(DecoderTest, MaxNewEndsWithLength) {
  DecodeInput in = input({1, 2, 3}, 5);
  RecordingSink sink;
  DecodeResult r = run(in, sink);
  EXPECT_EQ(r.finish, Finish::kLength);
  EXPECT_EQ(r.tokens.size(), 5u);
  EXPECT_EQ(sink.ids, r.tokens);
  EXPECT_EQ(sink.ended, 1);  // the parser is finished even when the budget ran out
}

TEST_F(DecoderTest, AFullContextEndsWithLength) {
  DecodeInput in = input({1, 2, 3}, 100);
  RecordingSink sink;
  DecodeResult r = run(in, sink, nullptr, /*ctx=*/6);
  EXPECT_EQ(r.finish, Finish::kLength);
  // The prompt and the reply together fit the context, as the daemon's reply budget counts it.
  EXPECT_EQ(r.tokens.size(), 3u);
}

TEST_F(DecoderTest, AStopStringEndsTheReplyAndIsNeverShown) {
  const int32_t x = id_of("X");
  const int32_t y = id_of("Y");
  DecodeInput in = input({1, 2}, 20);
  in.forced = {y, y};
  in.sampler.logit_bias.push_back({x, 100});
  in.stop = {"YX"};
  RecordingSink sink;
  DecodeResult r = run(in, sink);
  EXPECT_EQ(r.finish, Finish::kStop);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{y, y, x}));
  EXPECT_EQ(sink.content, "Y");  // "Y" + "YX": the stop string and nothing after it is cut
}

TEST_F(DecoderTest, HeldBackTextIsReleasedWhenNoStopFollows) {
  const int32_t y = id_of("Y");
  DecodeInput in = input({1, 2}, 2);
  in.forced = {y, y};
  in.stop = {"YX"};
  RecordingSink sink;
  DecodeResult r = run(in, sink);
  EXPECT_EQ(r.finish, Finish::kLength);
  EXPECT_EQ(sink.content, "YY");
}

TEST_F(DecoderTest, ForcedTokensComeFirstThenTheSampler) {
  DecodeInput free_run = input({5, 6, 7}, 4);
  RecordingSink a;
  DecodeResult greedy = run(free_run, a);
  ASSERT_EQ(greedy.tokens.size(), 4u);
  // Forcing the first two greedy tokens changes nothing after them.
  DecodeInput in = input({5, 6, 7}, 4);
  in.forced = {greedy.tokens[0], greedy.tokens[1]};
  RecordingSink b;
  EXPECT_EQ(run(in, b).tokens, greedy.tokens);
}

TEST_F(DecoderTest, CancellationStopsPrefillAndDecodeAndKeepsNoSnapshot) {
  PrefixCache cache(1 << 30);
  DecodeInput in = input({1, 2, 3, 4, 5, 6, 7, 8, 9}, 20);
  in.snapshots = {5};
  RecordingSink sink;
  sink.cancel_after = 2;
  DecodeResult r = run(in, sink, &cache);
  EXPECT_EQ(r.finish, Finish::kCancelled);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(cache.size(), 1u);  // the boundary snapshot only, not the cancelled reply's
  RecordingSink early;
  early.cancel_after = 0;  // gone before the prefill began
  DecodeInput again = input({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 20);
  EXPECT_EQ(run(again, early).finish, Finish::kCancelled);
  EXPECT_TRUE(early.progress.empty());
}

// What a client that times out during a long first prompt and retries sees: each cancelled try
// leaves its finished windows in the cache, the retry computes only the rest, the memory tier
// holds one partial snapshot per prompt (the longest), and the reply is a cold run's, bit for bit.
TEST_F(DecoderTest, ACancelledPrefillKeepsItsFinishedWindowsForTheRetry) {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 30; i++) prompt.push_back(1 + (i * 7) % 50);
  PrefixCache cache(1 << 30);
  Decoder d(host_->model(), &cache);
  auto attempt = [&](int windows, std::vector<float>* logits = nullptr) {
    DecodeInput in = input(prompt, 6);
    in.snapshots = {6};  // after the "system prompt"
    RecordingSink sink;
    sink.cancel_after_windows = windows;
    Session s = host_->model().new_session(256);
    DecodeResult r = d.run(s, in, nullptr, sink);
    if (logits) *logits = d.logits();
    return std::make_pair(r, sink.progress.empty() ? 0 : sink.progress.back().first);
  };
  // Chunk 4: windows end at 4, 6 (the snapshot point), 10, 14, 18, ...
  auto [first, first_done] = attempt(5);
  EXPECT_EQ(first.finish, Finish::kCancelled);
  EXPECT_EQ(first_done, 18u);
  EXPECT_EQ(cache.size(), 2u);  // the snapshot point and the partial prefill
  auto [second, second_done] = attempt(2);
  EXPECT_EQ(second.finish, Finish::kCancelled);
  EXPECT_EQ(second.cached_tokens, 18);
  EXPECT_EQ(second_done, 26u);
  EXPECT_EQ(cache.size(), 2u);  // the longer partial snapshot replaced the shorter one
  std::vector<float> resumed_logits, cold_logits;
  auto [third, third_done] = attempt(-1, &resumed_logits);
  EXPECT_EQ(third.cached_tokens, 26);
  EXPECT_EQ(third.finish, Finish::kLength);
  EXPECT_EQ(cache.size(), 2u);  // the reply's end outgrew the partial snapshot
  DecodeInput cold = input(prompt, 6);
  RecordingSink c;
  Decoder fresh(host_->model(), nullptr);
  Session s = host_->model().new_session(256);
  EXPECT_EQ(fresh.run(s, cold, nullptr, c).tokens, third.tokens);
  EXPECT_EQ(fresh.logits(), resumed_logits);
}

// The disk tier keeps the partial prefill too: a daemon restarted after the cancel resumes there.
TEST_F(DecoderTest, ACancelledPrefillResumesFromDiskAfterARestart) {
  test::TempDir root;
  DiskCacheOptions o;
  o.root = root.path();
  o.free_margin = 0;
  auto tiered = [&] {
    auto disk = std::make_unique<DiskPrefixCache>(
        o, [] { return uint64_t{42}; }, [this] { return host_->model().new_session(256); });
    return std::make_unique<PrefixCache>(1, std::move(disk));  // memory too small to hold any
  };
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 25; i++) prompt.push_back(3 + (i * 11) % 60);
  {
    auto cache = tiered();
    DecodeInput in = input(prompt, 4);
    RecordingSink sink;
    sink.cancel_after_windows = 3;
    EXPECT_EQ(run(in, sink, cache.get()).finish, Finish::kCancelled);
  }  // the restart: pending writes are flushed
  auto cache = tiered();
  DecodeInput in = input(prompt, 4);
  RecordingSink sink;
  DecodeResult r = run(in, sink, cache.get());
  EXPECT_EQ(r.cached_tokens, 12);  // three windows of 4
  EXPECT_EQ(cache->disk()->stats().hits, 1u);
  DecodeInput cold = input(prompt, 4);
  RecordingSink c;
  EXPECT_EQ(run(cold, c).tokens, r.tokens);
}

TEST_F(DecoderTest, SnapshotsAtTheBoundaryAndTheEndAreRestored) {
  PrefixCache cache(1 << 30);
  DecodeInput first = input({1, 2, 3, 4, 5, 6, 7}, 3);
  first.snapshots = {4};
  RecordingSink a;
  DecodeResult r1 = run(first, a, &cache);
  EXPECT_EQ(r1.cached_tokens, 0);
  EXPECT_EQ(cache.size(), 2u);  // at the boundary and after the reply
  // The next turn re-sends the history and the reply: only the new part is computed.
  std::vector<int32_t> next = first.prompt;
  next.insert(next.end(), r1.tokens.begin(), r1.tokens.end() - 1);  // the last is never fed
  next.push_back(9);
  DecodeInput second = input(next, 3);
  RecordingSink b;
  DecodeResult r2 = run(second, b, &cache);
  EXPECT_EQ(r2.cached_tokens, (int64_t)(first.prompt.size() + r1.tokens.size() - 1));
  // And the restored state gives the same reply as a cold prefill of the same prompt.
  DecodeInput cold = input(next, 3);
  RecordingSink c;
  EXPECT_EQ(run(cold, c).tokens, r2.tokens);
}

TEST_F(DecoderTest, ASessionHoldingAnEarlierTurnIsContinued) {
  Decoder d(host_->model(), nullptr);
  Session s = host_->model().new_session(64);
  DecodeInput first = input({1, 2, 3}, 2);
  RecordingSink a;
  DecodeResult r1 = d.run(s, first, nullptr, a);
  std::vector<int32_t> next = {1, 2, 3, r1.tokens[0], 8};
  DecodeInput second = input(next, 2);
  RecordingSink b;
  DecodeResult r2 = d.run(s, second, nullptr, b);
  EXPECT_EQ(r2.cached_tokens, 4);
  // A session whose history is not a prefix of the prompt starts afresh.
  DecodeInput other = input({7, 7, 7}, 2);
  RecordingSink c;
  EXPECT_EQ(d.run(s, other, nullptr, c).cached_tokens, 0);
}

TEST_F(DecoderTest, PrefillReportsProgressPerChunk) {
  DecodeInput in = input({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 1);
  RecordingSink sink;
  run(in, sink);
  // chunk 4: 4, 8, 10 of 10
  EXPECT_EQ(sink.progress, (std::vector<std::pair<size_t, size_t>>{{4, 10}, {8, 10}, {10, 10}}));
}

// n replies prefill the prompt once, and reply i is what a single run with seed + i writes,
// whether they are decoded one after another or, to a sink whose replies may take turns, at
// once (each in its own seat at the gate, their tokens sharing steps).
TEST_F(DecoderTest, SeveralRepliesPrefillOnceAndMatchSingleRuns) {
  for (bool interleave : {false, true}) {
    DecodeInput in = input({1, 2, 3, 4, 5, 6, 7, 8, 9}, 6);
    in.sampler.temperature = 1.0f;
    in.sampler.seed = 7;
    Decoder d(host_->model(), nullptr);
    Session s = host_->model().new_session(256);
    auto p0 = format_->parser(false, 1), p1 = format_->parser(false, 2),
         p2 = format_->parser(false, 3);
    ReplyParser* const parsers[] = {p0.get(), p1.get(), p2.get()};
    RecordingSink sink;
    sink.interleave = interleave;
    std::vector<DecodeResult> rs = d.run(s, in, parsers, sink);
    ASSERT_EQ(rs.size(), 3u);
    EXPECT_EQ(sink.progress.size(), 3u);  // chunks of 4: one prefill of 9 positions
    if (!interleave) {
      EXPECT_EQ(sink.choices, (std::vector<size_t>{1, 2}));
    } else {  // each choice opened in order, then the replies took turns
      ASSERT_GT(sink.choices.size(), 3u);
      EXPECT_EQ(std::vector<size_t>(sink.choices.begin(), sink.choices.begin() + 2),
                (std::vector<size_t>{1, 2}));
    }
    std::set<std::vector<int32_t>> distinct;
    ASSERT_EQ(sink.by_choice.size(), 3u);
    for (size_t i = 0; i < rs.size(); i++) {
      DecodeInput one = input(in.prompt, 6);
      one.sampler.temperature = 1.0f;
      one.sampler.seed = 7 + i;
      RecordingSink single;
      EXPECT_EQ(run(one, single).tokens, rs[i].tokens) << "reply " << i;
      EXPECT_EQ(sink.by_choice[i], rs[i].tokens) << "reply " << i;  // reached its own choice
      EXPECT_EQ(rs[i].seed, 7 + i);
      EXPECT_EQ(rs[i].prompt_tokens, 9);
      distinct.insert(rs[i].tokens);
    }
    EXPECT_GT(distinct.size(), 1u);
    EXPECT_EQ(in.sampler.seed, 7u);  // the input is left as it was given
  }
}

// Each sampled token's report is the softmax the sampler drew from, checked against logits
// computed afresh; forced tokens have none.
TEST_F(DecoderTest, ReportedLogprobsMatchAFreshForwardPass) {
  DecodeInput in = input({1, 2, 3, 4, 5}, 4);
  in.sampler.temperature = 0.8f;
  in.sampler.seed = 3;
  in.sampler.logprobs = 2;
  in.forced = {11};
  RecordingSink sink;
  DecodeResult r = run(in, sink);
  ASSERT_EQ(r.tokens.size(), 4u);
  ASSERT_EQ(sink.reports.size(), 3u);
  std::vector<int32_t> prefix = in.prompt;
  prefix.push_back(11);
  for (size_t i = 0; i < sink.reports.size(); i++) {
    const TokenLogprobs& lp = sink.reports[i];
    std::vector<double> ref = reference_logprobs(prefix, in, 0.8);
    EXPECT_EQ(lp.id, r.tokens[i + 1]);
    EXPECT_NEAR(lp.logprob, ref[lp.id], 1e-4) << "token " << i;
    ASSERT_EQ(lp.top.size(), 2u);
    EXPECT_EQ(lp.top[0].first, (int32_t)(std::max_element(ref.begin(), ref.end()) - ref.begin()));
    for (auto [id, v] : lp.top) EXPECT_NEAR(v, ref[id], 1e-4);
    prefix.push_back(lp.id);
  }
}

// Scoring the prompt reports every prompt token but the first, from the logits after the ones
// before it, and changes nothing about the reply.
TEST_F(DecoderTest, ScoringThePromptReportsEachTokenAndKeepsTheReply) {
  DecodeInput in = input({1, 2, 3, 4, 5, 6}, 3);
  in.sampler.logprobs = 0;
  in.score_prompt = true;
  RecordingSink sink;
  DecodeResult r = run(in, sink);
  ASSERT_EQ(sink.prompt.size(), 6u);
  EXPECT_EQ(sink.prompt[0], (std::pair<int32_t, std::optional<float>>{1, std::nullopt}));
  for (size_t i = 1; i < in.prompt.size(); i++) {
    std::vector<int32_t> prefix(in.prompt.begin(), in.prompt.begin() + i);
    EXPECT_EQ(sink.prompt[i].first, in.prompt[i]);
    ASSERT_TRUE(sink.prompt[i].second);
    EXPECT_NEAR(*sink.prompt[i].second, reference_logprobs(prefix, in, 1.0)[in.prompt[i]], 1e-4);
  }
  DecodeInput plain = input(in.prompt, 3);
  RecordingSink other;
  EXPECT_EQ(run(plain, other).tokens, r.tokens);
}

TEST_F(DecoderTest, AnEmptyPromptIsRefused) {
  DecodeInput in = input({}, 1);
  RecordingSink sink;
  EXPECT_THROW(run(in, sink), UsageError);
}

}  // namespace
}  // namespace waste
