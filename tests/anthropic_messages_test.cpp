// Anthropic's Messages API at the edge: the request parser's translation into the one
// Conversation (system, tool results before the rest of a user turn, thinking and tool_use
// blocks, tools as OpenAI-shaped declarations, tool_choice), every bad field named in the
// refusal, the response writer's exact JSON, and the sink's event order (ping included).
#include <gtest/gtest.h>

#include <simdjson.h>

#include "protocol/anthropic/messages_request.h"
#include "protocol/anthropic/messages_response.h"
#include "protocol/api_error.h"
#include "server/api/anthropic_sink.h"
#include "tests/recording_writer.h"

namespace waste {
namespace {

MessagesRequest parse(const std::string& extra,
                      const std::string& messages = R"([{"role":"user","content":"hi"}])") {
  return parse_messages_request(
      R"({"model":"m","max_tokens":16,"messages":)" + messages + extra + "}", {100, 0, 8});
}

std::string refusal(const std::string& body) {
  try {
    parse_messages_request(body, {100, 0, 8});
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "accepted";
}

TEST(AnthropicRequest, TranslatesTheConversation) {
  MessagesRequest r = parse(
      R"(,"system":[{"type":"text","text":"be brief"},{"type":"text","text":"really"}],"stop_sequences":["END"],"temperature":0.5,"top_k":5,"stream":true)",
      R"([{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
          {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"calling"},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}]},
          {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42","is_error":true},{"type":"text","text":"and?"}]}])");
  const auto& m = r.conversation.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, Role::kSystem);
  EXPECT_EQ(std::get<std::string>(m[0].content), "be brief\nreally");
  const auto& parts = std::get<std::vector<ContentPart>>(m[1].content);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].image_ref, "data:image/png;base64,AAAA");
  EXPECT_EQ(m[2].reasoning_content, "hmm");
  EXPECT_EQ(std::get<std::string>(m[2].content), "calling");
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(m[2].tool_calls[0].form, ToolCall::ArgumentsForm::kObject);
  EXPECT_EQ(m[3].role, Role::kTool);  // the tool result comes before the rest of the turn
  EXPECT_EQ(m[3].tool_call_id, "toolu_1");
  EXPECT_EQ(std::get<std::string>(m[3].content), "Error: 42");
  EXPECT_EQ(m[4].role, Role::kUser);
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(r.params.sampler.temperature, 0.5f);
  EXPECT_EQ(r.params.sampler.top_k, 5);
  EXPECT_TRUE(r.params.stream);
}

TEST(AnthropicRequest, ToolsToolChoiceAndThinking) {
  MessagesRequest r = parse(
      R"(,"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object"}}],"tool_choice":{"type":"any","disable_parallel_tool_use":true},"thinking":{"type":"enabled","budget_tokens":2048})");
  ASSERT_EQ(r.conversation.tools.size(), 1u);
  EXPECT_EQ(
      r.conversation.tools[0].declaration,
      R"({"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}})");
  EXPECT_EQ(r.conversation.tool_choice.kind, ToolChoice::Kind::kRequired);
  EXPECT_FALSE(r.conversation.tool_choice.parallel);
  EXPECT_EQ(r.conversation.thinking, true);
  EXPECT_EQ(parse(R"(,"tool_choice":{"type":"tool","name":"f"})").conversation.tool_choice.name,
            "f");
  EXPECT_EQ(parse(R"(,"tool_choice":{"type":"none"})").conversation.tool_choice.kind,
            ToolChoice::Kind::kNone);
  EXPECT_EQ(parse(R"(,"thinking":{"type":"disabled"})").conversation.thinking, false);
  // What Claude Code sends: adaptive thinking with its text omitted.
  MessagesRequest a = parse(R"(,"thinking":{"type":"adaptive","display":"omitted"})");
  EXPECT_EQ(a.conversation.thinking, true);
  EXPECT_TRUE(a.omit_thinking);
  EXPECT_FALSE(parse(R"(,"thinking":{"type":"adaptive"})").omit_thinking);
}

// Claude Code sends its environment as a system message after the first user turn; it keeps its
// place in the conversation.
TEST(AnthropicRequest, SystemMessagesInsideMessagesKeepTheirPlace) {
  MessagesRequest r = parse(
      "",
      R"([{"role":"user","content":"hi"},{"role":"system","content":[{"type":"text","text":"# Environment"}]},{"role":"user","content":"go"}])");
  const auto& m = r.conversation.messages;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].role, Role::kSystem);
  EXPECT_EQ(std::get<std::string>(m[1].content), "# Environment");
}

TEST(AnthropicRequest, EveryBadFieldIsNamed) {
  const std::string head = R"({"model":"m","max_tokens":4,"messages":)";
  EXPECT_EQ(refusal(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"), "max_tokens");
  EXPECT_EQ(refusal(R"({"max_tokens":4,"messages":[{"role":"user","content":"x"}]})"), "model");
  EXPECT_EQ(refusal(head + "[]}"), "messages");
  EXPECT_EQ(refusal(head + R"([{"role":"tool","content":"x"}]})"), "messages[0].role");
  EXPECT_EQ(refusal(head + R"([{"role":"system","content":[{"type":"image"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"thinking":{"type":"sometimes"}})"),
            "thinking.type");
  EXPECT_EQ(
      refusal(head +
              R"([{"role":"user","content":"x"}],"thinking":{"type":"adaptive","display":"all"}})"),
      "thinking.display");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":[{"type":"video"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(refusal(head + R"([{"role":"assistant","content":[{"type":"tool_result"}]}]})"),
            "messages[0].content[0].type");
  EXPECT_EQ(
      refusal(head + R"([{"role":"user","content":[{"type":"image","source":{"type":"file"}}]}]})"),
      "messages[0].content[0].source.type");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"temperature":1.5})"), "temperature");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"tools":[{"name":"f"}]})"),
            "tools[0].input_schema");
  EXPECT_EQ(
      refusal(
          head +
          R"([{"role":"user","content":"x"}],"tools":[{"type":"bash_20250124","name":"bash"}]})"),
      "tools[0].type");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"tool_choice":{"type":"some"}})"),
            "tool_choice.type");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"stop_sequences":[""]})"),
            "stop_sequences[0]");
  EXPECT_EQ(refusal(head + R"([{"role":"user","content":"x"}],"thinking":{"type":"enabled"}})"),
            "thinking.budget_tokens");
  // count_tokens needs no max_tokens.
  EXPECT_NO_THROW(
      parse_count_tokens_request(R"({"model":"m","messages":[{"role":"user","content":"x"}]})"));
}

TEST(AnthropicResponse, MessageAndErrorBodies) {
  std::vector<ContentBlockOut> blocks(3);
  blocks[0].kind = ContentBlockOut::Kind::kThinking;
  blocks[0].text = "t";
  blocks[1].text = "hi";
  blocks[2].kind = ContentBlockOut::Kind::kToolUse;
  blocks[2].id = "toolu_1";
  blocks[2].name = "f";
  blocks[2].input_json = R"({"a": 1})";
  EXPECT_EQ(anthropic_message_json({"msg_1", "k3"}, blocks, {"tool_use", std::nullopt}, {5, 3, 2}),
            R"({"id":"msg_1","type":"message","role":"assistant","model":"k3","content":[)"
            R"({"type":"thinking","thinking":"t","signature":""},{"type":"text","text":"hi"},)"
            R"({"type":"tool_use","id":"toolu_1","name":"f","input":{"a": 1}}],)"
            R"("stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":5,)"
            R"("cache_creation_input_tokens":0,"cache_read_input_tokens":2,"output_tokens":3}})");
  EXPECT_EQ(anthropic_error_body(404, "no"),
            R"({"type":"error","error":{"type":"not_found_error","message":"no"}})");
  EXPECT_NE(anthropic_error_body(503, "x").find("overloaded_error"), std::string::npos);
  EXPECT_NE(anthropic_error_body(401, "x").find("authentication_error"), std::string::npos);
  EXPECT_EQ(
      block_delta_json(2, ContentBlockOut::Kind::kToolUse, "{\"a"),
      R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a"}})");
}

using test::reply_event;

// Blocks open and close as the reply changes channel; a stop string is named in the stop.
TEST(AnthropicSink, StreamOrderAndStopReasons) {
  auto w = std::make_shared<test::RecordingWriter>();
  AnthropicSink sink(w, {"msg_1", "k3"}, {true, 10, false});
  using K = ReplyEvent::Kind;
  sink.begin();
  // Silence (a long prefill) is filled by the connection with Anthropic's ping event.
  EXPECT_EQ(w->keepalive.event, "ping");
  EXPECT_EQ(w->keepalive.data, R"({"type":"ping"})");
  sink.on_event(reply_event(K::kReasoning, "r"));
  sink.on_event(reply_event(K::kReasoning, "s"));
  sink.on_event(reply_event(K::kContent, "c"));
  sink.on_event(reply_event(K::kToolCallStart));
  sink.on_event(reply_event(K::kToolCallArguments, "{}"));
  sink.on_event(reply_event(K::kToolCallEnd));
  sink.on_event(reply_event(K::kEnd));
  DecodeResult r;
  r.finish = Finish::kEnd;
  sink.end(std::vector{r});
  EXPECT_EQ(w->names(),
            (std::vector<std::string>{
                "message_start", "content_block_start", "content_block_delta",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "content_block_start",
                "content_block_delta", "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(w->calls.back(), "finish");
  r.finish = Finish::kStop;
  r.stop = "END";
  StopOut s = anthropic_stop(r, false);
  EXPECT_EQ(s.reason, "stop_sequence");
  EXPECT_EQ(s.sequence, "END");
  r.finish = Finish::kLength;
  EXPECT_EQ(anthropic_stop(r, true).reason, "max_tokens");
  r.finish = Finish::kEnd;
  EXPECT_EQ(anthropic_stop(r, true).reason, "tool_use");
  EXPECT_EQ(anthropic_stop(r, false).reason, "end_turn");
}

// Arguments that are not a JSON object (a reply parser's bug) come back as the empty input, never
// as broken JSON and never as a failed reply.
TEST(AnthropicSink, AToolInputThatIsNotAnObjectBecomesTheEmptyObject) {
  using K = ReplyEvent::Kind;
  for (const char* args : {"[1,2]", "{\"a\":", "7"}) {
    auto w = std::make_shared<test::RecordingWriter>();
    AnthropicSink sink(w, {"msg_1", "k3"}, {false, 10, false});
    sink.begin();
    sink.on_event(reply_event(K::kToolCallStart));
    sink.on_event(reply_event(K::kToolCallArguments, args));
    sink.on_event(reply_event(K::kToolCallEnd));
    sink.on_event(reply_event(K::kEnd));
    DecodeResult r;
    r.finish = Finish::kEnd;
    sink.end(std::vector{r});
    ASSERT_EQ(w->calls.size(), 1u) << args;
    EXPECT_TRUE(w->calls[0].starts_with("send 200 application/json ")) << w->calls[0];
    EXPECT_NE(w->calls[0].find(R"("input":{})"), std::string::npos) << w->calls[0];
  }
}

// display "omitted": the thinking block is there, streamed as a start and a stop, with no text.
TEST(AnthropicSink, OmittedThinkingKeepsTheBlockWithoutItsText) {
  auto w = std::make_shared<test::RecordingWriter>();
  AnthropicSinkOptions o{true, 10, true};
  AnthropicSink sink(w, {"msg_1", "k3"}, o);
  using K = ReplyEvent::Kind;
  sink.begin();
  sink.on_event(reply_event(K::kReasoning, "secret"));
  sink.on_event(reply_event(K::kReasoning, "plan"));
  sink.on_event(reply_event(K::kContent, "c"));
  sink.on_event(reply_event(K::kEnd));
  DecodeResult r;
  r.finish = Finish::kEnd;
  sink.end(std::vector{r});
  EXPECT_EQ(w->names(),
            (std::vector<std::string>{"message_start", "content_block_start", "content_block_stop",
                                      "content_block_start", "content_block_delta",
                                      "content_block_stop", "message_delta", "message_stop"}));
  std::string all;
  for (const std::string& c : w->calls) all += c;
  EXPECT_EQ(all.find("secret"), std::string::npos) << all;
  EXPECT_NE(all.find(R"("type":"thinking")"), std::string::npos) << all;
}

// A job that never began is an error body with the failure's status; one cut during its stream
// ends it with an error event.
TEST(AnthropicSink, FailuresBeforeAndDuringAStream) {
  auto w = std::make_shared<test::RecordingWriter>();
  AnthropicSink queued(w, {"msg_1", "k3"}, {true, 10, false});
  queued.fail(JobFailure::kShuttingDown, "the server is shutting down");
  ASSERT_EQ(w->calls.size(), 1u);
  EXPECT_TRUE(w->calls[0].starts_with("send 503 application/json ")) << w->calls[0];
  EXPECT_NE(w->calls[0].find(R"("type":"overloaded_error")"), std::string::npos) << w->calls[0];

  auto s = std::make_shared<test::RecordingWriter>();
  AnthropicSink running(s, {"msg_1", "k3"}, {true, 10, false});
  running.begin();
  running.fail(JobFailure::kEngineError, "bad record");
  ASSERT_EQ(s->names().back(), "error");
  EXPECT_NE(s->named.back().second.find(R"("type":"api_error")"), std::string::npos);
  EXPECT_EQ(s->calls.back(), "finish");
}

}  // namespace
}  // namespace waste
