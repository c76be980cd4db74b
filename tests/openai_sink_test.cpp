// The OpenAI side of a generation (server/api/openai_sink.h) over a recording ResponseWriter:
// which calls a stream and a plain answer make, in which order, and what finish_reason, usage
// and error bodies they carry.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <simdjson.h>

#include <string>
#include <vector>

#include "server/api/openai_sink.h"
#include "tests/recording_writer.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using test::RecordingWriter;

ReplyEvent event(ReplyEvent::Kind kind, std::string text = "", size_t index = 0,
                 std::string id = "", std::string name = "") {
  ReplyEvent e;
  e.kind = kind;
  e.text = std::move(text);
  e.tool_index = index;
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}

DecodeResult result(Finish f, size_t tokens) {
  DecodeResult r;
  r.finish = f;
  r.prompt_tokens = 11;
  r.cached_tokens = 4;
  r.tokens.assign(tokens, 1);
  return r;
}

simdjson::dom::element parse(simdjson::dom::parser& p, const std::string& json) {
  return p.parse(json).value();
}

const ResponseHeader kHeader{"chatcmpl-1", 1700000000, "m", ""};

OpenAiSinkOptions options(bool chat, bool stream, bool usage) {
  OpenAiSinkOptions o;
  o.chat = chat;
  o.stream = stream;
  o.include_usage = usage;
  return o;
}

using K = ReplyEvent::Kind;

TEST(OpenAiSink, ChatBodyHoldsTheWholeReply) {
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSink sink(w, kHeader, options(true, false, false));
  sink.begin();
  sink.on_event(event(K::kReasoning, "think"));
  sink.on_event(event(K::kContent, "Hel"));
  sink.on_event(event(K::kContent, "lo"));
  sink.on_event(event(K::kToolCallStart, "", 0, "call_a", "f"));
  sink.on_event(event(K::kToolCallArguments, "{\"x\":", 0));
  sink.on_event(event(K::kToolCallArguments, "1}", 0));
  sink.on_event(event(K::kEnd));
  sink.end(std::vector{result(Finish::kEnd, 7)});
  ASSERT_EQ(w->calls.size(), 1u);
  const std::string prefix = "send 200 application/json ";
  ASSERT_TRUE(w->calls[0].starts_with(prefix)) << w->calls[0];
  simdjson::dom::parser p;
  auto body = parse(p, w->calls[0].substr(prefix.size()));
  EXPECT_EQ(std::string_view(body["object"]), "chat.completion");
  EXPECT_EQ(std::string_view(body["id"]), "chatcmpl-1");
  auto choice = body["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"]), "tool_calls");
  EXPECT_EQ(std::string_view(choice["message"]["content"]), "Hello");
  EXPECT_EQ(std::string_view(choice["message"]["reasoning_content"]), "think");
  auto call = choice["message"]["tool_calls"].at(0);
  EXPECT_EQ(std::string_view(call["id"]), "call_a");
  EXPECT_EQ(std::string_view(call["function"]["name"]), "f");
  EXPECT_EQ(std::string_view(call["function"]["arguments"]), "{\"x\":1}");
  EXPECT_EQ(int64_t(body["usage"]["prompt_tokens"]), 11);
  EXPECT_EQ(int64_t(body["usage"]["completion_tokens"]), 7);
  EXPECT_EQ(int64_t(body["usage"]["total_tokens"]), 18);
  EXPECT_EQ(int64_t(body["usage"]["prompt_tokens_details"]["cached_tokens"]), 4);
}

TEST(OpenAiSink, FinishReasons) {
  EXPECT_EQ(openai_finish_reason(Finish::kEnd, false), "stop");
  EXPECT_EQ(openai_finish_reason(Finish::kStop, false), "stop");
  EXPECT_EQ(openai_finish_reason(Finish::kEnd, true), "tool_calls");
  EXPECT_EQ(openai_finish_reason(Finish::kStop, true), "tool_calls");
  EXPECT_EQ(openai_finish_reason(Finish::kEnd, true, true), "function_call");
  // A reply cut by the budget says so even when it had begun a call.
  EXPECT_EQ(openai_finish_reason(Finish::kLength, true), "length");
  EXPECT_EQ(openai_finish_reason(Finish::kLength, false), "length");
}

TEST(OpenAiSink, ChatStreamOrder) {
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSink sink(w, kHeader, options(true, true, true));
  sink.begin();
  sink.on_event(event(K::kReasoning, "r"));
  sink.on_event(event(K::kContent, "c"));
  sink.on_event(event(K::kContent, ""));  // nothing to say: no chunk
  sink.on_event(event(K::kToolCallStart, "", 0, "call_a", "f"));
  sink.on_event(event(K::kToolCallArguments, "{}", 0));
  sink.on_event(event(K::kToolCallEnd, "", 0));
  sink.on_event(event(K::kEnd));
  sink.end(std::vector{result(Finish::kEnd, 3)});
  std::vector<std::string> kinds;
  simdjson::dom::parser p;
  for (const std::string& c : w->calls) {
    if (!c.starts_with("event {")) {
      kinds.push_back(c);
      continue;
    }
    auto chunk = parse(p, c.substr(6));
    if (chunk["choices"].get_array().size() == 0) {
      kinds.push_back(fmt::format("usage {}", int64_t(chunk["usage"]["completion_tokens"])));
      continue;
    }
    auto choice = chunk["choices"].at(0);
    auto d = choice["delta"];
    if (!choice["finish_reason"].is_null())
      kinds.push_back(std::string("finish ") +
                      std::string(std::string_view(choice["finish_reason"])));
    else if (d["role"].error() == simdjson::SUCCESS)
      kinds.push_back("role");
    else if (d["reasoning_content"].error() == simdjson::SUCCESS)
      kinds.push_back("reasoning " + std::string(std::string_view(d["reasoning_content"])));
    else if (d["content"].error() == simdjson::SUCCESS)
      kinds.push_back("content " + std::string(std::string_view(d["content"])));
    else if (d["tool_calls"].at(0)["id"].error() == simdjson::SUCCESS)
      kinds.push_back("call " +
                      std::string(std::string_view(d["tool_calls"].at(0)["function"]["name"])));
    else
      kinds.push_back("arguments " + std::string(std::string_view(
                                         d["tool_calls"].at(0)["function"]["arguments"])));
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"start", "role", "reasoning r", "content c", "call f",
                                             "arguments {}", "finish tool_calls", "usage 3",
                                             "event [DONE]", "finish"}));
}

TEST(OpenAiSink, CompletionStreamAndBody) {
  ResponseHeader h{"cmpl-1", 1, "m", ""};
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSink stream(w, h, options(false, true, false));
  stream.begin();
  stream.on_event(event(K::kContent, "ab"));
  stream.end(std::vector{result(Finish::kLength, 2)});
  ASSERT_EQ(w->calls.size(), 5u);
  EXPECT_EQ(w->calls[0], "start");
  EXPECT_NE(w->calls[1].find("\"text\":\"ab\""), std::string::npos) << w->calls[1];
  EXPECT_NE(w->calls[2].find("\"finish_reason\":\"length\""), std::string::npos) << w->calls[2];
  EXPECT_EQ(w->calls[3], "event [DONE]");
  EXPECT_EQ(w->calls[4], "finish");

  auto b = std::make_shared<RecordingWriter>();
  OpenAiSink body(b, h, options(false, false, false));
  body.begin();
  body.on_event(event(K::kContent, "ab"));
  body.end(std::vector{result(Finish::kEnd, 2)});
  ASSERT_EQ(b->calls.size(), 1u);
  EXPECT_NE(b->calls[0].find("\"object\":\"text_completion\""), std::string::npos);
  EXPECT_NE(b->calls[0].find("\"text\":\"ab\""), std::string::npos);
  EXPECT_NE(b->calls[0].find("\"finish_reason\":\"stop\""), std::string::npos);
}

TEST(OpenAiSink, FailuresBeforeAndDuringAStream) {
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSink queued(w, kHeader, options(true, true, false));
  queued.fail(JobFailure::kShuttingDown, "the server is shutting down");  // never began
  ASSERT_EQ(w->calls.size(), 1u);
  EXPECT_TRUE(w->calls[0].starts_with("send 503 application/json {\"error\":")) << w->calls[0];
  EXPECT_NE(w->calls[0].find("\"code\":\"shutting_down\""), std::string::npos);

  auto s = std::make_shared<RecordingWriter>();
  OpenAiSink running(s, kHeader, options(true, true, false));
  running.begin();
  running.fail(JobFailure::kEngineError, "bad record");
  ASSERT_EQ(s->calls.size(), 5u);  // start, role, the error event, [DONE], finish
  EXPECT_TRUE(s->calls[2].starts_with("event {\"error\":")) << s->calls[2];
  EXPECT_NE(s->calls[2].find("\"type\":\"server_error\""), std::string::npos);
  EXPECT_NE(s->calls[2].find("\"code\":\"engine_error\""), std::string::npos);
  EXPECT_EQ(s->calls[3], "event [DONE]");
  EXPECT_EQ(s->calls[4], "finish");
}

// A silent stream (a long prefill) is kept alive with an SSE comment, which every client skips;
// the connection writes it (tests/http_test.cpp), the sink says what it is.
TEST(OpenAiSink, StreamsAreKeptAliveWithAComment) {
  for (bool chat : {true, false}) {
    auto w = std::make_shared<RecordingWriter>();
    OpenAiSink sink(w, kHeader, options(chat, true, false));
    sink.begin();
    EXPECT_EQ(w->calls.at(0), "start");
    EXPECT_EQ(w->keepalive.event, "");  // a comment, not an event
    EXPECT_EQ(w->keepalive.data, "keepalive");
  }
}

TokenLogprobs report(int32_t id, float logprob) {
  return TokenLogprobs{id, logprob, {{id, logprob}}};
}

// Only the tokens whose text reaches the content are listed, with the delta that carries it:
// reasoning and tool-call tokens are dropped, special tokens too, held-back text waits.
TEST(OpenAiSink, ChatLogprobsFollowTheContent) {
  const Tokenizer& tok = test::k3_tokenizer();
  const int32_t end = (int32_t)tok.rank_count();  // the first special token
  ASSERT_TRUE(tok.is_special(end));
  std::vector<int32_t> hello = tok.encode_text("Hello world");
  ASSERT_GE(hello.size(), 2u);
  for (bool stream : {false, true}) {
    auto w = std::make_shared<RecordingWriter>();
    OpenAiSinkOptions o = options(true, stream, false);
    o.logprobs = &tok;
    OpenAiSink sink(w, kHeader, o);
    sink.begin();
    TokenLogprobs r = report(hello[0], -3.0f);
    sink.on_token(hello[0], &r);
    sink.on_event(event(K::kReasoning, "thinking"));
    TokenLogprobs sp = report(end, -0.1f);
    sink.on_token(end, &sp);
    TokenLogprobs a = report(hello[0], -0.5f), b = report(hello[1], -0.25f);
    sink.on_token(hello[0], &a);  // held back, then released with the next token
    sink.on_token(hello[1], &b);
    sink.on_event(event(K::kContent, "Hello world"));
    sink.on_token(hello[1], &r);
    sink.on_event(event(K::kToolCallStart, "", 0, "call_a", "f"));
    sink.on_event(event(K::kEnd));
    sink.end(std::vector{result(Finish::kEnd, 6)});
    simdjson::dom::parser p;
    std::string json;
    for (const std::string& c : w->calls) {
      if (!stream && c.starts_with("send 200")) json = c.substr(c.find('{'));
      if (stream && c.find("\"content\":\"Hello world\"") != std::string::npos) json = c.substr(6);
    }
    ASSERT_FALSE(json.empty()) << stream;
    auto lp = parse(p, json)["choices"].at(0)["logprobs"];
    auto content = lp["content"].get_array().value();
    ASSERT_EQ(content.size(), 2u) << json;
    EXPECT_EQ(std::string_view(content.at(0)["token"]), tok.token_bytes(hello[0]));
    EXPECT_EQ(double(content.at(0)["logprob"]), -0.5);
    EXPECT_EQ(double(content.at(1)["logprob"]), -0.25);
    EXPECT_EQ(content.at(1)["top_logprobs"].get_array().size(), 1u);
    EXPECT_TRUE(lp["refusal"].is_null());
  }
}

// n replies: one choice each, in order; the prompt counts once in usage, every reply's tokens do.
TEST(OpenAiSink, SeveralChoices) {
  for (bool stream : {false, true}) {
    auto w = std::make_shared<RecordingWriter>();
    OpenAiSink sink(w, kHeader, options(true, stream, true));
    sink.begin();
    sink.on_event(event(K::kContent, "a"));
    sink.begin_choice(1);
    sink.on_event(event(K::kContent, "b"));
    sink.end(std::vector{result(Finish::kEnd, 2), result(Finish::kLength, 3)});
    simdjson::dom::parser p;
    std::vector<std::string> seen;
    for (const std::string& c : w->calls) {
      size_t at = c.find('{');
      if (at == std::string::npos) continue;
      auto j = parse(p, c.substr(at));
      if (!stream || j["choices"].get_array().size() == 0)
        seen.push_back(fmt::format("usage {} {}", int64_t(j["usage"]["prompt_tokens"]),
                                   int64_t(j["usage"]["completion_tokens"])));
      for (auto ch : j["choices"].get_array()) {
        std::string what = fmt::format("{}", int64_t(ch["index"]));
        auto text = stream ? ch["delta"]["content"] : ch["message"]["content"];
        if (text.error() == simdjson::SUCCESS) what += fmt::format(" {}", std::string_view(text));
        if (!ch["finish_reason"].is_null())
          what += fmt::format(" {}", std::string_view(ch["finish_reason"]));
        seen.push_back(what);
      }
    }
    if (stream) {
      EXPECT_EQ(seen, (std::vector<std::string>{"0 ", "0 a", "1 ", "1 b", "0 stop", "1 length",
                                                "usage 11 5"}));
    } else {
      EXPECT_EQ(seen, (std::vector<std::string>{"usage 11 5", "0 a stop", "1 b length"}));
    }
  }
}

// echo: every choice's text starts with the prompt; with logprobs the prompt's tokens come first,
// the first without a probability, and the offsets run over the whole text.
TEST(OpenAiSink, CompletionEchoWithLogprobs) {
  const Tokenizer& tok = test::k3_tokenizer();
  std::vector<int32_t> prompt = tok.encode_text("Hi there");
  ASSERT_EQ(prompt.size(), 2u);
  std::vector<int32_t> bang = tok.encode_text("!");
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSinkOptions o = options(false, false, false);
  o.logprobs = &tok;
  o.echo = tok.decode(prompt);
  OpenAiSink sink(w, {"cmpl-1", 1, "m", ""}, o);
  sink.begin();
  sink.on_prompt_token(prompt[0], nullptr);
  TokenLogprobs second = report(prompt[1], -2.0f), reply = report(bang[0], -1.0f);
  sink.on_prompt_token(prompt[1], &second);
  sink.on_token(bang[0], &reply);
  sink.on_event(event(K::kContent, "!"));
  sink.begin_choice(1);  // the second reply wrote nothing
  sink.end(std::vector{result(Finish::kEnd, 1), result(Finish::kLength, 0)});
  ASSERT_EQ(w->calls.size(), 1u);
  simdjson::dom::parser p;
  auto choices = parse(p, w->calls[0].substr(w->calls[0].find('{')))["choices"];
  EXPECT_EQ(std::string_view(choices.at(0)["text"]), "Hi there!");
  EXPECT_EQ(std::string_view(choices.at(1)["text"]), "Hi there");
  auto lp = choices.at(0)["logprobs"];
  EXPECT_EQ(simdjson::minify(lp["token_logprobs"]), "[null,-2,-1]");
  EXPECT_EQ(simdjson::minify(lp["text_offset"]), "[0,2,8]");
  EXPECT_TRUE(lp["top_logprobs"].at(0).is_null());
  EXPECT_EQ(simdjson::minify(choices.at(1)["logprobs"]["token_logprobs"]), "[null,-2]");
}

TEST(OpenAiSink, CancelledOnceTheClientIsGone) {
  auto w = std::make_shared<RecordingWriter>();
  OpenAiSink sink(w, kHeader, options(true, false, false));
  EXPECT_FALSE(sink.cancelled());
  w->gone = true;
  EXPECT_TRUE(sink.cancelled());
}

}  // namespace
}  // namespace waste
