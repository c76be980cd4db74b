// The StepGate (server/runtime/step_gate.h): conversations on their own threads share forward
// passes, and each gets exactly what it gets alone — its reply, its last logits, its cached
// prefix — whoever runs beside it, with sampling, a grammar, a restored snapshot and a neighbour
// that cancels; and a short request is not held behind a long prefill. Both architectures.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/base/error.h"
#include "engine/synth/synth.h"
#include "prompt_templates/reply_grammar.h"
#include "server/runtime/decoder.h"
#include "server/runtime/model_host.h"
#include "tests/test_util.h"

namespace waste {
namespace {

// Counts tokens and prefill progress; cancels after `cancel_after` tokens (-1: never).
class CountingSink final : public ReplySink {
 public:
  bool cancelled() override { return cancel_after >= 0 && tokens >= cancel_after; }
  void prefill_progress(size_t done, size_t total) override {
    prefilled = done;
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
  void on_event(const ReplyEvent&) override {}
  void on_token(int32_t, const TokenLogprobs*) override {
    if (tokens++ == 0) first_token_prefilled_by_other = other ? other->prefilled.load() : 0;
  }

  int cancel_after = -1;
  std::atomic<int> tokens{0};
  std::atomic<size_t> prefilled{0};
  const CountingSink* other = nullptr;  // whose progress to note at this sink's first token
  size_t first_token_prefilled_by_other = 0;
  std::mutex mu;
  std::condition_variable cv;
};

struct Outcome {
  DecodeResult result;
  std::vector<float> logits;
};

std::string name_of(Arch a) {
  return a == Arch::kK3 ? "K3" : "KimiLinear";
}

class StepGateTest : public ::testing::TestWithParam<Arch> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (Arch a : {Arch::kKimiLinear, Arch::kK3})
      write_synthetic(dir_->path() / name_of(a), {a, "tiny", 17});
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    EngineOptions eo;
    eo.threads = 2;
    eo.chunk = 16;
    host_ = std::make_unique<ModelHost>((dir_->path() / name_of(GetParam())).string(), eo);
    index_ = make_token_index(*host_->tokenizer(), host_->model().config().vocab);
  }

  std::vector<int32_t> ids(int n, int salt) const {
    std::vector<int32_t> v;
    const int vocab = (int)host_->tokenizer()->vocab_size();
    for (int i = 0; i < n; i++) v.push_back((int32_t)((i * 41 + salt * 13 + 3) % vocab));
    return v;
  }

  DecodeInput input(std::vector<int32_t> prompt, int64_t max_new, float temperature,
                    uint64_t seed) const {
    DecodeInput in;
    in.prompt = std::move(prompt);
    in.max_new = max_new;
    in.sampler.temperature = temperature;
    in.sampler.seed = seed;
    return in;
  }

  // A reply that must be a JSON object with an integer "a" (the grammar ends the reply).
  void constrain(DecodeInput& in) const {
    auto g = std::make_shared<Grammar>();
    g->root = compile_json_schema(
        *g, R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
    in.constraint = std::make_unique<TokenConstraint>(g, *index_);
  }

  static Outcome run(Decoder& d, DecodeInput& in, ReplySink& sink, int64_t ctx = 512) {
    Session s = d.model().new_session(ctx);
    Outcome o;
    o.result = d.run(s, in, nullptr, sink);
    o.logits = d.logits();
    return o;
  }

  static test::TempDir* dir_;
  std::unique_ptr<ModelHost> host_;
  std::unique_ptr<TokenIndex> index_;
};

test::TempDir* StepGateTest::dir_ = nullptr;

TEST_P(StepGateTest, EachConversationGetsItsAloneReplyAndLogitsBesideTheOthers) {
  Model& model = host_->model();
  // A prompt whose first 20 positions a cache will hold, for the one that restores mid-way.
  const std::vector<int32_t> shared = ids(40, 9);
  std::vector<int32_t> extended(shared);
  for (int32_t id : ids(11, 10)) extended.push_back(id);
  auto inputs = [&] {
    std::vector<DecodeInput> v;
    v.push_back(input(ids(60, 1), 24, 0.8f, 1));  // a long prefill, sampled
    v.push_back(input(ids(5, 2), 30, 0.0f, 0));   // greedy
    v.push_back(input(ids(17, 3), 40, 1.0f, 7));  // constrained
    constrain(v.back());
    v.push_back(input(ids(33, 4), 40, 0.9f, 3));  // cancelled after 6 tokens
    v.push_back(input(extended, 12, 0.7f, 5));    // restores 20 positions
    return v;
  };
  auto filled_cache = [&] {
    auto cache = std::make_unique<PrefixCache>(1ull << 30);
    Decoder d(model, cache.get());
    DecodeInput in = input(shared, 2, 0.0f, 0);
    in.snapshots = {20};
    CountingSink sink;
    run(d, in, sink);
    return cache;
  };
  const int cancel_at = 3;
  std::vector<Outcome> alone;
  {
    std::vector<DecodeInput> in = inputs();
    auto cache = filled_cache();
    for (size_t i = 0; i < in.size(); i++) {
      Decoder d(model, cache.get());
      CountingSink sink;
      if (i == cancel_at) sink.cancel_after = 6;
      alone.push_back(run(d, in[i], sink));
    }
  }
  EXPECT_EQ(alone[4].result.cached_tokens, 20);
  EXPECT_EQ(alone[cancel_at].result.finish, Finish::kCancelled);
  for (int round = 0; round < 2; round++) {
    std::vector<DecodeInput> in = inputs();
    auto cache = filled_cache();
    StepGateOptions go;
    go.step_tokens = 5;  // long prefills split across steps
    StepGate gate(model, go);
    std::vector<Outcome> together(in.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < in.size(); k++) {
      const size_t i = round == 0 ? k : in.size() - 1 - k;  // both arrival orders
      threads.emplace_back([&, i] {
        Decoder d(gate, cache.get());
        CountingSink sink;
        if (i == cancel_at) sink.cancel_after = 6;
        together[i] = run(d, in[i], sink);
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t i = 0; i < in.size(); i++) {
      EXPECT_EQ(together[i].result.tokens, alone[i].result.tokens) << "conversation " << i;
      EXPECT_EQ(together[i].result.finish, alone[i].result.finish) << "conversation " << i;
      EXPECT_EQ(together[i].result.cached_tokens, alone[i].result.cached_tokens) << i;
      EXPECT_TRUE(together[i].logits == alone[i].logits) << "conversation " << i;
    }
    const StepCounters c = gate.counters();
    EXPECT_GT(c.pieces, c.steps) << "no step carried two conversations";
    EXPECT_EQ(gate.members(), 0);
  }
}

// With a step budget of 8 prompt tokens, a 4-token request started during a 600-token prefill
// joins the next step: its first token comes while the long prompt is still being prefilled.
TEST_P(StepGateTest, AShortRequestIsNotHeldBehindALongPrefill) {
  StepGateOptions go;
  go.step_tokens = 8;
  StepGate gate(host_->model(), go);
  DecodeInput long_in = input(ids(600, 5), 1, 0.0f, 0), short_in = input(ids(4, 6), 3, 0.0f, 0);
  CountingSink long_sink, short_sink;
  short_sink.other = &long_sink;
  std::thread long_run([&] {
    Decoder d(gate, nullptr);
    run(d, long_in, long_sink, 1024);
  });
  {
    std::unique_lock<std::mutex> lock(long_sink.mu);
    long_sink.cv.wait(lock, [&] { return long_sink.prefilled > 0; });
  }
  Decoder d(gate, nullptr);
  Outcome o = run(d, short_in, short_sink);
  long_run.join();
  EXPECT_EQ(o.result.tokens.size(), 3u);
  EXPECT_GT(short_sink.first_token_prefilled_by_other, 0u);
  EXPECT_LT(short_sink.first_token_prefilled_by_other, 600u / 2)
      << "the short request waited for most of the long prefill";
  EXPECT_EQ(long_sink.prefilled, 600u);
}

// Two conversations with the same preamble (a snapshot point after it) started at once: one
// computes the preamble, the other waits for its snapshot and restores it, and both replies are
// their alone ones. Whoever claims first computes; the other restores, however they interleave.
TEST_P(StepGateTest, TwoConversationsWithOnePreambleComputeItOnce) {
  Model& model = host_->model();
  const std::vector<int32_t> preamble = ids(48, 11);
  auto prompt = [&](int salt) {
    std::vector<int32_t> p(preamble);
    for (int32_t id : ids(9, salt)) p.push_back(id);
    return p;
  };
  auto make = [&](int salt) {
    DecodeInput in = input(prompt(salt), 10, 0.9f, (uint64_t)salt);
    in.snapshots = {preamble.size()};
    return in;
  };
  std::vector<Outcome> alone;
  for (int salt : {1, 2}) {
    Decoder d(model, nullptr);
    DecodeInput in = make(salt);
    CountingSink sink;
    alone.push_back(run(d, in, sink));
  }
  PrefixCache cache(1ull << 30);
  StepGate gate(model);
  std::vector<Outcome> together(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; k++)
    threads.emplace_back([&, k] {
      Decoder d(gate, &cache);
      DecodeInput in = make(k + 1);
      CountingSink sink;
      together[k] = run(d, in, sink);
    });
  for (std::thread& t : threads) t.join();
  std::vector<int64_t> cached = {together[0].result.cached_tokens,
                                 together[1].result.cached_tokens};
  std::sort(cached.begin(), cached.end());
  EXPECT_EQ(cached, (std::vector<int64_t>{0, (int64_t)preamble.size()}));
  for (int k = 0; k < 2; k++) {
    EXPECT_EQ(together[k].result.tokens, alone[k].result.tokens) << k;
    EXPECT_TRUE(together[k].logits == alone[k].logits) << k;
  }
}

// A call the model refuses (here: past its session's context) fails alone, before it can share a
// step; the member beside it runs on to its alone reply.
TEST_P(StepGateTest, ARefusedCallFailsAloneBesideARunningConversation) {
  Model& model = host_->model();
  DecodeInput in = input(ids(30, 2), 20, 0.8f, 4);
  Outcome alone;
  {
    Decoder d(model, nullptr);
    CountingSink sink;
    alone = run(d, in, sink);
  }
  StepGate gate(model);
  Outcome together;
  std::thread neighbour([&] {
    DecodeInput again = input(ids(30, 2), 20, 0.8f, 4);
    Decoder d(gate, nullptr);
    CountingSink sink;
    together = run(d, again, sink);
  });
  {
    StepGate::Member m(gate);
    Session small = model.new_session(8);
    const std::vector<int32_t> too_long = ids(9, 3);
    std::vector<float> logits(model.config().vocab);
    for (int i = 0; i < 5; i++) EXPECT_THROW(m.forward(small, too_long, logits.data()), UsageError);
    EXPECT_EQ(small.pos(), 0);
    EXPECT_FALSE(small.broken);
  }
  neighbour.join();
  EXPECT_EQ(together.result.tokens, alone.result.tokens);
  EXPECT_TRUE(together.logits == alone.logits);
}

INSTANTIATE_TEST_SUITE_P(Arch, StepGateTest, ::testing::Values(Arch::kKimiLinear, Arch::kK3),
                         [](const auto& p) { return name_of(p.param); });

}  // namespace
}  // namespace waste
