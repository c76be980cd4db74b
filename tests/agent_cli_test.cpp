// Coding agents' own programs against the daemon, offline, as a user would run them: the Codex
// CLI (npm @openai/codex, installed by scripts/bootstrap) through a custom model provider on the
// Responses API. Labelled slow: Codex's first turn is some 24K prompt tokens, so the sanitizer
// build leaves it out.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <thread>

#include "engine/synth/synth.h"
#include "tests/http_client.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

// One-turn `codex exec` runs with the README's config.toml complete: the provider's key is sent as
// a bearer token, the turn is one Responses request with Codex's own instructions, tools and
// --output-schema, and the final message Codex prints is the schema's value. Two Codex processes
// run at once, as an agent's sub-agents do, each in its own slot of the daemon. The daemon's seed
// makes the run repeatable; on random weights a reply that calls one of Codex's tools instead is
// served the same way (Codex runs it and asks again), so the test checks what the user sees, not
// which path the noise took. It runs on each family: K3 and Kimi K2's format (a tiny Kimi-Linear).
class AgentCli : public ::testing::TestWithParam<Arch> {};

TEST_P(AgentCli, TwoCodexExecTurnsAtOnceCompleteThroughTheResponsesApi) {
  const fs::path codex = test::source_dir() / "tests/e2e/node_modules/.bin/codex";
  ASSERT_TRUE(fs::exists(codex)) << codex << " is missing: run scripts/bootstrap";
  test::TempDir dir;
  write_synthetic(dir / "k3.waste", {GetParam(), "tiny", 5});
  auto d =
      test::start_daemon({(dir / "k3.waste").string(), "--model-name", "k3", "--api-key",
                          "test-key", "--thinking", "false", "--seed", "1", "--parallel", "2"});
  test::write_file(dir / "schema.json",
                   R"({"type":"object","properties":{"answer":{"type":"string","enum":["hi"]}},)"
                   R"("required":["answer"],"additionalProperties":false})");
  auto turn = [&](const std::string& name, std::string* out) {
    const fs::path home = dir / name / "home", work = dir / name / "work";
    fs::create_directories(home);
    fs::create_directories(work);
    // README.md's config.toml as written, only the port changed; its env_key names the variable
    // that holds the daemon's key.
    test::write_file(
        home / "config.toml",
        test::readme_snippet("codex-config",
                             {{"127.0.0.1:8000", "127.0.0.1:" + std::to_string(d->port())}}));
    const std::string cmd = "cd " + work.string() + " && CODEX_HOME=" + home.string() +
                            // perl's alarm bounds the run on any OS (macOS has no timeout(1)).
                            " WASTE_API_KEY=test-key perl -e 'alarm shift; exec @ARGV' 900 " +
                            codex.string() +
                            " exec --skip-git-repo-check -c include_environment_context=false"
                            " --output-schema " +
                            (dir / "schema.json").string() + " --output-last-message " +
                            (dir / name / "last.txt").string() + " 'Say hi' < /dev/null";
    return test::run_command(cmd, out);
  };
  std::string out_a, out_b;
  int rc_b = -1;
  std::thread b([&] { rc_b = turn("b", &out_b); });
  const int rc_a = turn("a", &out_a);
  b.join();
  ASSERT_EQ(rc_a, 0) << out_a << d->log();
  ASSERT_EQ(rc_b, 0) << out_b << d->log();
  EXPECT_EQ(test::read_file(dir / "a/last.txt"), R"({"answer":"hi"})") << out_a;
  EXPECT_EQ(test::read_file(dir / "b/last.txt"), R"({"answer":"hi"})") << out_b;
  // A request's log line follows its answer, so the last may still be on its way.
  EXPECT_TRUE(test::eventually([&] { return d->log().find(" slot 1: ") != std::string::npos; }))
      << d->log();  // the second slot served one
  const std::string log = d->log();
  EXPECT_NE(log.find("] resp_"), std::string::npos) << log;  // served as Responses requests
  EXPECT_NE(log.find("finish: end"), std::string::npos) << log;
  EXPECT_EQ(log.find("finish: length"), std::string::npos) << log;
}

INSTANTIATE_TEST_SUITE_P(Families, AgentCli, ::testing::Values(Arch::kK3, Arch::kKimiLinear),
                         [](const ::testing::TestParamInfo<Arch>& p) {
                           return p.param == Arch::kK3 ? "k3" : "kimi_linear";
                         });

}  // namespace
}  // namespace waste
