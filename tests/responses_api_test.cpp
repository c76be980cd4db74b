// The Responses API at the edge: the request parser's translation into the one Conversation
// (instructions, input items, function calls joined into one assistant turn, reasoning items,
// flat tools shown nested, text.format), every bad field named, and the sink's event order
// with increasing sequence numbers.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <simdjson.h>

#include "protocol/api_error.h"
#include "protocol/openai/responses_request.h"
#include "server/api/responses_sink.h"
#include "tests/recording_writer.h"

namespace waste {
namespace {

ResponsesRequest parse(const std::string& body) {
  return parse_responses_request(body, {100, 0, 8});
}

// Ends `sink` as a reply that stopped for `finish`.
void end_with(ResponsesSink& sink, Finish finish) {
  DecodeResult r;
  r.finish = finish;
  sink.end(std::vector{r});
}

// The last thing the sink wrote as JSON: the response body, or the stream's closing event.
std::string last_json(const test::RecordingWriter& w, bool stream) {
  return stream ? w.named.back().second : w.calls.back().substr(w.calls.back().find('{'));
}

std::string refusal(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "accepted";
}

TEST(ResponsesRequest, TranslatesItems) {
  ResponsesRequest r = parse(R"({"model":"m","instructions":"be brief","input":[
      {"role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"data:image/png;base64,AAAA"}]},
      {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"think"}]},
      {"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},
      {"type":"function_call","call_id":"c2","name":"g","arguments":"{}"},
      {"type":"function_call_output","call_id":"c1","output":"42"},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}],
    "tools":[{"type":"function","name":"f","description":"d","parameters":{"type":"object"}}],
    "tool_choice":{"type":"function","name":"f"},"parallel_tool_calls":false,
    "text":{"format":{"type":"json_schema","name":"x","schema":{"type":"object"}}},
    "reasoning":{"effort":"medium"},"max_output_tokens":7,"temperature":0.3,"stream":true,"store":true})");
  const auto& m = r.conversation.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, Role::kSystem);
  EXPECT_EQ(r.instructions, "be brief");
  EXPECT_EQ(std::get<std::vector<ContentPart>>(m[1].content)[1].kind, ContentPart::Kind::kImage);
  EXPECT_EQ(m[2].role, Role::kAssistant);  // both calls in one turn, with the reasoning before
  EXPECT_EQ(m[2].reasoning_content, "think");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0].id, "c1");
  EXPECT_EQ(m[2].tool_calls[0].arguments, "{\"a\":1}");
  EXPECT_EQ(m[3].role, Role::kTool);
  EXPECT_EQ(m[3].tool_call_id, "c1");
  EXPECT_EQ(std::get<std::vector<ContentPart>>(m[4].content)[0].text, "done");
  ASSERT_EQ(r.conversation.tools.size(), 1u);
  EXPECT_EQ(
      r.conversation.tools[0].declaration,
      R"({"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}})");
  EXPECT_EQ(r.conversation.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_FALSE(r.conversation.tool_choice.parallel);
  EXPECT_EQ(r.conversation.response_format.kind, ResponseFormat::Kind::kJsonSchema);
  EXPECT_EQ(r.conversation.response_format.schema, R"({"type":"object"})");
  EXPECT_EQ(r.conversation.thinking_effort, "high");
  EXPECT_EQ(r.params.max_tokens, 7);
  EXPECT_TRUE(r.params.stream);
  EXPECT_EQ(std::get<std::string>(parse(R"({"input":"hi"})").conversation.messages[0].content),
            "hi");
}

// What Codex sends: namespaced function tools are offered under their own names, hosted tools
// (run by a provider, not by a model here) are left out.
TEST(ResponsesRequest, NamespacesAreFlattenedAndHostedToolsLeftOut) {
  ResponsesRequest r = parse(R"({"input":"x","tools":[
      {"type":"function","name":"exec_command","parameters":{"type":"object"}},
      {"type":"namespace","name":"multi_agent_v1","description":"d","tools":[
        {"type":"function","name":"close_agent","parameters":{"type":"object"}}]},
      {"type":"web_search","external_web_access":false}]})");
  ASSERT_EQ(r.conversation.tools.size(), 2u);
  EXPECT_EQ(r.conversation.tools[0].name, "exec_command");
  EXPECT_EQ(r.conversation.tools[1].name, "close_agent");
}

TEST(ResponsesRequest, EveryBadFieldIsNamed) {
  EXPECT_EQ(refusal(R"({"model":"m"})"), "input");
  EXPECT_EQ(refusal(R"({"input":[]})"), "input");
  EXPECT_EQ(refusal(R"({"input":[{"type":"item_reference","id":"x"}]})"), "input[0].type");
  EXPECT_EQ(refusal(R"({"input":[{"role":"tool","content":"x"}]})"), "input[0].role");
  EXPECT_EQ(refusal(R"({"input":[{"role":"user","content":[{"type":"input_file"}]}]})"),
            "input[0].content[0].type");
  EXPECT_EQ(refusal(R"({"input":[{"type":"function_call","name":"f","arguments":"{}"}]})"),
            "input[0].call_id");
  EXPECT_EQ(refusal(R"({"input":"x","tools":[{"type":"custom","name":"apply_patch"}]})"),
            "tools[0].type");
  EXPECT_EQ(
      refusal(
          R"({"input":"x","tools":[{"type":"namespace","name":"n","tools":[{"type":"web_search"}]}]})"),
      "tools[0].tools[0].type");
  EXPECT_EQ(refusal(R"({"input":"x","tool_choice":"any"})"), "tool_choice");
  EXPECT_EQ(refusal(R"({"input":"x","text":{"format":{"type":"yaml"}}})"), "text.format.type");
  EXPECT_EQ(refusal(R"({"input":"x","max_output_tokens":0})"), "max_output_tokens");
  EXPECT_EQ(refusal(R"({"input":"x","previous_response_id":"resp_1"})"), "previous_response_id");
  EXPECT_EQ(refusal(R"({"input":"x","reasoning":{"effort":"huge"}})"), "reasoning.effort");
}

// One field the response object repeats: what a request sends, what comes back for it, and
// what comes back when the request leaves it out (OpenAI's default).
struct EchoCase {
  const char* field;
  const char* sent;  // the field's JSON in the request
  const char* echoed;
  const char* absent;
};

// The response object's `field` (compact JSON) for a request with `extra` fields.
std::string echoed(const std::string& extra, const char* field) {
  ResponsesRequest req = parse(R"({"input":"x")" + extra + "}");
  ResponseObject r;
  r.instructions = req.instructions;
  r.echo = req.echo;
  const std::string body = response_json(r);
  simdjson::dom::parser p;
  simdjson::dom::element e = p.parse(body).value();
  simdjson::dom::element v;
  if (e[field].get(v) != simdjson::SUCCESS) return "(missing)";
  return simdjson::minify(v);
}

class ResponsesEcho : public ::testing::TestWithParam<EchoCase> {};

TEST_P(ResponsesEcho, RepeatsWhatWasSent) {
  const EchoCase& c = GetParam();
  EXPECT_EQ(echoed(fmt::format(R"(,"{}":{})", c.field, c.sent), c.field), c.echoed);
}

TEST_P(ResponsesEcho, AnswersOpenAIsDefaultWhenNothingWasSent) {
  const EchoCase& c = GetParam();
  EXPECT_EQ(echoed("", c.field), c.absent);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, ResponsesEcho,
    ::testing::Values(
        EchoCase{
            "tools",
            R"([{"type":"function","name":"f","strict":true,"parameters":{"type":"object"}},{"type":"web_search"}])",
            R"([{"type":"function","name":"f","strict":true,"parameters":{"type":"object"}},{"type":"web_search"}])",
            "[]"},
        EchoCase{"tool_choice", R"({"type":"function","name":"f"})",
                 R"({"type":"function","name":"f"})", R"("auto")"},
        EchoCase{"parallel_tool_calls", "false", "false", "true"},
        EchoCase{"metadata", R"({"run":"7","who":"ci"})", R"({"run":"7","who":"ci"})", "{}"},
        EchoCase{"temperature", "0.25", "0.25", "1"}, EchoCase{"top_p", "0.5", "0.5", "1"},
        EchoCase{"max_output_tokens", "64", "64", "null"}, EchoCase{"top_logprobs", "3", "3", "0"},
        EchoCase{"instructions", R"("be brief")", R"("be brief")", "null"},
        EchoCase{"text", R"({"format":{"type":"json_object"},"verbosity":"low"})",
                 R"({"format":{"type":"json_object"},"verbosity":"low"})",
                 R"({"format":{"type":"text"}})"},
        EchoCase{"reasoning", R"({"effort":"low","summary":"concise"})",
                 R"({"effort":"low","summary":"concise"})", R"({"effort":null,"summary":null})"},
        EchoCase{"truncation", R"("auto")", R"("auto")", R"("disabled")"},
        EchoCase{"store", "true", "true", "false"},
        EchoCase{"user", R"("u-1")", R"("u-1")", "null"},
        EchoCase{"prompt_cache_key", R"("k")", R"("k")", "null"},
        EchoCase{"safety_identifier", R"("s")", R"("s")", "null"}),
    [](const ::testing::TestParamInfo<EchoCase>& field) { return std::string(field.param.field); });

TEST(ResponsesEchoFields, EveryBadEchoedFieldIsNamed) {
  EXPECT_EQ(refusal(R"({"input":"x","metadata":{"a":1}})"), "metadata.a");
  EXPECT_EQ(refusal(R"({"input":"x","metadata":[]})"), "metadata");
  EXPECT_EQ(refusal(R"({"input":"x","metadata":{"a":")" + std::string(513, 'v') + "\"}}"),
            "metadata.a");
  std::string many = R"({"input":"x","metadata":{)";
  for (int i = 0; i < 17; i++) many += fmt::format(R"({}"k{}":"v")", i ? "," : "", i);
  EXPECT_EQ(refusal(many + "}}"), "metadata");
  EXPECT_EQ(refusal(R"({"input":"x","truncation":"sometimes"})"), "truncation");
  EXPECT_EQ(refusal(R"({"input":"x","reasoning":{"summary":"long"}})"), "reasoning.summary");
  EXPECT_EQ(refusal(R"({"input":"x","reasoning":"low"})"), "reasoning");
  EXPECT_EQ(refusal(R"({"input":"x","top_logprobs":21})"), "top_logprobs");
  EXPECT_EQ(refusal(R"({"input":"x","user":7})"), "user");
  EXPECT_EQ(refusal(R"({"input":"x","store":"yes"})"), "store");
  EXPECT_EQ(refusal(R"({"input":"x","parallel_tool_calls":1})"), "parallel_tool_calls");
  // A partial text is filled in with the format in force.
  EXPECT_EQ(echoed(R"(,"text":{"verbosity":"high"})", "text"),
            R"({"format":{"type":"text"},"verbosity":"high"})");
  EXPECT_EQ(echoed("", "previous_response_id"), "null");
}

using test::reply_event;

TEST(ResponsesSink, StreamOrderAndIncomplete) {
  auto w = std::make_shared<test::RecordingWriter>();
  ResponseObject head;
  head.id = "resp_abc";
  ResponsesSink sink(w, head, true);
  using K = ReplyEvent::Kind;
  sink.begin();
  sink.on_event(reply_event(K::kReasoning, "r"));
  sink.on_event(reply_event(K::kContent, "c"));
  sink.on_event(reply_event(K::kToolCallStart));
  sink.on_event(reply_event(K::kToolCallArguments, "{}"));
  sink.on_event(reply_event(K::kToolCallEnd));
  sink.on_event(reply_event(K::kEnd));
  end_with(sink, Finish::kLength);
  EXPECT_EQ(w->names(), (std::vector<std::string>{
                            "response.created",
                            "response.in_progress",
                            "response.output_item.added",
                            "response.reasoning_summary_part.added",
                            "response.reasoning_summary_text.delta",
                            "response.reasoning_summary_text.done",
                            "response.reasoning_summary_part.done",
                            "response.output_item.done",
                            "response.output_item.added",
                            "response.content_part.added",
                            "response.output_text.delta",
                            "response.output_text.done",
                            "response.content_part.done",
                            "response.output_item.done",
                            "response.output_item.added",
                            "response.function_call_arguments.delta",
                            "response.function_call_arguments.done",
                            "response.output_item.done",
                            "response.incomplete",
                        }));
  EXPECT_EQ(w->calls.back(), "finish");
  // Each event's data names its type and counts up from 0.
  for (size_t i = 0; i < w->named.size(); i++) {
    simdjson::dom::parser p;
    simdjson::dom::element e = p.parse(w->named[i].second).value();
    EXPECT_EQ(std::string_view(e["type"]), w->named[i].first);
    EXPECT_EQ(int64_t(e["sequence_number"]), (int64_t)i);
  }
}

// The item a cut reply was writing is "incomplete", in the response object and in its stream's
// done event; the items before it, and every item of a reply that ended by itself, "completed".
TEST(ResponsesSink, TheItemACutLeftIsIncomplete) {
  using K = ReplyEvent::Kind;
  for (bool stream : {false, true})
    for (Finish finish : {Finish::kLength, Finish::kEnd, Finish::kStop}) {
      SCOPED_TRACE(std::string(stream ? "stream, " : "body, ") + finish_name(finish));
      auto w = std::make_shared<test::RecordingWriter>();
      ResponseObject head;
      head.id = "resp_abc";
      ResponsesSink sink(w, head, stream);
      sink.begin();
      sink.on_event(reply_event(K::kReasoning, "r"));
      sink.on_event(reply_event(K::kContent, "partial"));
      sink.on_event(reply_event(K::kEnd));
      end_with(sink, finish);
      const std::string body = last_json(*w, stream);
      simdjson::dom::parser p;
      simdjson::dom::element e = p.parse(body).value();
      simdjson::dom::element resp = stream ? e["response"].value() : e;
      const char* last = finish == Finish::kLength ? "incomplete" : "completed";
      EXPECT_EQ(std::string_view(resp["status"]), last);
      EXPECT_EQ(std::string_view(resp["output"].at(0)["status"]), "completed");
      EXPECT_EQ(std::string_view(resp["output"].at(1)["type"]), "message");
      EXPECT_EQ(std::string_view(resp["output"].at(1)["status"]), last);
      EXPECT_EQ(std::string_view(resp["output"].at(1)["content"].at(0)["text"]), "partial");
      if (!stream) continue;
      std::vector<std::string> done;  // each response.output_item.done event's item status
      for (const auto& [name, data] : w->named)
        if (name == "response.output_item.done") {
          simdjson::dom::parser q;
          done.emplace_back(std::string_view(q.parse(data).value()["item"]["status"]));
        }
      EXPECT_EQ(done, (std::vector<std::string>{"completed", last}));
    }
}

// A call cut in its arguments: its item is incomplete, with the arguments so far; a call the
// model closed before another began is completed.
TEST(ResponsesSink, ACutCallIsIncompleteWithItsArguments) {
  using K = ReplyEvent::Kind;
  auto w = std::make_shared<test::RecordingWriter>();
  ResponseObject head;
  head.id = "resp_abc";
  ResponsesSink sink(w, head, false);
  sink.on_event(reply_event(K::kToolCallStart));
  sink.on_event(reply_event(K::kToolCallArguments, "{}"));
  sink.on_event(reply_event(K::kToolCallEnd));
  sink.on_event(reply_event(K::kToolCallStart));
  sink.on_event(reply_event(K::kToolCallArguments, R"({"city": "Par"})"));
  ReplyEvent closed_by_finish = reply_event(K::kToolCallEnd);
  closed_by_finish.cut = true;
  sink.on_event(closed_by_finish);
  sink.on_event(reply_event(K::kEnd));
  end_with(sink, Finish::kLength);
  simdjson::dom::parser p;
  simdjson::dom::element e = p.parse(last_json(*w, false)).value();
  EXPECT_EQ(std::string_view(e["output"].at(0)["status"]), "completed");
  EXPECT_EQ(std::string_view(e["output"].at(1)["status"]), "incomplete");
  EXPECT_EQ(std::string_view(e["output"].at(1)["arguments"]), R"({"city": "Par"})");
}

// A call the model closed before the budget ran out (its end arrived, the section end did not)
// is completed; only the reply is incomplete.
TEST(ResponsesSink, ACallTheModelClosedBeforeTheCutIsCompleted) {
  using K = ReplyEvent::Kind;
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "stream" : "body");
    auto w = std::make_shared<test::RecordingWriter>();
    ResponseObject head;
    head.id = "resp_abc";
    ResponsesSink sink(w, head, stream);
    sink.begin();
    sink.on_event(reply_event(K::kToolCallStart));
    sink.on_event(reply_event(K::kToolCallArguments, R"({"city": "Paris"})"));
    sink.on_event(reply_event(K::kToolCallEnd));
    sink.on_event(reply_event(K::kEnd));
    end_with(sink, Finish::kLength);
    const std::string body = last_json(*w, stream);
    simdjson::dom::parser p;
    simdjson::dom::element e = p.parse(body).value();
    simdjson::dom::element resp = stream ? e["response"].value() : e;
    EXPECT_EQ(std::string_view(resp["status"]), "incomplete");
    EXPECT_EQ(std::string_view(resp["output"].at(0)["status"]), "completed");
  }
}

// A silent stream (a long prefill) is kept alive with an SSE comment: a typed event would take a
// sequence_number. The connection writes it (tests/http_test.cpp); the sink says what it is.
TEST(ResponsesSink, StreamsAreKeptAliveWithAComment) {
  auto w = std::make_shared<test::RecordingWriter>();
  ResponsesSink sink(w, ResponseObject{}, true);
  sink.begin();
  EXPECT_EQ(w->calls.at(0), "start");
  EXPECT_EQ(w->keepalive.event, "");  // a comment, not an event
  EXPECT_EQ(w->keepalive.data, "keepalive");
}

// A job that never began is an error body with the failure's status and code; one cut during its
// stream ends it with an error event and response.failed.
TEST(ResponsesSink, FailuresBeforeAndDuringAStream) {
  auto w = std::make_shared<test::RecordingWriter>();
  ResponsesSink queued(w, ResponseObject{}, true);
  queued.fail(JobFailure::kShuttingDown, "the server is shutting down");
  ASSERT_EQ(w->calls.size(), 1u);
  EXPECT_TRUE(w->calls[0].starts_with("send 503 application/json ")) << w->calls[0];
  EXPECT_NE(w->calls[0].find(R"("code":"shutting_down")"), std::string::npos) << w->calls[0];

  auto s = std::make_shared<test::RecordingWriter>();
  ResponsesSink running(s, ResponseObject{}, true);
  running.begin();
  running.fail(JobFailure::kEngineError, "bad record");
  const std::vector<std::string> names = s->names();
  ASSERT_GE(names.size(), 2u);
  EXPECT_EQ(names[names.size() - 2], "error");
  EXPECT_NE(s->named[names.size() - 2].second.find(R"("code":"engine_error")"), std::string::npos);
  EXPECT_EQ(names.back(), "response.failed");
  EXPECT_EQ(s->calls.back(), "finish");
}

}  // namespace
}  // namespace waste
