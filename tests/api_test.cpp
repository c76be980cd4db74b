// The daemon's routes before the model is ready: readiness is reported, work is refused with
// 503 and Retry-After, and nothing blocks.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>

#include "server/api/api.h"
#include "server/http/http.h"
#include "tests/http_client.h"

namespace waste {
namespace {

// The routes on a loopback port, for a model that does not exist.
struct Served {
  explicit Served(http::Options ho = options()) : server(std::move(ho)), api(serve_options()) {
    api.register_routes(server);
    server.start();
  }
  ~Served() {
    server.stop();
    server.wait();
  }
  static http::Options options() {
    http::Options ho;
    ho.port = 0;
    ho.error_format = api_error_body;
    return ho;
  }
  static ServeOptions serve_options() {
    ServeOptions so;
    so.model = "/nonexistent.waste";
    return so;
  }
  http::Server server;
  Api api;
};

TEST(Api, ReportsLoadingAndRefusesWorkUntilReady) {
  Served s;  // never asked to load
  http::Server& server = s.server;
  test::HttpResponse h = test::http_request(server.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_NE(h.body.find("\"status\":\"loading\""), std::string::npos) << h.body;
  EXPECT_FALSE(h.headers["retry-after"].empty());
  test::HttpResponse m = test::http_request(server.port(), "GET", "/v1/models");
  EXPECT_EQ(m.status, 503);
  EXPECT_NE(m.body.find("model_loading"), std::string::npos) << m.body;
  test::HttpResponse c = test::http_request(server.port(), "POST", "/v1/chat/completions",
                                            R"({"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(c.status, 503);
  test::HttpResponse metrics = test::http_request(server.port(), "GET", "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("waste_ready 0"), std::string::npos) << metrics.body;
}

// One choice of error shape per path, for the routes' own errors and the HTTP layer's alike: the
// Messages API answers in Anthropic's shape, every other path in OpenAI's.
TEST(Api, TheErrorShapeFollowsThePath) {
  EXPECT_EQ(error_shape("/v1/messages"), ErrorShape::kAnthropic);
  EXPECT_EQ(error_shape("/v1/messages/count_tokens"), ErrorShape::kAnthropic);
  EXPECT_EQ(error_shape("/v1/chat/completions"), ErrorShape::kOpenAi);
  EXPECT_EQ(error_shape("/v1/responses"), ErrorShape::kOpenAi);
  Served s;  // never asked to load: every POST is refused by its route
  const int port = s.server.port();
  const std::string anthropic = R"({"type":"error","error":{"type":"overloaded_error")";
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    test::HttpResponse r = test::http_request(port, "POST", path, "{}");
    EXPECT_EQ(r.status, 503) << path;
    EXPECT_TRUE(r.body.starts_with(anthropic)) << path << ": " << r.body;
  }
  test::HttpResponse c = test::http_request(port, "POST", "/v1/chat/completions", "{}");
  EXPECT_TRUE(c.body.starts_with(R"({"error":{)")) << c.body;
  // The HTTP layer's own refusal (no such route) takes the same shapes.
  test::HttpResponse unknown = test::http_request(port, "GET", "/v1/messages/nope");
  EXPECT_GE(unknown.status, 400);
  EXPECT_TRUE(unknown.body.starts_with(R"({"type":"error")")) << unknown.body;
  unknown = test::http_request(port, "GET", "/v1/nope");
  EXPECT_TRUE(unknown.body.starts_with(R"({"error":{)")) << unknown.body;
}

TEST(Api, AFailedLoadIsReportedByHealth) {
  Served s;
  http::Server& server = s.server;
  std::promise<std::string> failed;
  s.api.start_loading([] {}, [&](const std::string& why) { failed.set_value(why); });
  auto f = failed.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_NE(f.get().find("/nonexistent.waste"), std::string::npos);
  test::HttpResponse h = test::http_request(server.port(), "GET", "/health");
  EXPECT_EQ(h.status, 503);
  EXPECT_NE(h.body.find("\"status\":\"error\""), std::string::npos) << h.body;
  EXPECT_NE(h.body.find("not a container directory"), std::string::npos) << h.body;
}

// The HTTP layer's counters reach /metrics: at a limit of one connection, the idle one is closed
// for the request that asks.
TEST(Api, MetricsCountIdleConnectionsEvictedByTheServer) {
  http::Options ho = Served::options();
  ho.max_connections = 1;
  ho.io_threads = 1;  // connections are admitted in the order they connect
  Served s(ho);
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(idle, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(s.server.port()));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  test::HttpResponse m = test::http_request(s.server.port(), "GET", "/metrics");
  ::close(idle);
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("# TYPE waste_http_idle_connections_evicted_total counter\n"
                        "waste_http_idle_connections_evicted_total 1\n"),
            std::string::npos)
      << m.body;
}

}  // namespace
}  // namespace waste
