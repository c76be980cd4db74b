// Structured outputs end to end: the daemon on random-weight synthetic models, with
// response_format and forced tool calls. Whatever finishes must parse and validate (checked by
// Python's jsonschema); what max_tokens cuts is reported as length.
#include <gtest/gtest.h>

#include <simdjson.h>

#include <list>

#include <fmt/format.h>

#include "engine/synth/synth.h"
#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/specials_file.h"
#include "protocol/json/json_writer.h"
#include "tests/http_client.h"
#include "tests/schema_corpus.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using test::Daemon;
using test::http_request;
using test::HttpResponse;

class StructuredOutputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 9});
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 9});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string model(const char* name) { return (dir_->path() / name).string(); }

  static std::unique_ptr<Daemon> start(const std::string& path) {
    return test::start_daemon({path});
  }

  // logit_bias favouring the tokens that close strings, arrays, objects and channels, so that
  // random weights finish most outputs within the budget.
  static std::string closing_bias(const char* name) {
    auto specials = read_specials_file(dir_->path() / name / "specials.json");
    Tokenizer tok(dir_->path() / name / "tokenizer.model", specials);
    std::string out = "{";
    auto add = [&](int id, int bias) {
      if (out.size() > 1) out += ',';
      out += fmt::format("\"{}\":{}", id, bias);
    };
    for (const char* text : {"\"", "}", "]", ",", "\",", "\"}"})
      for (int id : tok.encode_text(text)) add(id, 6);
    for (const char* s : {"<|close|>", "<|im_end|>", "<|end_of_msg|>"})
      if (auto id = tok.find_special(s)) add(*id, 8);
    return out + "}";
  }

  simdjson::dom::element parse(const std::string& s) {
    docs_.emplace_back(s);
    return parsers_.emplace_back().parse(docs_.back()).value();
  }

  static void expect_valid(const std::vector<std::pair<std::string, std::string>>& cases) {
    std::string out;
    EXPECT_EQ(test::validate_json(cases, &out), 0) << out;
  }

  static test::TempDir* dir_;
  std::list<simdjson::padded_string> docs_;
  std::list<simdjson::dom::parser> parsers_;
};
test::TempDir* StructuredOutputTest::dir_ = nullptr;

const std::vector<std::string>& schemas() {
  static const std::vector<std::string> s = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":120}},"required":["name","age"],"additionalProperties":false})",
      R"({"type":"array","items":{"enum":["a","b",1,null]},"minItems":1,"maxItems":3})",
      R"({"type":"object","properties":{"d":{"type":"string","format":"date"},"ok":{"type":"boolean"}},"required":["d","ok"],"additionalProperties":false})",
      R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/t"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/t"})",
      R"({"type":"string","pattern":"^[a-c]{2,5}$"})",
  };
  return s;
}

TEST_F(StructuredOutputTest, ResponseFormatGivesValidJsonOnBothFamilies) {
  std::vector<std::pair<std::string, std::string>> finished;
  int lengths = 0;
  // K3 also with thinking on: the schema then applies after the think channel closes.
  for (const char* name : {"kl.waste", "k3.waste", "k3-thinking"}) {
    const size_t finished_before = finished.size();
    const std::string config = name;
    bool thinking = std::string(name) == "k3-thinking";
    if (thinking) name = "k3.waste";
    auto d = start(model(name));
    std::string bias = closing_bias(name);
    for (size_t s = 0; s < schemas().size(); ++s) {
      for (int seed = 0; seed < 3; ++seed) {
        std::string body =
            R"({"messages":[{"role":"user","content":"answer in JSON"}],"max_tokens":160,"temperature":1,"seed":)" +
            std::to_string(seed) + R"(,"thinking":{"type":")" +
            (thinking ? "enabled" : "disabled") + R"("},"logit_bias":)" + bias +
            R"(,"response_format":{"type":"json_schema","json_schema":{"name":"t","strict":true,"schema":)" +
            schemas()[s] + "}}}";
        HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
        ASSERT_EQ(r.status, 200) << r.body;
        auto choice = parse(r.body)["choices"].at(0);
        std::string_view reason = choice["finish_reason"].get_string().value();
        std::string content(choice["message"]["content"].get_string().value());
        if (reason == "stop")
          finished.push_back({schemas()[s], content});
        else
          EXPECT_EQ(reason, "length"), ++lengths;
      }
    }
    EXPECT_GT(finished.size(), finished_before) << config << ": no output finished";
  }
  std::printf("%zu outputs finished, %d cut by max_tokens\n", finished.size(), lengths);
  EXPECT_GE(finished.size(), schemas().size()) << lengths << " cut by max_tokens";
  expect_valid(finished);
}

// The whole corpus (31 API-style + 80 generated schemas) through the random-weight K3 model.
TEST_F(StructuredOutputTest, SchemaCorpusThroughTheModelValidates) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "112 generations take minutes under ASan; the release build runs this, and the "
                  "other tests here take the same code paths under the sanitizers";
#endif
  std::vector<std::string> corpus = test::api_schemas();
  for (const std::string& s : test::generated_schemas()) corpus.push_back(s);
  auto d = start(model("k3.waste"));
  const std::string bias = closing_bias("k3.waste");
  std::vector<std::pair<std::string, std::string>> finished;
  for (size_t s = 0; s < corpus.size(); ++s) {
    std::string body =
        R"({"messages":[{"role":"user","content":"JSON please"}],"max_tokens":100,"temperature":1,"seed":)" +
        std::to_string(s) + R"(,"thinking":{"type":"disabled"},"logit_bias":)" + bias +
        R"(,"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":)" +
        corpus[s] + "}}}";
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body << "\n" << corpus[s];
    auto choice = parse(r.body)["choices"].at(0);
    std::string_view reason = choice["finish_reason"].get_string().value();
    if (reason == "stop")
      finished.push_back(
          {corpus[s], std::string(choice["message"]["content"].get_string().value())});
    else
      EXPECT_EQ(reason, "length");
  }
  std::printf("%zu of %zu schemas finished within 100 tokens\n", finished.size(), corpus.size());
  EXPECT_GE(finished.size() * 2, corpus.size());
  expect_valid(finished);
}

TEST_F(StructuredOutputTest, JsonObjectAndCutOutputsAreReportedHonestly) {
  auto d = start(model("kl.waste"));
  std::string body =
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"seed":1,"response_format":{"type":"json_object"}})";
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  auto choice = parse(r.body)["choices"].at(0);
  EXPECT_EQ(std::string_view(choice["finish_reason"].get_string().value()), "length");
  std::string content(choice["message"]["content"].get_string().value());
  ASSERT_FALSE(content.empty());
  EXPECT_EQ(content[0], '{');  // an object was begun, and no text before it
}

TEST_F(StructuredOutputTest, UnsupportedSchemasAre400NamingTheKeyword) {
  auto d = start(model("kl.waste"));
  struct Case {
    const char* schema;
    const char* says;
  };
  for (const Case& c :
       {Case{R"({"type":"object","patternProperties":{"a":{}}})", "patternProperties"},
        Case{R"({"type":"string","format":"hostname"})", "hostname"},
        Case{R"({"not":{}})", "\"not\""}, Case{R"({"$ref":"#/nowhere"})", "does not resolve"}}) {
    std::string body =
        R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":)" +
        std::string(c.schema) + "}}}";
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    auto err = parse(r.body)["error"];
    EXPECT_NE(std::string(err["message"].get_string().value()).find(c.says), std::string::npos)
        << r.body;
    EXPECT_EQ(std::string_view(err["param"].get_string().value()), "response_format");
  }
}

TEST_F(StructuredOutputTest, ForcedToolCallsHaveArgumentsThatMatchTheSchema) {
  auto d = start(model("k3.waste"));
  const std::string params =
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7},"units":{"enum":["c","f"]}},"required":["city","days"],"additionalProperties":false})";
  const std::string tools =
      R"([{"type":"function","function":{"name":"weather","parameters":)" + params +
      R"(}},{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}])";
  std::string bias = closing_bias("k3.waste");
  std::vector<std::pair<std::string, std::string>> args;
  int weather_calls = 0;
  for (const char* choice :
       {R"({"type":"function","function":{"name":"weather"}})", R"("required")"}) {
    for (int seed = 0; seed < 4; ++seed) {
      std::string body =
          R"({"messages":[{"role":"user","content":"weather?"}],"max_tokens":150,"temperature":1,"seed":)" +
          std::to_string(seed) + R"(,"thinking":{"type":"disabled"},"logit_bias":)" + bias +
          R"(,"tools":)" + tools + R"(,"tool_choice":)" + choice + "}";
      HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      auto c = parse(r.body)["choices"].at(0);
      std::string_view reason = c["finish_reason"].get_string().value();
      if (reason == "length") continue;
      ASSERT_EQ(reason, "tool_calls") << r.body;
      auto call = c["message"]["tool_calls"].at(0)["function"];
      std::string name(call["name"].get_string().value());
      std::string arguments(call["arguments"].get_string().value());
      if (choice[0] == '{') {
        EXPECT_EQ(name, "weather");
      }
      weather_calls += name == "weather";
      args.push_back(
          {name == "weather" ? params : R"({"type":"object","additionalProperties":false})",
           arguments});
    }
  }
  std::printf("%zu tool calls finished\n", args.size());
  EXPECT_GE(args.size(), 2u);
  EXPECT_GE(weather_calls, 1) << "no call with arguments to check against the schema";
  expect_valid(args);
}

// "required" is one or more calls and nothing else: no text in the response channel, every
// call to a declared tool, arguments valid against that tool's schema. With thinking on, the
// reply thinks first; the calls still follow with no text between.
TEST_F(StructuredOutputTest, RequiredToolChoiceGivesCallsAndNoText) {
  auto d = start(model("k3.waste"));
  const std::string params =
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":6},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"],"additionalProperties":false})";
  const std::string tools =
      R"([{"type":"function","function":{"name":"weather","parameters":)" + params +
      R"(}},{"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{},"additionalProperties":false}}}])";
  const std::string bias = closing_bias("k3.waste");
  std::vector<std::pair<std::string, std::string>> args;
  int calls = 0, replies = 0;
  for (const char* thinking : {"disabled", "enabled"}) {
    for (int seed = 0; seed < (thinking[0] == 'd' ? 20 : 5); ++seed) {
      std::string body =
          R"({"messages":[{"role":"user","content":"weather?"}],"max_tokens":300,"temperature":1,"seed":)" +
          std::to_string(seed) + R"(,"thinking":{"type":")" + thinking + R"("},"logit_bias":)" +
          bias + R"(,"tools":)" + tools + R"(,"tool_choice":"required"})";
      HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
      ASSERT_EQ(r.status, 200) << r.body;
      auto c = parse(r.body)["choices"].at(0);
      std::string_view reason = c["finish_reason"].get_string().value();
      auto content = c["message"]["content"];
      EXPECT_TRUE(content.is_null() || content.get_string().value().empty()) << r.body;
      if (thinking[0] == 'e' && reason == "length") continue;  // random weights may think on
      ++replies;
      ASSERT_EQ(reason, "tool_calls") << r.body;
      simdjson::dom::array list = c["message"]["tool_calls"].get_array().value();
      for (auto call : list) {
        std::string name(call["function"]["name"].get_string().value());
        ASSERT_TRUE(name == "weather" || name == "noop") << r.body;
        args.push_back(
            {name == "weather" ? params : R"({"type":"object","additionalProperties":false})",
             std::string(call["function"]["arguments"].get_string().value())});
        ++calls;
      }
    }
  }
  EXPECT_GE(replies, 20) << "all 20 without thinking, and any with thinking that stopped";
  EXPECT_GE(calls, replies);
  expect_valid(args);
}

// A legacy `functions` request is answered in the legacy shape: `function_call` on the message
// (and in stream deltas) and finish_reason "function_call".
TEST_F(StructuredOutputTest, LegacyFunctionsAreAnsweredWithFunctionCall) {
  auto d = start(model("k3.waste"));
  const std::string body =
      R"({"messages":[{"role":"user","content":"weather?"}],"max_tokens":150,"temperature":1,"seed":2,"thinking":{"type":"disabled"},"logit_bias":)" +
      closing_bias("k3.waste") +
      R"(,"functions":[{"name":"weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":5}},"required":["city"],"additionalProperties":false}}],"function_call":{"name":"weather"})";
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  auto c = parse(r.body)["choices"].at(0);
  ASSERT_EQ(std::string_view(c["finish_reason"].get_string().value()), "function_call") << r.body;
  auto call = c["message"]["function_call"];
  EXPECT_EQ(std::string_view(call["name"].get_string().value()), "weather");
  expect_valid(
      {{R"({"type":"object","properties":{"city":{"type":"string","maxLength":5}},"required":["city"],"additionalProperties":false})",
        std::string(call["arguments"].get_string().value())}});
  EXPECT_TRUE(c["message"]["tool_calls"].error() == simdjson::NO_SUCH_FIELD) << r.body;

  HttpResponse s =
      http_request(d->port(), "POST", "/v1/chat/completions", body + R"(,"stream":true})");
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.body.find(R"("function_call":{"name":"weather")"), std::string::npos) << s.body;
  EXPECT_NE(s.body.find(R"("finish_reason":"function_call")"), std::string::npos) << s.body;
  EXPECT_EQ(s.body.find("tool_calls"), std::string::npos) << s.body;
}

TEST_F(StructuredOutputTest, BadToolSchemasAre400) {
  auto d = start(model("k3.waste"));
  std::string body =
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"not":{}}}}}}],"tool_choice":"required"})";
  HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  std::string msg(parse(r.body)["error"]["message"].get_string().value());
  EXPECT_NE(msg.find("tools[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"not\""), std::string::npos) << msg;
  // A name goes verbatim into the call markup: one that could change it is refused.
  body =
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f\"<|close|>","parameters":{"type":"object"}}}],"tool_choice":"required"})";
  r = http_request(d->port(), "POST", "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  msg = std::string(parse(r.body)["error"]["message"].get_string().value());
  EXPECT_NE(msg.find("tools[0].function.name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a valid function name"), std::string::npos) << msg;
}

}  // namespace
}  // namespace waste
