// The OpenAI request bodies (protocol/openai/request.h): every refusal names its field in the
// message and in `param`, unknown fields are ignored, tools are parsed once and keep their JSON,
// and the generation parameters are read with their ranges.
#include <gtest/gtest.h>

#include <string>

#include "protocol/api_error.h"
#include "protocol/openai/error.h"
#include "protocol/openai/request.h"

namespace waste {
namespace {

// ---- request parsing -----------------------------------------------------------------------

// The refusal's message starts with the field, and `param` is the field itself (none for the
// body as a whole).
void expect_refused(std::string_view body, std::string_view field) {
  try {
    parse_chat_completion(body, {});
    ADD_FAILURE() << "accepted: " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_TRUE(std::string(e.what()).starts_with(field)) << e.what() << "\nwant field " << field;
    EXPECT_EQ(e.param, field == "request body" ? "" : field) << e.what();
  }
}

TEST(ChatRequestParse, EveryRefusalNamesItsField) {
  const std::string user = R"({"role":"user","content":"x"})";
  expect_refused("not json", "request body");
  expect_refused("[1]", "request body");
  expect_refused("{}", "messages");
  expect_refused(R"({"messages":[]})", "messages");
  expect_refused(R"({"messages":{}})", "messages");
  expect_refused(R"({"messages":[1]})", "messages[0]");
  expect_refused(R"({"messages":[{"content":"x"}]})", "messages[0].role");
  expect_refused(R"({"messages":[{"role":"robot","content":"x"}]})", "messages[0].role");
  expect_refused(R"({"messages":[{"role":"user","content":5}]})", "messages[0].content");
  expect_refused(R"({"messages":[{"role":"user","content":[{"type":"audio"}]}]})",
                 "messages[0].content[0].type");
  expect_refused(R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})",
                 "messages[0].content[0].type");
  expect_refused(R"({"messages":[{"role":"user","content":["x"]}]})", "messages[0].content[0]");
  expect_refused(R"({"messages":[{"role":"user","content":[{"type":"text","text":3}]}]})",
                 "messages[0].content[0].text");
  expect_refused(R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})",
                 "messages[0].content[0].text");
  expect_refused(
      R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})",
      "messages[0].content[0].image_url.url");
  expect_refused(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
                 "messages[0].content[0].image_url");
  expect_refused(R"({"messages":[{"role":"user","name":7,"content":"x"}]})", "messages[0].name");
  expect_refused(
      R"({"messages":[{"role":"user","content":"x","tool_calls":[{"function":{"name":"f"}}]}]})",
      "messages[0].tool_calls");
  expect_refused(R"({"messages":[{"role":"assistant","tool_calls":{}}]})",
                 "messages[0].tool_calls");
  expect_refused(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"arguments":"{}"}}]}]})",
      "messages[0].tool_calls[0].function.name");
  expect_refused(
      R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":[1]}}]}]})",
      "messages[0].tool_calls[0].function.arguments");
  expect_refused(R"({"messages":[{"role":"assistant","tool_calls":[{"function":"f"}]}]})",
                 "messages[0].tool_calls[0].function");
  expect_refused(R"({"messages":[{"role":"assistant","reasoning_content":1}]})",
                 "messages[0].reasoning_content");
  expect_refused(R"({"messages":[{"role":"tool","tool_call_id":1,"content":"x"}]})",
                 "messages[0].tool_call_id");
  expect_refused(R"({"messages":[{"role":"system","tools":{}}]})", "messages[0].tools");
  expect_refused(R"({"messages":[)" + user + R"(],"tools":{}})", "tools");
  expect_refused(R"({"messages":[)" + user + R"(],"tools":[1]})", "tools[0]");
  expect_refused(R"({"messages":[)" + user + R"(],"tool_choice":"any"})", "tool_choice");
  expect_refused(R"({"messages":[)" + user + R"(],"tool_choice":{"type":"function"}})",
                 "tool_choice.function");
  expect_refused(
      R"({"messages":[)" + user + R"(],"tool_choice":{"type":"function","function":{}}})",
      "tool_choice.function.name");
  expect_refused(R"({"messages":[)" + user + R"(],"response_format":{"type":"xml"}})",
                 "response_format.type");
  expect_refused(R"({"messages":[)" + user + R"(],"response_format":{}})", "response_format.type");
  expect_refused(R"({"messages":[)" + user + R"(],"response_format":3})", "response_format");
  expect_refused(R"({"messages":[)" + user + R"(],"thinking":"yes"})", "thinking");
  expect_refused(R"({"messages":[)" + user + R"(],"thinking":{"type":"on"}})", "thinking.type");
  expect_refused(R"({"messages":[)" + user + R"(],"enable_thinking":1})", "enable_thinking");
  expect_refused(R"({"messages":[)" + user + R"(],"chat_template_kwargs":[]})",
                 "chat_template_kwargs");
  expect_refused(R"({"messages":[)" + user + R"(],"chat_template_kwargs":{"thinking":"no"}})",
                 "chat_template_kwargs.thinking");
  expect_refused(R"({"messages":[)" + user + R"(],"reasoning_effort":"mid"})", "reasoning_effort");
  expect_refused(R"({"messages":[)" + user + R"(],"thinking_effort":"extreme"})",
                 "thinking_effort");
  expect_refused(R"({"messages":[)" + user + R"(],"reasoning_effort":3})", "reasoning_effort");
  expect_refused(R"({"messages":[)" + user + R"(],"reasoning":{"effort":"huge"}})",
                 "reasoning.effort");
}

// Legacy function calling is read as tools: declarations, the choice, the assistant's call and
// the function's result.
TEST(ChatRequestParse, LegacyFunctionsAreTools) {
  const ChatCompletionRequest r = parse_chat_completion(
      R"({"messages":[{"role":"user","content":"x"},
          {"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{\"a\":1}"}},
          {"role":"function","name":"f","content":"42"}],
          "functions":[{"name":"f","parameters":{"type":"object"}}],"function_call":{"name":"f"}})",
      {});
  const Conversation& c = r.conversation;
  EXPECT_TRUE(r.legacy_functions);
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0].name, "f");
  EXPECT_EQ(c.tools[0].declaration,
            R"({"type":"function","function":{"name":"f","parameters":{"type":"object"}}})");
  EXPECT_EQ(c.tool_choice.kind, ToolChoice::Kind::kNamed);
  EXPECT_EQ(c.tool_choice.name, "f");
  EXPECT_FALSE(c.tool_choice.parallel);
  ASSERT_EQ(c.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(c.messages[1].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(c.messages[2].role, Role::kTool);
  EXPECT_EQ(c.messages[2].tool, std::optional<std::string>("f"));
  EXPECT_FALSE(parse_chat_completion(R"({"messages":[{"role":"user","content":"x"}]})", {})
                   .legacy_functions);
  const std::string user = R"({"role":"user","content":"x"})";
  expect_refused(R"({"messages":[)" + user + R"(],"functions":[{"name":"f"}],"tools":[]})",
                 "functions");
  expect_refused(R"({"messages":[)" + user + R"(],"function_call":"any"})", "function_call");
  expect_refused(R"({"messages":[)" + user + R"(],"function_call":{}})", "function_call.name");
  expect_refused(R"({"messages":[{"role":"user","content":"x","function_call":{"name":"f"}}]})",
                 "messages[0].function_call");
}

// OpenAI's effort values map onto the three K3's encoder accepts; "none" turns thinking off.
TEST(ChatRequestParse, ReasoningEffortsMapOntoK3s) {
  for (auto [given, k3] :
       {std::pair{"minimal", "low"}, std::pair{"low", "low"}, std::pair{"medium", "high"},
        std::pair{"High", "high"}, std::pair{"max", "max"}}) {
    const Conversation c =
        parse_chat_completion(
            R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":")" +
                std::string(given) + "\"}",
            {})
            .conversation;
    EXPECT_EQ(c.thinking_effort, std::optional<std::string>(k3)) << given;
  }
  const Conversation off =
      parse_chat_completion(
          R"({"messages":[{"role":"user","content":"x"}],"thinking":true,"reasoning":{"effort":"none"}})",
          {})
          .conversation;
  EXPECT_EQ(off.thinking, std::optional<bool>(false));
}

TEST(ChatRequestParse, AcceptsAndIgnoresOtherFields) {
  const Conversation r = parse_chat_completion(R"({"model":"k3","stream":true,"temperature":0.7,
      "top_p":0.9,"max_tokens":10,"max_completion_tokens":11,"stop":["x"],"seed":-1,"n":1,
      "logprobs":false,"user":"u","parallel_tool_calls":true,"stream_options":{"include_usage":true},
      "tools":null,"tool_choice":null,"response_format":null,"frequency_penalty":0,
      "messages":[{"role":"user","content":"hi","extra":1},
                  {"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"i","type":"function","function":{"name":"f","arguments":"{}"}}]},
                  {"role":"tool","id":"i","content":[{"type":"text","text":"r"}]}]})",
                                               {})
                             .conversation;
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(std::get<std::string>(r.messages[0].content), "hi");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r.messages[1].content));
  EXPECT_EQ(r.messages[1].tool_calls[0].form, ToolCall::ArgumentsForm::kString);
  EXPECT_EQ(r.messages[2].tool_call_id, "i");  // `id` stands in for tool_call_id
  EXPECT_EQ(r.tool_choice.kind, ToolChoice::Kind::kAuto);
  EXPECT_TRUE(r.tool_choice.parallel);
  EXPECT_EQ(r.response_format.kind, ResponseFormat::Kind::kText);
  EXPECT_FALSE(
      parse_chat_completion(
          R"({"messages":[{"role":"user","content":"x"}],"parallel_tool_calls":false})", {})
          .conversation.tool_choice.parallel);
}

TEST(ChatRequestParse, ToolsKeepTheirJsonForPythonDumping) {
  const Conversation r =
      parse_chat_completion(
          R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","description":"é","n":1E2,"big":18446744073709551615,"parameters":{"type":"object"}}}]})",
          {})
          .conversation;
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0].name, "f");
  EXPECT_EQ(r.tools[0].description, "é");
  EXPECT_EQ(r.tools[0].parameters, R"({"type":"object"})");
  EXPECT_EQ(
      r.tools[0].declaration,
      R"({"type":"function","function":{"name":"f","description":"é","n":100.0,"big":18446744073709551615,"parameters":{"type":"object"}}})");
}

// Numbers simdjson cannot hold (integers past 64 bits, magnitudes past a double) are numbers
// wherever a request carries arbitrary JSON, and keep the text the client wrote.
const std::string kBigNumbers =
    R"({"a":1e400,"b":-1e400,"c":123456789012345678901234567890,"d":-999999999999999999999})";

TEST(ChatRequestParse, NumbersPastSimdjsonKeepTheirText) {
  const std::string params =
      R"({"type":"object","properties":{"n":{"type":"number","minimum":-1e400,"maximum":1e400,"enum":[1e400,123456789012345678901234567890],"default":)" +
      kBigNumbers + "}}}";
  const Conversation c =
      parse_chat_completion(
          R"({"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[)"
          R"({"id":"1","type":"function","function":{"name":"f","arguments":)" +
              kBigNumbers +
              R"(}},{"id":"2","type":"function","function":{"name":"f","arguments":"{\"n\": 1e400}"}}]}],)"
              R"("tools":[{"type":"function","function":{"name":"f","description":"1e400","parameters":)" +
              params +
              R"(}}],"response_format":{"type":"json_schema","json_schema":{"name":"r","schema":{"const":)" +
              kBigNumbers + "}}}}",
          {})
          .conversation;
  ASSERT_EQ(c.tools.size(), 1u);
  EXPECT_EQ(c.tools[0].description, "1e400");  // a client's string stays a string
  EXPECT_EQ(c.tools[0].parameters, params);
  EXPECT_EQ(c.tools[0].declaration,
            R"({"type":"function","function":{"name":"f","description":"1e400","parameters":)" +
                params + "}}");
  EXPECT_EQ(c.response_format.schema, R"({"const":)" + kBigNumbers + "}");
  ASSERT_EQ(c.messages[1].tool_calls.size(), 2u);
  EXPECT_EQ(c.messages[1].tool_calls[0].arguments, kBigNumbers);
  EXPECT_EQ(c.messages[1].tool_calls[1].arguments, R"({"n": 1e400})");
}

std::string chat_refusal(const std::string& body) {
  try {
    parse_chat_completion(body, {});
  } catch (const ApiError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ChatRequestParse, NumbersPastSimdjsonAreNeverStrings) {
  const std::string user = R"({"role":"user","content":"x"})";
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":1e400}]})"),
            "messages[0].content: must be a string, an array of content parts or null, not a "
            "number");
  EXPECT_EQ(
      chat_refusal(R"({"messages":[)" + user + R"(],"model":123456789012345678901234567890})"),
      "model: must be a string, not a number");
  expect_refused(R"({"messages":[{"role":"user","content":[{"type":"text","text":-1e400}]}]})",
                 "messages[0].content[0].text");
  expect_refused(
      R"({"messages":[)" + user +
          R"(],"tools":[{"type":"function","function":{"name":-999999999999999999999}}]})",
      "tools[0].function.name");
  // Malformed numbers, and a number where a key belongs, are still not JSON.
  for (const char* bad : {R"({"messages":01})", R"({"messages":[],"n":1.})", R"({1e400:1})"})
    expect_refused(bad, "request body");
}

TEST(ChatRequestParse, ToolNamesMustBeFunctionNames) {
  // A name goes verbatim into call markup, so only identifier characters pass.
  for (const char* name : {"", "a b", "x\\\"y", "<|open|>", "é"}) {
    const std::string body =
        std::string(R"({"messages":[{"role":"user","content":"x"}],"tools":[)") +
        R"({"type":"function","function":{"name":")" + name + R"("}}]})";
    expect_refused(body, "tools[0].function.name");
  }
  // A flat declaration (no `function` object) names itself.
  const Conversation c =
      parse_chat_completion(
          R"({"messages":[{"role":"user","content":"x"}],"tools":[{"name":"get.weather-2_x"}]})",
          {})
          .conversation;
  EXPECT_EQ(c.tools[0].name, "get.weather-2_x");
  EXPECT_EQ(c.tools[0].parameters, "");
}

// ---- generation parameters -----------------------------------------------------------------

GenerationParams params(const std::string& extra, RequestLimits limits = {100, 0}) {
  return parse_chat_completion(R"({"messages":[{"role":"user","content":"x"}])" + extra + "}",
                               limits)
      .params;
}

void expect_param_refused(const std::string& extra, const std::string& field,
                          RequestLimits limits = {100, 0}) {
  try {
    params(extra, limits);
    ADD_FAILURE() << "accepted: " << extra;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << extra;
    EXPECT_EQ(e.param, field) << extra << ": " << e.what();
    EXPECT_TRUE(std::string(e.what()).starts_with(field + ": ")) << e.what();
  }
}

TEST(GenerationParamsParse, DefaultsWhenAbsentOrNull) {
  for (const std::string& extra :
       {std::string(""),
        std::string(R"(,"temperature":null,"stop":null,"seed":null,"max_tokens":null)")}) {
    GenerationParams g = params(extra);
    EXPECT_EQ(g.sampler.temperature, 1.0f);
    EXPECT_EQ(g.sampler.top_p, 1.0f);
    EXPECT_FALSE(g.sampler.seed.has_value());
    EXPECT_FALSE(g.max_tokens.has_value());
    EXPECT_TRUE(g.stop.empty());
    EXPECT_FALSE(g.stream);
    EXPECT_FALSE(g.include_usage);
    EXPECT_EQ(g.model, "");
  }
}

TEST(GenerationParamsParse, ReadsEveryField) {
  GenerationParams g = params(
      R"(,"model":"m","temperature":0.5,"top_p":0.25,"top_k":7,"min_p":0.1,"presence_penalty":-1,"frequency_penalty":2,"repetition_penalty":1.5,"seed":-3,"logit_bias":{"5":-100,"7":2.5},"max_tokens":9,"stop":"END","stream":true,"stream_options":{"include_usage":true},"parallel_tool_calls":false,"n":1,"logprobs":false)");
  EXPECT_EQ(g.model, "m");
  EXPECT_EQ(g.sampler.temperature, 0.5f);
  EXPECT_EQ(g.sampler.top_p, 0.25f);
  EXPECT_EQ(g.sampler.top_k, 7);
  EXPECT_FLOAT_EQ(g.sampler.min_p, 0.1f);
  EXPECT_EQ(g.sampler.presence_penalty, -1.0f);
  EXPECT_EQ(g.sampler.frequency_penalty, 2.0f);
  EXPECT_EQ(g.sampler.repetition_penalty, 1.5f);
  EXPECT_EQ(g.sampler.seed, (uint64_t)-3);
  ASSERT_EQ(g.sampler.logit_bias.size(), 2u);
  EXPECT_EQ(g.sampler.logit_bias[0], (std::pair<int, float>{5, -100.0f}));
  EXPECT_EQ(g.sampler.logit_bias[1], (std::pair<int, float>{7, 2.5f}));
  EXPECT_EQ(g.max_tokens, 9);
  EXPECT_EQ(g.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(g.stream);
  EXPECT_TRUE(g.include_usage);
}

TEST(GenerationParamsParse, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(params(R"(,"max_tokens":5,"max_completion_tokens":8)").max_tokens, 8);
  EXPECT_EQ(params(R"(,"max_tokens":5)").max_tokens, 5);
}

TEST(GenerationParamsParse, StopIsAStringOrUpToFourStrings) {
  EXPECT_EQ(params(R"(,"stop":["a","bc"])").stop, (std::vector<std::string>{"a", "bc"}));
  expect_param_refused(R"(,"stop":["a","b","c","d","e"])", "stop");
  expect_param_refused(R"(,"stop":[""])", "stop");
  expect_param_refused(R"(,"stop":[1])", "stop");
  expect_param_refused(R"(,"stop":{})", "stop");
}

TEST(GenerationParamsParse, EveryBadValueNamesItsField) {
  expect_param_refused(R"(,"temperature":"hot")", "temperature");
  expect_param_refused(R"(,"temperature":2.5)", "temperature");
  expect_param_refused(R"(,"top_p":0)", "top_p");
  expect_param_refused(R"(,"top_p":1.5)", "top_p");
  expect_param_refused(R"(,"top_k":-1)", "top_k");
  expect_param_refused(R"(,"top_k":1.5)", "top_k");
  expect_param_refused(R"(,"min_p":2)", "min_p");
  expect_param_refused(R"(,"presence_penalty":3)", "presence_penalty");
  expect_param_refused(R"(,"frequency_penalty":-3)", "frequency_penalty");
  expect_param_refused(R"(,"repetition_penalty":0)", "repetition_penalty");
  expect_param_refused(R"(,"seed":"x")", "seed");
  expect_param_refused(R"(,"max_tokens":0)", "max_tokens");
  expect_param_refused(R"(,"max_completion_tokens":"9")", "max_completion_tokens");
  expect_param_refused(R"(,"stream":"yes")", "stream");
  expect_param_refused(R"(,"stream_options":true)", "stream_options");
  expect_param_refused(R"(,"stream_options":{"include_usage":1})", "stream_options.include_usage");
  expect_param_refused(R"(,"parallel_tool_calls":0)", "parallel_tool_calls");
  expect_param_refused(R"(,"model":3)", "model");
  expect_param_refused(R"(,"n":0)", "n");
  expect_param_refused(R"(,"n":9)", "n");  // the default limit is 8
  expect_param_refused(R"(,"n":1.5)", "n");
  expect_param_refused(R"(,"logprobs":1)", "logprobs");          // chat's is a boolean
  expect_param_refused(R"(,"top_logprobs":3)", "top_logprobs");  // needs logprobs: true
  expect_param_refused(R"(,"logprobs":true,"top_logprobs":21)", "top_logprobs");
  expect_param_refused(R"(,"logit_bias":[])", "logit_bias");
  expect_param_refused(R"(,"logit_bias":{"x":1})", "logit_bias");
  expect_param_refused(R"(,"logit_bias":{"100":1})", "logit_bias");  // the vocabulary is 100
  expect_param_refused(R"(,"logit_bias":{"5":101})", "logit_bias");
  expect_param_refused(R"(,"logit_bias":{"5":"1"})", "logit_bias");
}

TEST(GenerationParamsParse, NAndLogprobs) {
  EXPECT_EQ(params("").n, 1);
  EXPECT_EQ(params(R"(,"n":8)").n, 8);
  EXPECT_EQ(params(R"(,"n":3)", {100, 0, 3}).n, 3);
  expect_param_refused(R"(,"n":4)", "n", {100, 0, 3});
  EXPECT_EQ(params("").sampler.logprobs, -1);
  EXPECT_EQ(params(R"(,"logprobs":false)").sampler.logprobs, -1);
  EXPECT_EQ(params(R"(,"logprobs":true)").sampler.logprobs, 0);
  EXPECT_EQ(params(R"(,"logprobs":true,"top_logprobs":20)").sampler.logprobs, 20);
  EXPECT_EQ(params(R"(,"logprobs":false,"top_logprobs":null)").sampler.logprobs, -1);
}

std::string param_refusal(const std::string& extra) {
  try {
    params(extra);
  } catch (const ApiError& e) {
    return e.what();
  }
  return "accepted";
}

// Ranges refuse numbers simdjson cannot hold with their usual message, showing the text sent.
TEST(GenerationParamsParse, NumbersPastSimdjsonAreOutOfRange) {
  expect_param_refused(R"(,"temperature":1e400)", "temperature");
  EXPECT_EQ(param_refusal(R"(,"temperature":1e400)"),
            "temperature: 1e400 is out of range (0 to 2)");
  EXPECT_EQ(param_refusal(R"(,"top_p":-1e400)"), "top_p: -1e400 is out of range (0 to 1)");
  EXPECT_EQ(param_refusal(R"(,"temperature":123456789012345678901234567890)"),
            "temperature: 123456789012345678901234567890 is out of range (0 to 2)");
  expect_param_refused(R"(,"max_tokens":123456789012345678901234567890)", "max_tokens");
  EXPECT_EQ(param_refusal(R"(,"max_tokens":123456789012345678901234567890)"),
            "max_tokens: 123456789012345678901234567890 is out of range (1 to "
            "9223372036854775807)");
  EXPECT_EQ(param_refusal(R"(,"max_tokens":18446744073709551615)"),
            "max_tokens: 18446744073709551615 is out of range (1 to 9223372036854775807)");
  EXPECT_EQ(param_refusal(R"(,"max_tokens":1e400)"), "max_tokens: must be an integer");
  expect_param_refused(R"(,"seed":-999999999999999999999)", "seed");
  expect_param_refused(R"(,"n":123456789012345678901234567890)", "n");
  expect_param_refused(R"(,"logit_bias":{"5":1e400})", "logit_bias");
  expect_param_refused(R"(,"stop":[1e400])", "stop");
}

TEST(GenerationParamsParse, MaxTokensCap) {
  EXPECT_EQ(params(R"(,"max_tokens":64)", {100, 64}).max_tokens, 64);
  expect_param_refused(R"(,"max_tokens":65)", "max_tokens", {100, 64});
}

// ---- /v1/completions -------------------------------------------------------------------------

TEST(CompletionRequestParse, PromptAsTextOrIds) {
  EXPECT_EQ(parse_completion(R"({"prompt":"hi"})", {100, 0}).text, "hi");
  EXPECT_EQ(parse_completion(R"({"prompt":["hi"]})", {100, 0}).text, "hi");
  CompletionRequest ids = parse_completion(R"({"prompt":[1,2,99],"max_tokens":3})", {100, 0});
  EXPECT_FALSE(ids.text);
  EXPECT_EQ(ids.ids, (std::vector<int32_t>{1, 2, 99}));
  EXPECT_EQ(ids.params.max_tokens, 3);
  for (const char* body :
       {R"({})", R"({"prompt":5})", R"({"prompt":[]})", R"({"prompt":[100]})", R"({"prompt":[-1]})",
        R"({"prompt":["a","b"]})", R"({"prompt":[123456789012345678901234567890]})",
        R"({"prompt":[1e400]})"}) {
    try {
      parse_completion(body, {100, 0});
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, "prompt") << body << ": " << e.what();
    }
  }
  // Legacy logprobs is a count of alternatives; echo puts the prompt first and then allows
  // max_tokens 0 (scoring only), which is refused otherwise.
  EXPECT_EQ(parse_completion(R"({"prompt":"x","logprobs":null})", {100, 0}).params.sampler.logprobs,
            -1);
  CompletionRequest scored =
      parse_completion(R"({"prompt":"x","echo":true,"logprobs":5,"max_tokens":0})", {100, 0});
  EXPECT_TRUE(scored.echo);
  EXPECT_EQ(scored.params.sampler.logprobs, 5);
  EXPECT_EQ(scored.params.max_tokens, 0);
  EXPECT_EQ(parse_completion(R"({"prompt":"x","n":2})", {100, 0}).params.n, 2);
  for (auto [body, param] : {std::pair{R"({"prompt":"x","max_tokens":0})", "max_tokens"},
                             std::pair{R"({"prompt":"x","logprobs":true})", "logprobs"},
                             std::pair{R"({"prompt":"x","logprobs":21})", "logprobs"},
                             std::pair{R"({"prompt":"x","echo":1})", "echo"}}) {
    try {
      parse_completion(body, {100, 0});
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, param) << body << ": " << e.what();
    }
  }
}

// ---- error bodies ----------------------------------------------------------------------------

TEST(OpenAiErrorBody, OpenAiShape) {
  EXPECT_EQ(openai_error_body("bad \"x\"", "invalid_request_error", "temperature", "c1"),
            R"({"error":{"message":"bad \"x\"","type":"invalid_request_error",)"
            R"("param":"temperature","code":"c1"}})");
  EXPECT_EQ(openai_error_body("m", "server_error"),
            R"({"error":{"message":"m","type":"server_error","param":null,"code":null}})");
  EXPECT_EQ(
      openai_refusal_body(401, "no key", "invalid_api_key"),
      R"({"error":{"message":"no key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}})");
  EXPECT_EQ(openai_refusal_body(500, "boom", ""),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
}

}  // namespace
}  // namespace waste
