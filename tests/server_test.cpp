// End-to-end: the real daemon on synthetic containers, driven over HTTP on loopback.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <simdjson.h>

#include <filesystem>
#include <fstream>
#include <list>
#include <thread>

#include "engine/synth/synth.h"
#include "engine/tokenizer/pretokenizer.h"
#include "tests/http_client.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using test::Daemon;
using test::http_request;
using test::HttpResponse;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 5});
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 5});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string long_request(int max_tokens, bool stream) {
    return test::long_request(dir_->path() / "kl.waste", max_tokens, stream);
  }
  static std::string kl() { return (dir_->path() / "kl.waste").string(); }
  static std::string k3() { return (dir_->path() / "k3.waste").string(); }

  static std::unique_ptr<Daemon> start(std::vector<std::string> args,
                                       std::map<std::string, std::string> env = {}) {
    return test::start_daemon(std::move(args), env);
  }

  simdjson::dom::element parse(const std::string& s) {
    docs_.emplace_back(s);
    return parser_.emplace_back().parse(docs_.back()).value();
  }

  static test::TempDir* dir_;
  std::list<simdjson::padded_string> docs_;
  std::list<simdjson::dom::parser> parser_;
};
test::TempDir* ServerTest::dir_ = nullptr;

const char* kHello =
    R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":8,"temperature":0})";

std::string_view str(simdjson::dom::element e) {
  return e.get_string().value();
}

TEST_F(ServerTest, ChatCompletionNonStreamingAndStreamingAgree) {
  auto d = start({kl()});
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", kHello);
  ASSERT_EQ(r.status, 200) << r.body;
  auto j = parse(r.body);
  EXPECT_EQ(str(j["object"]), "chat.completion");
  EXPECT_EQ(str(j["choices"].at(0)["message"]["role"]), "assistant");
  std::string content(str(j["choices"].at(0)["message"]["content"]));
  EXPECT_EQ(str(j["choices"].at(0)["finish_reason"]), "length");
  EXPECT_GT(int64_t(j["usage"]["prompt_tokens"]), 3);
  EXPECT_EQ(int64_t(j["usage"]["completion_tokens"]), 8);
  EXPECT_EQ(int64_t(j["usage"]["prompt_tokens_details"]["cached_tokens"]), 0);

  std::string body = std::string(kHello);
  body.insert(1, R"("stream":true,"stream_options":{"include_usage":true},)");
  HttpResponse s = http_request(d->port(), "POST", "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_EQ(s.headers["content-type"].rfind("text/event-stream", 0), 0u);
  auto ev = s.events();
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(str(parse(ev[0])["choices"].at(0)["delta"]["role"]), "assistant");
  std::string streamed;
  for (size_t i = 1; i + 3 < ev.size(); i++) {
    auto c = parse(ev[i]);
    simdjson::dom::element delta = c["choices"].at(0)["delta"];
    if (delta["content"].error() == simdjson::SUCCESS) streamed += str(delta["content"]);
  }
  EXPECT_EQ(streamed, content);
  auto fin = parse(ev[ev.size() - 3]);
  EXPECT_EQ(str(fin["choices"].at(0)["finish_reason"]), "length");
  auto usage = parse(ev[ev.size() - 2]);
  EXPECT_EQ(usage["choices"].get_array().value().size(), 0u);
  EXPECT_EQ(int64_t(usage["usage"]["completion_tokens"]), 8);
  EXPECT_EQ(d->terminate(), 0) << d->log();
  EXPECT_NE(d->log().find("tokens in"), std::string::npos);  // one log line per request
}

TEST_F(ServerTest, CompletionsModelsHealthAndMetrics) {
  auto d = start({kl(), "--model-name", "tiny-kl"});
  HttpResponse m = http_request(d->port(), "GET", "/v1/models");
  ASSERT_EQ(m.status, 200);
  auto mj = parse(m.body);
  EXPECT_EQ(str(mj["data"].at(0)["id"]), "tiny-kl");
  // No --ctx: the RAM plan's context, at least 4096, as the start line printed it.
  const int64_t context = int64_t(mj["data"].at(0)["context_length"]);
  EXPECT_GE(context, 4096);
  EXPECT_NE(d->log().find("context " + std::to_string(context) + ","), std::string::npos)
      << d->log();
  EXPECT_EQ(str(mj["data"].at(0)["owned_by"]), "waste");
  HttpResponse c = http_request(d->port(), "POST", "/v1/completions",
                                R"({"model":"tiny-kl","prompt":"the model","max_tokens":5})");
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(str(parse(c.body)["object"]), "text_completion");
  // Sampled without a seed, the reply may meet an end token before its 5: the metric counts
  // what the response reported.
  const int64_t generated = int64_t(parse(c.body)["usage"]["completion_tokens"]);
  EXPECT_GE(generated, 1);
  EXPECT_LE(generated, 5);
  const std::string completion_tokens =
      "waste_completion_tokens_total " + std::to_string(generated) + "\n";
  HttpResponse h = http_request(d->port(), "GET", "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(str(parse(h.body)["status"]), "ok");
  HttpResponse mt = http_request(d->port(), "GET", "/metrics");
  EXPECT_EQ(mt.status, 200);
  for (const std::string& name :
       {std::string("waste_ready 1"), std::string("waste_requests_total 1"), completion_tokens,
        std::string("waste_expert_cache_misses_total"), std::string("waste_queue_depth 0")})
    EXPECT_NE(mt.body.find(name), std::string::npos) << name << "\n" << mt.body;
}

// The daemon and `waste run` share one decoder: the same prompt, greedy, ends at the same place
// with the same text, whether an end token or the context stops it.
TEST_F(ServerTest, CompletionsAndWasteRunEndAlike) {
  for (const char* ctx : {"12", "64"}) {
    auto d = start({kl(), "--ctx", ctx});
    HttpResponse r = http_request(d->port(), "POST", "/v1/completions",
                                  R"({"prompt":[5,6,7,8,9],"temperature":0})");
    ASSERT_EQ(r.status, 200) << r.body;
    auto body = parse(r.body);
    const std::string daemon_text(std::string_view(body["choices"].at(0)["text"]));
    const int64_t daemon_tokens = int64_t(body["usage"]["completion_tokens"]);
    std::string out;
    const std::string run = test::waste_binary().string() + " run " + kl() +
                            " --ids 5,6,7,8,9 -n 4096 --threads 2 --ctx " + ctx;
    ASSERT_EQ(test::run_command(run + " --json 2>/dev/null", &out), 0) << out;
    auto json = parse(out);
    EXPECT_EQ((int64_t)json["token_ids"].get_array().size(), daemon_tokens) << ctx;
    ASSERT_EQ(test::run_command(run + " 2>/dev/null", &out), 0) << out;
    EXPECT_EQ(out, daemon_text + "\n") << ctx;
    if (std::string(ctx) == "12") {
      EXPECT_EQ(daemon_tokens, 7);  // the context stopped both
    }
  }
}

TEST_F(ServerTest, ErrorsHaveOpenAIShapeAndStatus) {
  auto d = start({kl(), "--ctx", "64", "--max-body", "4K", "--model-name", "m"});
  struct Case {
    std::string body;
    int status;
    const char* fragment;
  };
  std::string long_prompt(400, 'x');
  for (size_t i = 0; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  const Case cases[] = {
      {"{not json", 400, "not valid JSON"},
      {R"({"messages":[{"role":"user","content":"hi"}],"temperature":1e400})", 400,
       R"j("message":"temperature: 1e400 is out of range (0 to 2)","type":"invalid_request_error","param":"temperature")j"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":123456789012345678901234567890})",
       400, "max_tokens: 123456789012345678901234567890 is out of range"},
      {R"({"messages":[{"role":"user","content":"hi"}],"temperature":"hot"})", 400,
       "\"param\":\"temperature\""},
      {R"({"messages":[{"role":"wizard","content":"hi"}]})", 400, "messages[0].role"},
      {R"({"messages":[{"role":"user","content":"hi"}],"n":9})", 400, "\"param\":\"n\""},
      {R"({"model":"gpt-4","messages":[{"role":"user","content":"hi"}]})", 404, "model_not_found"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1000})", 400,
       "context_length_exceeded"},
      {R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1000})", 400,
       "This model's maximum context length is 64 tokens. However, you requested "},
      {R"({"messages":[{"role":"user","content":")" + long_prompt + R"("}]})", 400,
       "context_length_exceeded"},
      {R"({"messages":[{"role":"user","content":")" + long_prompt + R"("}]})", 400,
       "This model's maximum context length is 64 tokens. However, your messages resulted in "},
      {std::string(5000, ' '), 413, "error"},
  };
  for (const Case& k : cases) {
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", k.body);
    EXPECT_EQ(r.status, k.status) << k.body.substr(0, 80) << " -> " << r.body;
    EXPECT_NE(r.body.find(k.fragment), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("\"error\""), std::string::npos) << r.body;
  }
  EXPECT_EQ(http_request(d->port(), "GET", "/v1/nothing").status, 404);
  EXPECT_EQ(http_request(d->port(), "GET", "/v1/chat/completions").status, 405);
}

TEST_F(ServerTest, ApiKeyGuardsV1AndMetricsButNotHealth) {
  auto d = start({kl()}, {{"WASTE_API_KEY", "sekret"}});
  EXPECT_EQ(http_request(d->port(), "GET", "/v1/models").status, 401);
  EXPECT_EQ(
      http_request(d->port(), "GET", "/v1/models", "", {{"Authorization", "Bearer nope"}}).status,
      401);
  EXPECT_EQ(
      http_request(d->port(), "GET", "/v1/models", "", {{"Authorization", "Bearer sekret"}}).status,
      200);
  EXPECT_EQ(http_request(d->port(), "GET", "/health").status, 200);
  // The metrics say what the server does: behind the key as well.
  EXPECT_EQ(http_request(d->port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(
      http_request(d->port(), "GET", "/metrics", "", {{"Authorization", "Bearer sekret"}}).status,
      200);
}

TEST_F(ServerTest, FullQueueAnswers429WithRetryAfter) {
  auto d = start({kl(), "--queue", "0", "--parallel", "1"});
  int slow_status = 0;
  std::thread slow([&] {
    slow_status =
        http_request(d->port(), "POST", "/v1/chat/completions", long_request(1500, false)).status;
  });
  bool busy = false;
  for (int i = 0; i < 300 && !busy; i++) {
    busy =
        http_request(d->port(), "GET", "/health").body.find("\"busy\":true") != std::string::npos;
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(busy);
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", kHello);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_FALSE(r.headers["retry-after"].empty());
  // /health, /v1/models and /metrics answer while the engine is busy.
  EXPECT_EQ(http_request(d->port(), "GET", "/v1/models").status, 200);
  EXPECT_EQ(http_request(d->port(), "GET", "/metrics").status, 200);
  slow.join();
  EXPECT_EQ(slow_status, 200);
}

TEST_F(ServerTest, ClientThatHangsUpCancelsItsRequest) {
  auto d = start({kl()});
  std::string got = test::http_request_then_hang_up(d->port(), "/v1/chat/completions",
                                                    long_request(4000, true), 300);
  EXPECT_NE(got.find("data: "), std::string::npos);
  bool cancelled = false;
  for (int i = 0; i < 300 && !cancelled; i++) {
    cancelled =
        http_request(d->port(), "GET", "/metrics").body.find("waste_requests_cancelled_total 1") !=
        std::string::npos;
    if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(cancelled);
  EXPECT_NE(d->log().find("cancelled: client gone"), std::string::npos) << d->log();
  EXPECT_EQ(http_request(d->port(), "POST", "/v1/chat/completions", kHello).status, 200);
}

// A client that times out during a long prefill and retries: the cancelled request left its
// finished windows in the prompt cache, on disk too, so a retry after a restart computes only the
// rest, and answers what a cold run does.
TEST_F(ServerTest, AHungUpPrefillIsResumedByTheRetryEvenAfterARestart) {
  test::TempDir cache;
  std::string words;
  for (int i = 0; i < 1500; i++) words += fmt::format("w{} ", i % 97);
  auto body = [&](bool stream) {
    return fmt::format(
        R"({{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":6,"temperature":0,)"
        R"("stream":{}}})",
        words, stream ? "true" : "false");
  };
  auto ask = [&](Daemon& d) {
    HttpResponse r = http_request(d.port(), "POST", "/v1/chat/completions", body(false));
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = parse(r.body);
    return std::make_tuple(int64_t(j["usage"]["prompt_tokens_details"]["cached_tokens"]),
                           int64_t(j["usage"]["prompt_tokens"]),
                           std::string(str(j["choices"].at(0)["message"]["content"])));
  };
  const std::vector<std::string> args = {kl(), "--chunk", "4", "--prompt-cache-dir",
                                         cache.path().string()};
  {
    auto d = start(args);
    // Gone a quarter of a second into the prefill (a few hundred tokens; it takes seconds).
    test::http_request_then_hang_up(d->port(), "/v1/chat/completions", body(true), 1, true,
                                    std::chrono::milliseconds(250));
    bool cancelled = false;
    for (int i = 0; i < 3000 && !cancelled; i++) {
      cancelled = http_request(d->port(), "GET", "/metrics")
                      .body.find("waste_requests_cancelled_total 1") != std::string::npos;
      if (!cancelled) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_TRUE(cancelled) << d->log();
    EXPECT_EQ(d->terminate(), 0) << d->log();  // the partial snapshot is flushed on the way out
  }
  auto d = start(args);
  auto [cached, prompt, content] = ask(*d);
  EXPECT_GT(cached, 0) << d->log();
  EXPECT_LT(cached, prompt);
  HttpResponse m = http_request(d->port(), "GET", "/metrics");
  EXPECT_NE(m.body.find("waste_prompt_cache_hits_total{tier=\"disk\"} 1"), std::string::npos)
      << m.body;
  auto cold = start({kl(), "--chunk", "4"});
  EXPECT_EQ(std::get<2>(ask(*cold)), content);
}

TEST_F(ServerTest, ConcurrentClientsAllGetAnswers) {
  auto d = start({kl()});
  std::vector<int> status(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; i++)
    ts.emplace_back([&, i] {
      status[i] = http_request(d->port(), "POST", "/v1/chat/completions", kHello).status;
    });
  for (auto& t : ts) t.join();
  for (int s : status) EXPECT_EQ(s, 200);
}

// Conversations in parallel slots share steps, and each reply is the one it gets alone (the
// replies alone ran first, so the shared run also restores their snapshots).
TEST_F(ServerTest, ParallelConversationsShareStepsAndEachGetsItsAloneReply) {
  for (const std::string& model : {k3(), kl()}) {
    auto d = start({model, "--parallel", "3", "--prompt-cache-dir", "off"});
    auto body = [](int i) {
      return fmt::format(
          R"({{"messages":[{{"role":"user","content":"tell me about {}"}}],"max_tokens":40,)"
          R"("temperature":1,"seed":{}}})",
          std::string(i + 1, 'x'), i);
    };
    auto content = [&](const HttpResponse& r) {
      EXPECT_EQ(r.status, 200) << r.body;
      return std::string(str(parse(r.body)["choices"].at(0)["message"]["content"]));
    };
    std::vector<std::string> alone, together(3);
    for (int i = 0; i < 3; i++)
      alone.push_back(content(http_request(d->port(), "POST", "/v1/chat/completions", body(i))));
    auto metric = [&](const std::string& name) {
      return test::metric_value(http_request(d->port(), "GET", "/metrics").body, name);
    };
    const double steps = metric("waste_step_conversations_total") - metric("waste_steps_total");
    std::vector<HttpResponse> replies(3);
    std::vector<std::thread> ts;
    for (int i = 0; i < 3; i++)
      ts.emplace_back([&, i] {
        replies[i] = http_request(d->port(), "POST", "/v1/chat/completions", body(i));
      });
    for (auto& t : ts) t.join();
    for (int i = 0; i < 3; i++) EXPECT_EQ(content(replies[i]), alone[i]) << model << " " << i;
    // Some step carried more than one conversation.
    EXPECT_GT(metric("waste_step_conversations_total") - metric("waste_steps_total"), steps);
    EXPECT_EQ(metric("waste_slots"), 3);
    // A slot is handed back just after its reply's last byte, so a client may see it busy for a
    // moment.
    EXPECT_TRUE(test::eventually([&] {
      return http_request(d->port(), "GET", "/health").body.find("\"slots_free\":3") !=
             std::string::npos;
    }));
  }
}

// A short request sent during another's long prefill is answered before that prefill ends (one
// slot would hold it until the long reply was done).
TEST_F(ServerTest, AShortRequestIsAnsweredDuringAnotherOnesLongPrefill) {
  auto d = start({kl(), "--parallel", "2", "--prompt-cache-dir", "off"});
  std::string words;
  for (int i = 0; i < 3000; i++) words += fmt::format("w{} ", i % 97);
  const std::string long_body = fmt::format(
      R"({{"messages":[{{"role":"user","content":"{}"}}],"max_tokens":4,"temperature":0}})", words);
  std::atomic<bool> long_done{false};
  std::thread long_client([&] {
    EXPECT_EQ(http_request(d->port(), "POST", "/v1/chat/completions", long_body).status, 200);
    long_done = true;
  });
  ASSERT_TRUE(test::eventually([&] {
    return test::metric_value(http_request(d->port(), "GET", "/metrics").body,
                              "waste_step_tokens_total") > 0;
  }));
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", kHello);
  const bool before = !long_done;
  long_client.join();
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(before) << "the short request waited for the long prefill";
}

TEST_F(ServerTest, K3ThinkingOnGoesToReasoningOffToContent) {
  auto d = start({k3()});
  HttpResponse on = http_request(d->port(), "POST", "/v1/chat/completions", kHello);
  ASSERT_EQ(on.status, 200) << on.body;
  auto m = parse(on.body)["choices"].at(0)["message"];
  EXPECT_FALSE(str(m["reasoning_content"]).empty()) << on.body;
  std::string off_body =
      R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":8,"temperature":0,"thinking":{"type":"disabled"}})";
  HttpResponse off = http_request(d->port(), "POST", "/v1/chat/completions", off_body);
  ASSERT_EQ(off.status, 200) << off.body;
  auto mo = parse(off.body)["choices"].at(0)["message"];
  EXPECT_NE(mo["reasoning_content"].error(), simdjson::SUCCESS) << off.body;
}

// Kimi-Linear serves tools in Kimi K2's format: declared tools are accepted, a named
// tool_choice and "required" come back as calls with K2's ids (functions.NAME:INDEX) and JSON
// arguments held to the schema, streamed as OpenAI's deltas, and a conversation carrying the
// calls and their results renders for the next turn.
TEST_F(ServerTest, KimiLinearCallsToolsInK2Format) {
  auto d = start({kl(), "--seed", "1", "--model-name", "m"});
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}}}])";
  const std::string user = R"("messages":[{"role":"user","content":"Weather in Paris?"}])";
  HttpResponse any = http_request(d->port(), "POST", "/v1/chat/completions",
                                  "{" + user + "," + tools + R"(,"max_tokens":4})");
  ASSERT_EQ(any.status, 200) << any.body;

  const std::string named =
      R"("tool_choice":{"type":"function","function":{"name":"get_weather"}})";
  HttpResponse forced =
      http_request(d->port(), "POST", "/v1/chat/completions",
                   "{" + user + "," + tools + "," + named + R"(,"max_tokens":60})");
  ASSERT_EQ(forced.status, 200) << forced.body;
  auto choice = parse(forced.body)["choices"].at(0);
  EXPECT_EQ(str(choice["finish_reason"]), "tool_calls") << forced.body;
  auto call = choice["message"]["tool_calls"].at(0);
  EXPECT_EQ(str(call["id"]), "functions.get_weather:0");
  EXPECT_EQ(str(call["function"]["name"]), "get_weather");
  simdjson::dom::parser args_parser;
  auto args = args_parser.parse(std::string(str(call["function"]["arguments"])));
  ASSERT_EQ(args.error(), simdjson::SUCCESS) << forced.body;
  EXPECT_TRUE(args["city"].is_string()) << forced.body;

  HttpResponse streamed =
      http_request(d->port(), "POST", "/v1/chat/completions",
                   "{" + user + "," + tools + "," + named + R"(,"max_tokens":60,"stream":true})");
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  std::string id, name, arguments, finish;
  for (const std::string& ev : streamed.events()) {
    if (ev == "[DONE]") continue;
    auto c = parse(ev)["choices"].at(0);
    if (c["finish_reason"].is_string()) finish = std::string(str(c["finish_reason"]));
    simdjson::dom::array calls;
    if (c["delta"]["tool_calls"].get(calls) != simdjson::SUCCESS) continue;
    for (auto tc : calls) {
      EXPECT_EQ(int64_t(tc["index"]), 0);
      if (tc["id"].is_string()) id += str(tc["id"]);
      if (tc["function"]["name"].is_string()) name += str(tc["function"]["name"]);
      if (tc["function"]["arguments"].is_string()) arguments += str(tc["function"]["arguments"]);
    }
  }
  EXPECT_EQ(id, "functions.get_weather:0");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(arguments, str(call["function"]["arguments"]));
  EXPECT_EQ(finish, "tool_calls");

  // "required" with parallel calls off: exactly one call, numbered after the history's call.
  const std::string history =
      R"("messages":[{"role":"user","content":"Weather in Paris?"},{"role":"assistant","content":null,"tool_calls":[{"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},{"role":"tool","tool_call_id":"functions.get_weather:0","content":"sunny"},{"role":"user","content":"And Rome?"}])";
  HttpResponse required =
      http_request(d->port(), "POST", "/v1/chat/completions",
                   "{" + history + "," + tools +
                       R"(,"tool_choice":"required","parallel_tool_calls":false,"max_tokens":60})");
  ASSERT_EQ(required.status, 200) << required.body;
  auto rc = parse(required.body)["choices"].at(0)["message"]["tool_calls"];
  ASSERT_EQ(rc.get_array().size(), 1u) << required.body;
  EXPECT_EQ(str(rc.at(0)["id"]), "functions.get_weather:1") << required.body;

  // The Messages API: a forced tool_use and its tool_result round trip.
  const std::string atools =
      R"("tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"]}}])";
  HttpResponse use = http_request(
      d->port(), "POST", "/v1/messages",
      R"({"model":"m","max_tokens":60,"messages":[{"role":"user","content":"Weather?"}],)" +
          atools + R"(,"tool_choice":{"type":"tool","name":"get_weather"}})");
  ASSERT_EQ(use.status, 200) << use.body;
  auto block = parse(use.body)["content"].at(0);
  EXPECT_EQ(str(block["type"]), "tool_use") << use.body;
  EXPECT_EQ(str(block["id"]), "functions.get_weather:0") << use.body;
  HttpResponse result = http_request(
      d->port(), "POST", "/v1/messages",
      R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"Weather?"},)"
      R"({"role":"assistant","content":[{"type":"tool_use","id":"functions.get_weather:0","name":"get_weather","input":{"city":"Paris"}}]},)"
      R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"functions.get_weather:0","content":"sunny"}]}],)" +
          atools + "}");
  EXPECT_EQ(result.status, 200) << result.body;
}

// Whether a reply thought, on each API: chat's reasoning_content, a Responses reasoning item, a
// Messages thinking block. `extra` adds the request's thinking fields.
bool replied_with_reasoning(int port, const std::string& path, const std::string& extra) {
  std::string body;
  if (path == "/v1/chat/completions")
    body =
        R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":8,"temperature":0)";
  else if (path == "/v1/responses")
    body = R"({"input":"hello world","max_output_tokens":8,"temperature":0)";
  else
    body =
        R"({"model":"k3","messages":[{"role":"user","content":"hello world"}],"max_tokens":8,"temperature":0)";
  HttpResponse r = http_request(port, "POST", path, body + extra + "}");
  EXPECT_EQ(r.status, 200) << path << extra << " " << r.body;
  simdjson::dom::parser p;
  simdjson::dom::element j = p.parse(r.body).value();
  if (path == "/v1/chat/completions") {
    simdjson::dom::element m = j["choices"].at(0)["message"];
    return m["reasoning_content"].error() == simdjson::SUCCESS &&
           !str(m["reasoning_content"]).empty();
  }
  const char* list = path == "/v1/responses" ? "output" : "content";
  const char* kind = path == "/v1/responses" ? "reasoning" : "thinking";
  for (simdjson::dom::element item : j[list].get_array())
    if (str(item["type"]) == kind) return true;
  return false;
}

// The request decides whether K3 thinks, over the server's default either way, as OpenAI's API
// lets a request choose its reasoning; `--thinking never` keeps it off whatever a request says.
TEST_F(ServerTest, RequestsTurnThinkingOnAndOffUnlessTheServerForbidsIt) {
  const std::string chat = "/v1/chat/completions", responses = "/v1/responses",
                    messages = "/v1/messages";
  const std::string enabled = R"(,"thinking":{"type":"enabled","budget_tokens":1024})";
  {
    auto d = start({k3(), "--model-name", "k3", "--thinking", "false"});
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, ""));
    EXPECT_TRUE(replied_with_reasoning(d->port(), chat, R"(,"reasoning_effort":"low")"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), responses, ""));
    EXPECT_TRUE(replied_with_reasoning(d->port(), responses, R"(,"reasoning":{"effort":"low"})"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), messages, ""));
    EXPECT_TRUE(replied_with_reasoning(d->port(), messages, enabled));
    // The request's own switch still wins over the effort it names.
    EXPECT_FALSE(
        replied_with_reasoning(d->port(), chat, R"(,"thinking":false,"reasoning_effort":"high")"));
  }
  {
    auto d = start({k3(), "--model-name", "k3"});
    EXPECT_TRUE(replied_with_reasoning(d->port(), chat, ""));
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, R"(,"reasoning_effort":"none")"));
    EXPECT_TRUE(replied_with_reasoning(d->port(), responses, ""));
    EXPECT_FALSE(replied_with_reasoning(d->port(), responses, R"(,"reasoning":{"effort":"none"})"));
    EXPECT_TRUE(replied_with_reasoning(d->port(), messages, ""));
    EXPECT_FALSE(replied_with_reasoning(d->port(), messages, R"(,"thinking":{"type":"disabled"})"));
  }
  {
    auto d = start({k3(), "--model-name", "k3", "--thinking", "never"});
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, R"(,"reasoning_effort":"high")"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, R"(,"thinking":true)"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), responses, R"(,"reasoning":{"effort":"high"})"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), messages, enabled));
  }
}

// A copy of `from` whose vocabulary also has <think> and </think> as special tokens, at
// K2-Thinking's offsets in the reserved block: a K2 container with a think channel.
void add_think_tokens(const fs::path& from, const fs::path& to) {
  fs::copy(from, to, fs::copy_options::recursive);
  std::string specials = test::read_file(to / "specials.json");
  const size_t bos = specials.find("\"[BOS]\"");
  const size_t id_at = specials.rfind("\"id\": ", bos) + 6;
  const long first = std::stol(specials.substr(id_at, specials.find(',', id_at) - id_at));
  specials.insert(specials.rfind(']'), fmt::format(R"(, {{"id": {}, "text": "<think>"}}, )"
                                                   R"({{"id": {}, "text": "</think>"}})",
                                                   first + 22, first + 23));
  test::write_file(to / "specials.json", specials);
}

// The request and `--thinking` decide whether a K2 model with a think channel reasons, by K3's
// rule. A reply held to a JSON value shows it: thinking, it reasons first (and a random model
// rarely closes the channel within the budget); not thinking, the channel is written empty and
// the value follows.
TEST_F(ServerTest, AK2ThinkChannelFollowsTheRequestUnlessTheServerForbidsIt) {
  test::TempDir dir;
  const fs::path k2t = dir / "k2t.waste";
  add_think_tokens(kl(), k2t);
  const std::string chat = "/v1/chat/completions", responses = "/v1/responses";
  const std::string json = R"(,"response_format":{"type":"json_object"})";
  const std::string text_json = R"(,"text":{"format":{"type":"json_object"}})";
  {
    auto d = start({k2t.string(), "--thinking", "false"});
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, json));
    EXPECT_TRUE(replied_with_reasoning(d->port(), chat, json + R"(,"reasoning_effort":"low")"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), responses, text_json));
    EXPECT_TRUE(replied_with_reasoning(d->port(), responses,
                                       text_json + R"(,"reasoning":{"effort":"low"})"));
  }
  {
    auto d = start({k2t.string()});
    EXPECT_TRUE(replied_with_reasoning(d->port(), chat, json));
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, json + R"(,"thinking":false)"));
  }
  {
    auto d = start({k2t.string(), "--thinking", "never"});
    EXPECT_FALSE(replied_with_reasoning(d->port(), chat, json + R"(,"thinking":true)"));
    EXPECT_FALSE(replied_with_reasoning(d->port(), responses,
                                        text_json + R"(,"reasoning":{"effort":"high"})"));
  }
}

// Tests run on each family: K3 (tiny K3) and Kimi K2's format (tiny Kimi-Linear).
class ServerFamilyTest : public ServerTest, public ::testing::WithParamInterface<std::string> {
 protected:
  std::string model() const { return GetParam() == "k3" ? k3() : kl(); }
};

std::string family_name(const ::testing::TestParamInfo<std::string>& p) {
  return p.param;
}

// A forced call (tool_choice naming a function, or "required") cut by the token budget before
// its opening was complete keeps the call, with the arguments generated so far: none, so `{}`.
TEST_P(ServerFamilyTest, AForcedCallCutBeforeItOpenedKeepsTheCall) {
  auto d = start({model(), "--model-name", "m"});
  const std::string function =
      R"("name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})";
  const std::string tool = R"({"type":"function",)" + function + "}";
  for (const std::string choice : {R"("required")", R"({"type":"function","name":"get_weather"})"})
    for (const std::string thinking : {"", R"(,"reasoning":{"effort":"none"})"}) {
      SCOPED_TRACE(choice + thinking);
      HttpResponse r =
          http_request(d->port(), "POST", "/v1/responses",
                       R"({"input":"weather?","max_output_tokens":1,"temperature":0,"tools":[)" +
                           tool + R"(],"tool_choice":)" + choice + thinking + "}");
      ASSERT_EQ(r.status, 200) << r.body;
      auto j = parse(r.body);
      EXPECT_EQ(str(j["status"]), "incomplete");
      // Last, after the reasoning a required call may think first.
      auto output = j["output"].get_array().value();
      ASSERT_GE(output.size(), 1u) << r.body;
      auto call = output.at(output.size() - 1);
      EXPECT_EQ(str(call["type"]), "function_call") << r.body;
      EXPECT_EQ(str(call["name"]), "get_weather");
      EXPECT_EQ(str(call["arguments"]), "{}");
      EXPECT_EQ(str(call["status"]), "incomplete");
      EXPECT_EQ(int64_t(j["usage"]["output_tokens"]), 1);  // the completed opening is not counted
    }
  // Chat completions, the same promise: the call, finish_reason "length". After an earlier call
  // K2 numbers this one 1.
  const std::string history =
      R"([{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"functions.get_weather:0","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"functions.get_weather:0","content":"sunny"},{"role":"user","content":"and Rome?"}])";
  HttpResponse c = http_request(
      d->port(), "POST", "/v1/chat/completions",
      R"({"messages":)" + history +
          R"(,"max_tokens":2,"temperature":0,"tools":[{"type":"function","function":{)" + function +
          R"(}}],"tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ASSERT_EQ(c.status, 200) << c.body;
  auto choice = parse(c.body)["choices"].at(0);
  EXPECT_EQ(str(choice["finish_reason"]), "length");
  auto made = choice["message"]["tool_calls"].at(0);
  EXPECT_EQ(str(made["function"]["name"]), "get_weather") << c.body;
  EXPECT_EQ(str(made["function"]["arguments"]), "{}");
  if (GetParam() == "k2") {
    EXPECT_EQ(str(made["id"]), "functions.get_weather:1");
  }
  // And the Messages API: a tool_use block with empty input, stop_reason "max_tokens".
  HttpResponse m = http_request(
      d->port(), "POST", "/v1/messages",
      R"({"model":"m","messages":[{"role":"user","content":"weather?"}],"max_tokens":1,"temperature":0,"tools":[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],"tool_choice":{"type":"any"}})");
  ASSERT_EQ(m.status, 200) << m.body;
  auto message = parse(m.body);
  EXPECT_EQ(str(message["stop_reason"]), "max_tokens");
  auto blocks = message["content"].get_array().value();
  ASSERT_GE(blocks.size(), 1u) << m.body;
  auto use = blocks.at(blocks.size() - 1);
  EXPECT_EQ(str(use["type"]), "tool_use") << m.body;
  EXPECT_EQ(str(use["name"]), "get_weather");
  EXPECT_EQ(simdjson::minify(use["input"]), "{}");
}

INSTANTIATE_TEST_SUITE_P(Families, ServerFamilyTest, ::testing::Values("k3", "k2"), family_name);

// The bytes of a choice's content logprobs, concatenated, as text (a byte that is no whole
// character reads as U+FFFD, as the content spells it).
std::string logprob_bytes(simdjson::dom::element logprobs) {
  std::string out;
  for (auto t : logprobs["content"].get_array())
    for (auto b : t["bytes"].get_array()) out += (char)int64_t(b);
  return replace_invalid_utf8(out);
}

// logprobs list exactly the content's tokens (their bytes spell it), greedy picks the top
// alternative, and the thinking channel's tokens are not listed; streamed, each chunk's entries
// spell its delta.
TEST_F(ServerTest, ChatLogprobsSpellTheContent) {
  for (const std::string& model : {kl(), k3()}) {
    auto d = start({model});
    const std::string body =
        R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":12,"temperature":0,"logprobs":true,"top_logprobs":3)";
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body + "}");
    ASSERT_EQ(r.status, 200) << r.body;
    auto choice = parse(r.body)["choices"].at(0);
    const std::string content(str(choice["message"]["content"]));
    EXPECT_EQ(logprob_bytes(choice["logprobs"]), content) << r.body;
    if (model == k3()) {
      EXPECT_FALSE(str(choice["message"]["reasoning_content"]).empty());
    }
    for (auto t : choice["logprobs"]["content"].get_array()) {
      auto top = t["top_logprobs"].get_array().value();
      ASSERT_EQ(top.size(), 3u);
      EXPECT_EQ(str(top.at(0)["token"]), str(t["token"]));
      EXPECT_EQ(double(top.at(0)["logprob"]), double(t["logprob"]));
      EXPECT_LE(double(t["logprob"]), 0.0);
      EXPECT_GE(double(top.at(0)["logprob"]), double(top.at(1)["logprob"]));
    }
    HttpResponse s =
        http_request(d->port(), "POST", "/v1/chat/completions", body + R"(,"stream":true})");
    ASSERT_EQ(s.status, 200) << s.body;
    std::string streamed;
    for (const std::string& e : s.events()) {
      if (e == "[DONE]") continue;
      auto c = parse(e)["choices"].at(0);
      if (c["delta"]["content"].error() != simdjson::SUCCESS || str(c["delta"]["content"]).empty())
        continue;
      EXPECT_EQ(logprob_bytes(c["logprobs"]), str(c["delta"]["content"]));
      streamed += str(c["delta"]["content"]);
    }
    EXPECT_EQ(streamed, content);
  }
}

// --seed is the seed of every request that gives none, on both endpoints, as with llama-server:
// the same sampled request gets the same reply, and a request's own seed still wins.
TEST_F(ServerTest, TheServersSeedIsTheDefaultForRequestsWithoutOne) {
  auto d = start({kl(), "--seed", "40"});
  auto reply = [&](const std::string& path, const std::string& extra) {
    bool chat = path == "/v1/chat/completions";
    std::string body = (chat ? R"({"messages":[{"role":"user","content":"hello world"}])"
                             : R"({"prompt":"hello world")") +
                       std::string(R"(,"max_tokens":12,"temperature":1.0)") + extra + "}";
    HttpResponse r = http_request(d->port(), "POST", path, body);
    EXPECT_EQ(r.status, 200) << r.body;
    auto c = parse(r.body)["choices"].at(0);
    return std::string(chat ? str(c["message"]["content"]) : str(c["text"]));
  };
  for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
    std::string first = reply(path, "");
    EXPECT_EQ(reply(path, ""), first) << path;
    EXPECT_EQ(reply(path, R"(,"seed":40)"), first) << path;
    EXPECT_NE(reply(path, R"(,"seed":41)"), first) << path;
  }
}

// n replies: reply i is the single reply with seed + i; the prompt counts once; a json_object
// constraint holds every reply (each starts from a fresh copy of it).
TEST_F(ServerTest, SeveralChoicesMatchSingleSeededRequests) {
  auto d = start({kl()});
  auto ask = [&](const std::string& extra) {
    HttpResponse r = http_request(
        d->port(), "POST", "/v1/chat/completions",
        R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":10,"temperature":1.0)" +
            extra + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    return parse(r.body);
  };
  auto three = ask(R"(,"seed":40,"n":3)");
  ASSERT_EQ(three["choices"].get_array().size(), 3u);
  int64_t tokens = 0;
  for (int i = 0; i < 3; i++) {
    auto one = ask(fmt::format(R"(,"seed":{})", 40 + i));
    EXPECT_EQ(int64_t(three["choices"].at(i)["index"]), i);
    EXPECT_EQ(str(three["choices"].at(i)["message"]["content"]),
              str(one["choices"].at(0)["message"]["content"]))
        << i;
    EXPECT_EQ(int64_t(three["usage"]["prompt_tokens"]), int64_t(one["usage"]["prompt_tokens"]));
    tokens += int64_t(one["usage"]["completion_tokens"]);
  }
  EXPECT_EQ(int64_t(three["usage"]["completion_tokens"]), tokens);
  auto json = ask(R"(,"seed":5,"n":2,"max_tokens":200,"response_format":{"type":"json_object"})");
  for (int i = 0; i < 2; i++) {
    std::string text(str(json["choices"].at(i)["message"]["content"]));
    if (str(json["choices"].at(i)["finish_reason"]) != "stop") continue;  // cut short
    simdjson::dom::parser p;
    EXPECT_EQ(p.parse(text).error(), simdjson::SUCCESS) << text;
  }
  // Streamed, the replies are decoded at once (their chunks take turns) and each choice's
  // chunks, with their log-probabilities, spell what the same request answers in one body.
  const std::string streamed_body =
      R"({"messages":[{"role":"user","content":"hello world"}],"max_tokens":16,)"
      R"("temperature":1.0,"seed":7,"n":3,"logprobs":true)";
  auto whole =
      parse(http_request(d->port(), "POST", "/v1/chat/completions", streamed_body + "}").body);
  HttpResponse s =
      http_request(d->port(), "POST", "/v1/chat/completions", streamed_body + R"(,"stream":true})");
  ASSERT_EQ(s.status, 200) << s.body;
  std::vector<std::string> content(3);
  std::vector<int> roles(3, 0), finishes(3, 0);
  int switches = 0, last = -1;
  for (const std::string& e : s.events()) {
    if (e == "[DONE]") continue;
    auto c = parse(e)["choices"].at(0);
    const int i = (int)int64_t(c["index"]);
    ASSERT_TRUE(i >= 0 && i < 3) << e;
    if (c["delta"]["role"].error() == simdjson::SUCCESS) roles[i]++;
    if (c["finish_reason"].is_string()) finishes[i]++;
    if (c["delta"]["content"].error() != simdjson::SUCCESS || str(c["delta"]["content"]).empty())
      continue;
    EXPECT_EQ(logprob_bytes(c["logprobs"]), str(c["delta"]["content"]));
    content[i] += str(c["delta"]["content"]);
    switches += last >= 0 && last != i;
    last = i;
  }
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(content[i], str(whole["choices"].at(i)["message"]["content"])) << i;
    EXPECT_EQ(roles[i], 1) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  EXPECT_GT(switches, 2) << "the replies did not take turns";
  HttpResponse too_many = http_request(d->port(), "POST", "/v1/chat/completions",
                                       R"({"messages":[{"role":"user","content":"x"}],"n":9})");
  EXPECT_EQ(too_many.status, 400);
  EXPECT_EQ(str(parse(too_many.body)["error"]["param"]), "n");
}

// echo: the prompt comes first; with logprobs every prompt token is scored (the first null),
// max_tokens 0 scores only, and the scores agree with a request that generates after it.
TEST_F(ServerTest, CompletionsEchoAndLogprobs) {
  auto d = start({kl()});
  auto ask = [&](const std::string& extra) {
    HttpResponse r =
        http_request(d->port(), "POST", "/v1/completions",
                     R"({"prompt":"hello world, how are","temperature":0)" + extra + "}");
    EXPECT_EQ(r.status, 200) << r.body;
    return parse(r.body)["choices"].at(0);
  };
  auto plain = ask(R"(,"max_tokens":4)");
  auto echoed = ask(R"(,"max_tokens":4,"echo":true)");
  EXPECT_EQ(str(echoed["text"]), "hello world, how are" + std::string(str(plain["text"])));
  auto scored = ask(R"(,"max_tokens":0,"echo":true,"logprobs":2)");
  EXPECT_EQ(str(scored["text"]), "hello world, how are");
  auto lp = scored["logprobs"];
  const size_t n = lp["tokens"].get_array().size();
  ASSERT_GE(n, 3u);
  EXPECT_TRUE(lp["token_logprobs"].at(0).is_null());
  EXPECT_TRUE(lp["top_logprobs"].at(0).is_null());
  std::string spelled;
  for (auto t : lp["tokens"].get_array()) spelled += str(t);
  EXPECT_EQ(spelled, "hello world, how are");
  auto both = ask(R"(,"max_tokens":3,"echo":true,"logprobs":2)");
  auto lb = both["logprobs"];
  ASSERT_EQ(lb["tokens"].get_array().size(), n + 3);
  for (size_t i = 1; i < n; i++)
    EXPECT_EQ(double(lb["token_logprobs"].at(i)), double(lp["token_logprobs"].at(i))) << i;
  auto gen = ask(R"(,"max_tokens":3,"logprobs":1)");
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(double(lb["token_logprobs"].at(n + i)),
              double(gen["logprobs"]["token_logprobs"].at(i)));
    EXPECT_EQ(int64_t(gen["logprobs"]["text_offset"].at(i)) + 20,
              int64_t(lb["text_offset"].at(n + i)));
  }
}

TEST_F(ServerTest, SecondTurnReusesThePrefixAndMatchesAColdRun) {
  auto warm = start({kl()});
  HttpResponse t1 = http_request(warm->port(), "POST", "/v1/chat/completions", kHello);
  ASSERT_EQ(t1.status, 200);
  std::string reply(str(parse(t1.body)["choices"].at(0)["message"]["content"]));
  std::string turn2 =
      R"({"messages":[{"role":"user","content":"hello world"},{"role":"assistant","content":)";
  turn2 += "\"\"";  // the reply's text is noise; any assistant text makes a second turn
  turn2 += R"(},{"role":"user","content":"and again"}],"max_tokens":8,"temperature":0})";
  HttpResponse t2 = http_request(warm->port(), "POST", "/v1/chat/completions", turn2);
  ASSERT_EQ(t2.status, 200) << t2.body;
  auto j2 = parse(t2.body);
  int64_t cached = j2["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, 3);
  EXPECT_LT(cached, int64_t(j2["usage"]["prompt_tokens"]));
  auto cold = start({kl()});
  HttpResponse c2 = http_request(cold->port(), "POST", "/v1/chat/completions", turn2);
  ASSERT_EQ(c2.status, 200);
  auto jc = parse(c2.body);
  EXPECT_EQ(int64_t(jc["usage"]["prompt_tokens_details"]["cached_tokens"]), 0);
  EXPECT_EQ(str(jc["choices"].at(0)["message"]["content"]),
            str(j2["choices"].at(0)["message"]["content"]));
  (void)reply;
}

// An agent's retry edits its one user message: the system prompt and the tools before it come
// from the snapshot taken at the preamble, with a cold run's reply.
TEST_F(ServerTest, AnEditedUserMessageReusesTheSystemPromptAndTools) {
  auto ask = [this](Daemon& d, const std::string& user) {
    std::string body =
        R"({"messages":[{"role":"system","content":"You are a coding agent. Be brief."},)"
        R"({"role":"user","content":")" +
        user +
        R"("}],"tools":[{"type":"function","function":{"name":"read_file","parameters":)"
        R"({"type":"object","properties":{"path":{"type":"string"}}}}}],)"
        R"("max_tokens":8,"temperature":0})";
    HttpResponse r = http_request(d.port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = parse(r.body);
    return std::make_pair(int64_t(j["usage"]["prompt_tokens_details"]["cached_tokens"]),
                          std::string(str(j["choices"].at(0)["message"]["content"])));
  };
  auto warm = start({k3(), "--thinking", "false"});
  EXPECT_EQ(ask(*warm, "Fix the failing test").first, 0);
  auto [cached, reply] = ask(*warm, "Fix the failing test, then run it");
  EXPECT_GT(cached, 20);  // the system prompt and the tool's declaration
  auto cold = start({k3(), "--thinking", "false"});
  EXPECT_EQ(ask(*cold, "Fix the failing test, then run it"), std::make_pair(int64_t{0}, reply));
}

// The prompt cache's disk tier across restarts (server/prompt_cache/): with the memory tier too
// small to hold anything, two interleaved conversations are served from disk after a restart
// with exactly a cold run's tokens; damaged files are skipped and deleted with a cold run's
// result; the byte bound is kept; a read-only folder leaves the daemon serving.
TEST_F(ServerTest, PromptCacheOnDiskSurvivesRestartsAndBadFiles) {
  test::TempDir cache;
  auto turn = [](const char* first, const char* second) {
    std::string b = fmt::format(R"({{"messages":[{{"role":"user","content":"{}"}})", first);
    if (second)
      b += fmt::format(R"(,{{"role":"assistant","content":""}},{{"role":"user","content":"{}"}})",
                       second);
    return b + R"(],"max_tokens":6,"temperature":0})";
  };
  struct Reply {
    int64_t cached;
    std::string content;
  };
  auto ask = [&](Daemon& d, const std::string& body) {
    HttpResponse r = http_request(d.port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 200) << r.body;
    auto j = parse(r.body);
    return Reply{int64_t(j["usage"]["prompt_tokens_details"]["cached_tokens"]),
                 std::string(str(j["choices"].at(0)["message"]["content"]))};
  };
  const std::string a1 = turn("hello world", nullptr), a2 = turn("hello world", "and again");
  const std::string b1 = turn("tell me a story", nullptr), b2 = turn("tell me a story", "go on");
  const std::vector<std::string> on = {kl(), "--prompt-cache-dir", cache.path().string(),
                                       "--snapshot-memory", "1"};
  auto cold = start({kl()});
  const Reply cold_a2 = ask(*cold, a2), cold_b2 = ask(*cold, b2);
  {
    auto d = start(on);
    ask(*d, a1);
    ask(*d, b1);
    EXPECT_EQ(d->terminate(), 0) << d->log();  // pending writes are flushed on the way out
  }
  {
    auto d = start(on);
    const Reply r_a2 = ask(*d, a2), r_b2 = ask(*d, b2);
    EXPECT_GT(r_a2.cached, 3);
    EXPECT_GT(r_b2.cached, 3);
    EXPECT_EQ(r_a2.content, cold_a2.content);
    EXPECT_EQ(r_b2.content, cold_b2.content);
    HttpResponse m = http_request(d->port(), "GET", "/metrics");
    EXPECT_NE(m.body.find("waste_prompt_cache_hits_total{tier=\"disk\"} 2"), std::string::npos)
        << m.body;
    // The expert cache started warm from the first run's counts.
    EXPECT_NE(d->log().find("expert cache: warming"), std::string::npos) << d->log();
    EXPECT_EQ(m.body.find("waste_expert_cache_warmed_records 0\n"), std::string::npos) << m.body;
    EXPECT_EQ(d->terminate(), 0);
  }
  {
    std::vector<std::string> cold_start = on;
    cold_start.insert(cold_start.end(), {"--warm-start", "false"});
    auto d = start(cold_start);
    EXPECT_EQ(ask(*d, a2).content, cold_a2.content);
    EXPECT_EQ(d->log().find("expert cache: warming"), std::string::npos) << d->log();
    HttpResponse m = http_request(d->port(), "GET", "/metrics");
    EXPECT_NE(m.body.find("waste_expert_cache_warmed_records 0\n"), std::string::npos) << m.body;
    EXPECT_EQ(d->terminate(), 0);
  }
  // Every snapshot damaged: skipped with a warning, deleted, and the reply is a cold run's.
  size_t damaged = 0;
  for (const auto& e : fs::recursive_directory_iterator(cache.path()))
    if (e.path().extension() == ".snap") {
      fs::resize_file(e.path(), fs::file_size(e.path()) - 1);
      damaged++;
    }
  ASSERT_GE(damaged, 2u);
  {
    auto d = start(on);
    const Reply r = ask(*d, a2);
    EXPECT_EQ(r.cached, 0);
    EXPECT_EQ(r.content, cold_a2.content);
    size_t warnings = 0;
    for (size_t at = 0; (at = d->log().find("prompt cache: skipping", at)) != std::string::npos;
         at++)
      warnings++;
    EXPECT_EQ(warnings, damaged) << d->log();  // one per file
    EXPECT_EQ(d->terminate(), 0);
  }
  // A bound below what four conversations take is kept.
  test::TempDir small;
  {
    auto d =
        start({kl(), "--prompt-cache-dir", small.path().string(), "--prompt-cache-disk", "200000"});
    for (const char* first : {"one", "two", "three", "four"}) ask(*d, turn(first, "more"));
    EXPECT_EQ(d->terminate(), 0);
  }
  uint64_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(small.path()))
    if (e.is_regular_file()) bytes += e.file_size();
  EXPECT_GT(bytes, 0u);
  EXPECT_LE(bytes, 200000u);
  // A read-only cache folder: one warning, and serving goes on.
  test::SmallFilesystem ro(64 * 1024, true);
  if (!ro.ok()) return;
  auto d = start({kl(), "--prompt-cache-dir", ro.path().string()});
  EXPECT_EQ(ask(*d, a2).content, cold_a2.content);
  EXPECT_NE(d->log().find("the disk tier is off"), std::string::npos) << d->log();
}

TEST_F(ServerTest, EngineFailureMidStreamEndsTheStreamCleanly) {
  test::TempDir d;
  fs::path m = d / "m.waste";
  fs::copy(kl(), m, fs::copy_options::recursive);
  auto daemon = start({m.string(), "--lookahead", "0"});
  for (const auto& e : fs::directory_iterator(m))  // every bank now fails its header check
    if (e.path().filename().string().rfind("experts-L", 0) == 0) {
      auto size = fs::file_size(e.path());
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << std::string(size, '\0');
    }
  std::string body = std::string(kHello);
  body.insert(1, R"("stream":true,)");
  HttpResponse r = http_request(daemon->port(), "POST", "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200);
  auto ev = r.events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_NE(ev[ev.size() - 2].find("\"error\""), std::string::npos) << r.body;
  EXPECT_NE(ev[ev.size() - 2].find("of layer"), std::string::npos) << r.body;
  EXPECT_EQ(http_request(daemon->port(), "GET", "/health").status, 200);
  HttpResponse plain = http_request(daemon->port(), "POST", "/v1/chat/completions", kHello);
  EXPECT_EQ(plain.status, 500) << plain.body;
}

// The SDK suites run on each family: K3 (tiny K3) and Kimi K2's format (tiny Kimi-Linear). The
// scripts are told the family for what differs: call ids, images, the think channel.
class ServerSdkTest : public ServerFamilyTest {
 protected:
  std::string script(std::string_view name) const {
    return (test::source_dir() / "tests/e2e" / name).string();
  }
};

TEST_P(ServerSdkTest, OfficialOpenAINodeSdkChatsStreamsAndCallsTools) {
  auto d = start({model(), "--api-key", "test-key"});
  std::string out;
  std::string cmd = "node " + script("openai_sdk.mjs") +
                    " http://127.0.0.1:" + std::to_string(d->port()) + "/v1 " + GetParam();
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out << d->log();
  EXPECT_NE(out.find("openai sdk: ok"), std::string::npos) << out;
}

// The Responses API through the official OpenAI SDK (tests/e2e/responses_sdk.mjs).
TEST_P(ServerSdkTest, OfficialOpenAISdkResponsesApi) {
  auto d = start({model(), "--api-key", "test-key"});
  std::string out;
  std::string cmd = "node " + script("responses_sdk.mjs") +
                    " http://127.0.0.1:" + std::to_string(d->port()) + "/v1 " + GetParam();
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out << d->log();
  EXPECT_NE(out.find("responses sdk: ok"), std::string::npos) << out;
}

// The Messages API through the official Anthropic SDK (tests/e2e/anthropic_sdk.mjs), with the
// name Claude Code would send mapped onto the served model.
TEST_P(ServerSdkTest, OfficialAnthropicSdkCreatesStreamsCallsToolsAndCounts) {
  auto d = start({model(), "--api-key", "test-key", "--model-alias", "claude-sonnet-4-5"});
  std::string out;
  std::string cmd = "node " + script("anthropic_sdk.mjs") +
                    " http://127.0.0.1:" + std::to_string(d->port()) + " claude-sonnet-4-5 " +
                    GetParam();
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out << d->log();
  EXPECT_NE(out.find("anthropic sdk: ok"), std::string::npos) << out;
}

// zod 4 schemas through the openai SDK's zodResponseFormat, the AI SDK and LangChain, each
// result checked by zod; tool_choice "required" through the AI SDK (tests/e2e/structured_sdks.mjs).
TEST_P(ServerSdkTest, ZodSchemasThroughTheSdksValidate) {
  auto d = start({model(), "--api-key", "test-key", "--thinking", "false"});
  std::string out;
  std::string cmd = "AI_SDK_LOG_WARNINGS=false node --no-deprecation " +
                    script("structured_sdks.mjs") +
                    " http://127.0.0.1:" + std::to_string(d->port()) + "/v1";
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out << d->log();
  EXPECT_NE(out.find("structured sdks: ok"), std::string::npos) << out;
}

// Two clients run the OpenAI SDK suite at once against one daemon with two slots.
TEST_P(ServerSdkTest, TheOpenAISdkSuiteRunsTwiceAtOnce) {
  auto d = start({model(), "--api-key", "test-key", "--parallel", "2"});
  const std::string cmd = "node " + script("openai_sdk.mjs") +
                          " http://127.0.0.1:" + std::to_string(d->port()) + "/v1 " + GetParam();
  std::vector<std::string> out(2);
  std::vector<int> rc(2);
  std::vector<std::thread> ts;
  for (int i = 0; i < 2; i++) ts.emplace_back([&, i] { rc[i] = test::run_command(cmd, &out[i]); });
  for (auto& t : ts) t.join();
  for (int i = 0; i < 2; i++) {
    EXPECT_EQ(rc[i], 0) << out[i] << d->log();
    EXPECT_NE(out[i].find("openai sdk: ok"), std::string::npos) << out[i];
  }
  const std::string metrics =
      http_request(d->port(), "GET", "/metrics", "", {{"Authorization", "Bearer test-key"}}).body;
  EXPECT_GT(test::metric_value(metrics, "waste_step_conversations_total"),
            test::metric_value(metrics, "waste_steps_total"))
      << "no step carried both clients";
}

INSTANTIATE_TEST_SUITE_P(Families, ServerSdkTest, ::testing::Values("k3", "k2"), family_name);

// Node's http client reads HEAD answers on a kept-alive socket (tests/e2e/head_keepalive.mjs): a
// HEAD's body would be read as the next response's status line (HPE_INVALID_CONSTANT), which broke
// any Node-based probe or proxy in front of the daemon (Claude Code 2.1.197 sends HEAD / first).
TEST_F(ServerTest, NodesHttpClientReadsHeadAnswersOnAKeptAliveSocket) {
  auto d = start({kl(), "--api-key", "test-key"});
  std::string out;
  const std::string cmd = "node " + (test::source_dir() / "tests/e2e/head_keepalive.mjs").string() +
                          " http://127.0.0.1:" + std::to_string(d->port());
  EXPECT_EQ(test::run_command(cmd, &out), 0) << out << d->log();
  EXPECT_NE(out.find("head keep-alive: ok"), std::string::npos) << out;
}

// Agents send their own model names. The served id and each alias are answered under the name
// asked for, by /v1/models/{name} and in the `model` of every API's reply, streamed or not;
// --model-alias '*' answers any name; without it, any other name is a 404 everywhere.
TEST_F(ServerTest, ModelNamesAreEchoedAndTheStarAliasAnswersAny) {
  auto echoes = [&](int port, const std::string& name, const std::string& path_name) {
    SCOPED_TRACE(name);
    HttpResponse m = http_request(port, "GET", "/v1/models/" + path_name);
    ASSERT_EQ(m.status, 200) << m.body;
    EXPECT_EQ(str(parse(m.body)["id"]), name);
    const std::string hi = R"("messages":[{"role":"user","content":"hi"}],"max_tokens":1)";
    const std::string quoted = "\"" + name + "\"";
    for (const char* stream : {"false", "true"}) {
      SCOPED_TRACE(stream);
      const std::string tail = std::string(R"(,"stream":)") + stream + "}";
      HttpResponse c = http_request(port, "POST", "/v1/chat/completions",
                                    "{\"model\":" + quoted + "," + hi + tail);
      ASSERT_EQ(c.status, 200) << c.body;
      const std::string chat = stream[0] == 't' ? c.events().front() : c.body;
      EXPECT_EQ(str(parse(chat)["model"]), name) << chat;
      HttpResponse r =
          http_request(port, "POST", "/v1/responses",
                       "{\"model\":" + quoted + R"(,"input":"hi","max_output_tokens":1)" + tail);
      ASSERT_EQ(r.status, 200) << r.body;
      simdjson::dom::element resp =
          stream[0] == 't' ? parse(r.events().front())["response"].value() : parse(r.body);
      EXPECT_EQ(str(resp["model"]), name) << r.body;
      HttpResponse a =
          http_request(port, "POST", "/v1/messages", "{\"model\":" + quoted + "," + hi + tail);
      ASSERT_EQ(a.status, 200) << a.body;
      simdjson::dom::element msg =
          stream[0] == 't' ? parse(a.events().front())["message"].value() : parse(a.body);
      EXPECT_EQ(str(msg["model"]), name) << a.body;
    }
  };
  {
    auto d = start({kl(), "--model-name", "kl", "--model-alias", "claude-sonnet-4-5"});
    echoes(d->port(), "kl", "kl");
    echoes(d->port(), "claude-sonnet-4-5", "claude-sonnet-4-5");
    // No name: the served id.
    HttpResponse c =
        http_request(d->port(), "POST", "/v1/chat/completions",
                     R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})");
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(str(parse(c.body)["model"]), "kl");
    // Any other name is refused, and the refusal says how to serve it.
    const std::string other = R"("model":"claude-opus-5-5","max_tokens":1,)";
    for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
             {"/v1/chat/completions",
              "{" + other + R"("messages":[{"role":"user","content":"hi"}]})"},
             {"/v1/responses", R"({"model":"claude-opus-5-5","input":"hi"})"},
             {"/v1/messages", "{" + other + R"("messages":[{"role":"user","content":"hi"}]})"}}) {
      HttpResponse r = http_request(d->port(), "POST", path, body);
      EXPECT_EQ(r.status, 404) << path << ": " << r.body;
      EXPECT_NE(r.body.find("--model-alias '*' answers any name"), std::string::npos) << r.body;
    }
    EXPECT_EQ(http_request(d->port(), "GET", "/v1/models/claude-opus-5-5").status, 404);
  }
  auto d = start({kl(), "--model-name", "kl", "--model-alias", "*"});
  echoes(d->port(), "claude-opus-5-5", "claude-opus-5-5");
  echoes(d->port(), "claude-opus-4-8[1m]", "claude-opus-4-8%5B1m%5D");
  // The list still names the served model alone.
  HttpResponse list = http_request(d->port(), "GET", "/v1/models");
  EXPECT_EQ(str(parse(list.body)["data"].at(0)["id"]), "kl");
  EXPECT_EQ(parse(list.body)["data"].get_array().value().size(), 1u);
}

// The client configurations README.md shows are the ones run here, read out of it at their
// `<!-- test: NAME -->` markers with only the port and the key put in (Codex's runs in
// tests/agent_cli_test.cpp): opencode's and Continue's through the chat completions they send,
// Claude Code's environment through the Anthropic SDK, which reads the same variables, with the
// default model names of two Claude Code versions against --model-alias '*'.
TEST_F(ServerTest, TheReadmesClientConfigurationsWorkAsWritten) {
  test::TempDir dir;
  const std::string e2e = (test::source_dir() / "tests/e2e").string();
  // The daemon's port for 8000, the test's key for the README's KEY in `key_line`.
  auto substitutions = [](int port, const std::string& key_line) {
    const size_t key = key_line.rfind("KEY");
    return std::vector<std::pair<std::string, std::string>>{
        {"127.0.0.1:8000", "127.0.0.1:" + std::to_string(port)},
        {key_line, key_line.substr(0, key) + "test-key" + key_line.substr(key + 3)}};
  };
  std::string out;
  {
    auto d = start({kl(), "--model-name", "k3", "--api-key", "test-key"});
    test::write_file(
        dir / "opencode.json",
        test::readme_snippet("opencode-config", substitutions(d->port(), R"("apiKey": "KEY")")));
    EXPECT_EQ(test::run_command("node " + e2e + "/readme_clients.mjs opencode " +
                                    (dir / "opencode.json").string(),
                                &out),
              0)
        << out << d->log();
    EXPECT_NE(out.find("readme opencode: ok"), std::string::npos) << out;
    test::write_file(
        dir / "continue.yaml",
        test::readme_snippet("continue-config", substitutions(d->port(), "apiKey: KEY")));
    // YAML read by Python's yaml module (python3-yaml), handed on as JSON.
    ASSERT_EQ(test::run_command("/usr/bin/python3 -c 'import json, sys, yaml; "
                                "json.dump(yaml.safe_load(sys.stdin), sys.stdout)' < " +
                                    (dir / "continue.yaml").string() + " > " +
                                    (dir / "continue.json").string(),
                                &out),
              0)
        << out;
    EXPECT_EQ(test::run_command("node " + e2e + "/readme_clients.mjs continue " +
                                    (dir / "continue.json").string(),
                                &out),
              0)
        << out << d->log();
    EXPECT_NE(out.find("readme continue: ok"), std::string::npos) << out;
  }
  auto d = start({kl(), "--api-key", "test-key", "--model-alias", "*"});
  test::write_file(
      dir / "claude.sh",
      test::readme_snippet("claude-code-env", substitutions(d->port(), "ANTHROPIC_API_KEY=KEY")));
  EXPECT_EQ(test::run_command(". " + (dir / "claude.sh").string() + " && node " + e2e +
                                  "/readme_clients.mjs claude-code claude-opus-5-5 "
                                  "'claude-opus-4-8[1m]' claude-haiku-4-5",
                              &out),
            0)
      << out << d->log();
  EXPECT_NE(out.find("readme claude-code: ok"), std::string::npos) << out;
}

// The quick start's curl line, as README.md shows it, streams a reply.
TEST_F(ServerTest, TheReadmesCurlLineStreams) {
  auto d = start({kl()});
  std::string out;
  ASSERT_EQ(test::run_command(
                test::readme_snippet(
                    "curl-chat", {{"127.0.0.1:8000", "127.0.0.1:" + std::to_string(d->port())}}),
                &out),
            0)
      << out;
  EXPECT_NE(out.find("\"object\":\"chat.completion.chunk\""), std::string::npos) << out;
  EXPECT_NE(out.find("data: [DONE]"), std::string::npos) << out;
}

TEST_F(ServerTest, BadOptionsAreRefusedAtStart) {
  std::string out;
  EXPECT_EQ(test::run_command(test::waste_binary().string() + " serve --port 99999", &out), 2);
  EXPECT_NE(out.find("--port"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(test::waste_binary().string() + " serve --frobnicate 1", &out), 2);
  EXPECT_NE(out.find("unknown option --frobnicate"), std::string::npos) << out;
  test::TempDir d;
  test::write_file(d / "c.json", R"({"port": 8123, "colour": "blue"})");
  EXPECT_EQ(test::run_command(
                test::waste_binary().string() + " serve --config " + (d / "c.json").string(), &out),
            2);
  EXPECT_NE(out.find("unknown option 'colour'"), std::string::npos) << out;
}

}  // namespace
}  // namespace waste
