// /health stays fast while clients send what is slow to prepare — 30 MB prompts and images that
// claim 6000×6000 pixels — because that work runs on the request pool, not on the HTTP threads.
// A timing test, so it runs only in the release build (label "slow").
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "engine/synth/synth.h"
#include "tests/http_client.h"
#include "tests/png_util.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using test::HttpResponse;

using Clock = std::chrono::steady_clock;

TEST(HealthUnderLoad, StaysFastWhileHugePromptsAndImageBombsArePrepared) {
  test::TempDir d;
  write_synthetic(d / "k3.waste", {Arch::kK3, "tiny", 2});
  auto daemon = test::start_daemon({(d / "k3.waste").string(), "--max-image-pixels", "40000000"});
  const int port = daemon->port();
  const std::string huge =
      R"({"messages":[{"role":"user","content":")" + std::string(30'000'000, 'a') + R"("}]})";
  const std::string bomb_png = test::png_zeros(6000, 6000);
  const std::string bomb =
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
      test::base64(bomb_png) + R"("}}]}],"max_tokens":1})";
  // Both are slow to prepare and both are answered: the prompt does not fit the context, the
  // image is decoded (it is within the pixel limit) and its tower rows computed.
  EXPECT_EQ(test::http_request(port, "POST", "/v1/chat/completions", huge).status, 400);
  HttpResponse first_bomb = test::http_request(port, "POST", "/v1/chat/completions", bomb);
  EXPECT_EQ(first_bomb.status, 200) << first_bomb.body.substr(0, 300);
  std::atomic<bool> stop{false};
  std::atomic<int> heavy{0};
  std::vector<std::thread> load;
  for (const std::string* body : {&huge, &huge, &bomb, &bomb})
    load.emplace_back([&, body] {
      while (!stop) {
        test::http_request(port, "POST", "/v1/chat/completions", *body);
        heavy++;
      }
    });
  std::vector<double> ms;
  while (heavy < 8 || ms.size() < 100) {
    auto t0 = Clock::now();
    EXPECT_EQ(test::http_request(port, "GET", "/health").status, 200);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  for (std::thread& t : load) t.join();
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[ms.size() * 99 / 100];
  RecordProperty("health_p99_ms", std::to_string(p99));
  EXPECT_LT(p99, 50) << "median " << ms[ms.size() / 2] << " ms, max " << ms.back() << " ms over "
                     << ms.size() << " probes while " << heavy << " heavy requests ran";
}

}  // namespace
}  // namespace waste
