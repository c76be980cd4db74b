// A failing disk, through the test-only read hook of the expert store (both readers, and
// synchronous reads): the request that met the fault fails with a message naming the layer and
// the expert, the worker goes on, no half-read record stays in the cache (the next request's
// logits equal a clean model's), and a stalled read only costs time.
#include <gtest/gtest.h>

#include <atomic>

#include "engine/base/error.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "server/runtime/decoder.h"
#include "server/runtime/engine_worker.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using namespace std::chrono_literals;

struct Reader {
  const char* name;
  IoBackend backend;
  int io_threads;
};

class FaultTest : public ::testing::TestWithParam<Reader> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 4});
    c_ = Container::open(dir_->path() / "kl.waste").release();
  }
  static void TearDownTestSuite() {
    delete c_;
    delete dir_;
  }

  // A model whose reads of layer `layer` suffer `fault` while `armed`.
  std::unique_ptr<Model> model(int layer, ReadFault fault) {
    ModelOptions mo;
    mo.threads = 1;
    mo.store.backend = GetParam().backend;
    mo.store.io_threads = GetParam().io_threads;
    mo.lookahead = GetParam().io_threads > 0 ? 6 : 0;
    mo.store.fault_hook = [this, layer, fault](int l, int) {
      return armed_ && l == layer ? fault : ReadFault{};
    };
    return std::make_unique<Model>(*c_, mo);
  }

  static std::vector<float> logits(Model& m, const std::vector<int32_t>& prompt) {
    Session s = m.new_session(64);
    std::vector<float> out(m.config().vocab);
    m.forward(s, prompt, out.data());
    return out;
  }

  // The first layer with routed experts.
  static int moe_layer() { return c_->manifest().banks.begin()->first; }

  static test::TempDir* dir_;
  static Container* c_;
  std::atomic<bool> armed_{true};
};
test::TempDir* FaultTest::dir_ = nullptr;
Container* FaultTest::c_ = nullptr;

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35};

TEST_P(FaultTest, AFailedReadFailsThatRequestOnlyAndLeavesNothingHalfRead) {
  const int layer = moe_layer();
  auto m = model(layer, {ReadFault::Kind::kError, 5, {}});
  Session s = m->new_session(64);
  std::vector<float> out(m->config().vocab);
  try {
    m->forward(s, kPrompt, out.data());
    FAIL() << "the read error did not surface";
  } catch (const IoError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fmt::format("of layer {}", layer)), std::string::npos) << what;
    EXPECT_NE(what.find("expert "), std::string::npos) << what;
    EXPECT_NE(what.find("Input/output error"), std::string::npos) << what;
  }
  EXPECT_TRUE(s.broken);
  armed_ = false;  // the disk recovers: the same model serves, as a clean one would
  auto clean = model(layer, {});
  EXPECT_EQ(logits(*m, kPrompt), logits(*clean, kPrompt));
}

TEST_P(FaultTest, AShortReadIsAnErrorNamingTheRecord) {
  const int layer = moe_layer();
  auto m = model(layer, {ReadFault::Kind::kShort, 0, {}});
  try {
    logits(*m, kPrompt);
    FAIL() << "the short read did not surface";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("short read"), std::string::npos) << e.what();
  }
  armed_ = false;
  auto clean = model(layer, {});
  EXPECT_EQ(logits(*m, kPrompt), logits(*clean, kPrompt));
}

TEST_P(FaultTest, AStalledReadOnlyCostsTime) {
  const int layer = moe_layer();
  auto m = model(layer, {ReadFault::Kind::kStall, 0, 30ms});
  auto clean = model(layer, {});
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(logits(*m, kPrompt), logits(*clean, kPrompt));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 30ms);
}

// Through the engine worker, as the daemon runs it: the failing job is answered with an error
// that names the record but not where the container lies, and the next job is served.
// What a job's sink saw; the sink itself goes with its job.
struct Outcome {
  std::atomic<int> tokens{-1};
  std::atomic<bool> failed{false};
  JobFailure failure{};
  std::string message;  // written with `failure`, before `failed`
};

class RecordingSink final : public JobSink {
 public:
  explicit RecordingSink(std::shared_ptr<Outcome> o) : o_(std::move(o)) {}
  void on_event(const ReplyEvent&) override {}
  void end(std::span<const DecodeResult> rs) override { o_->tokens = (int)rs[0].tokens.size(); }
  void fail(JobFailure f, const std::string& m) override {
    o_->message = m;
    o_->failure = f;
    o_->failed = true;
  }

 private:
  std::shared_ptr<Outcome> o_;
};

TEST_P(FaultTest, TheWorkerAnswersTheFailureAndServesTheNextJob) {
  const int layer = moe_layer();
  auto m = model(layer, {ReadFault::Kind::kError, 5, {}});
  WorkerOptions wo;
  wo.ctx = 64;
  wo.private_prefix = (dir_->path() / "kl.waste" / "").string();
  EngineWorker worker(*m, wo);
  auto submit = [&] {
    auto outcome = std::make_shared<Outcome>();
    Job j;
    j.id = "test";
    j.input.prompt = kPrompt;
    j.input.sampler.temperature = 0;
    j.input.max_new = 3;
    j.sink = std::make_unique<RecordingSink>(outcome);
    EXPECT_TRUE(worker.submit(std::move(j)));
    return outcome;
  };
  auto first = submit();
  ASSERT_TRUE(test::eventually([&] { return first->failed.load(); }));
  EXPECT_EQ(first->failure, JobFailure::kEngineError);
  EXPECT_NE(first->message.find(fmt::format("of layer {}", layer)), std::string::npos);
  EXPECT_EQ(first->message.find(dir_->path().string()), std::string::npos) << first->message;
  EXPECT_EQ(worker.counters().failed_in_a_row, 1u);
  EXPECT_EQ(worker.last_error(), first->message);
  armed_ = false;
  auto second = submit();
  ASSERT_TRUE(test::eventually([&] { return second->tokens >= 0; }));
  EXPECT_EQ(second->tokens, 3);
  EXPECT_EQ(worker.counters().failed_in_a_row, 0u);
}

INSTANTIATE_TEST_SUITE_P(Readers, FaultTest,
                         ::testing::Values(Reader{"sync", IoBackend::kThreads, 0},
                                           Reader{"threads", IoBackend::kThreads, 4},
                                           Reader{"uring", IoBackend::kUring, 4}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace waste
