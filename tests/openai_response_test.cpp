// The OpenAI response writer (protocol/openai/response.h): the exact JSON of each body and chunk,
// which SDKs read field by field.
#include <gtest/gtest.h>

#include "protocol/openai/response.h"

namespace waste {
namespace {

const ResponseHeader kHeader{"chatcmpl-1", 17, "m", ""};

TEST(OpenAiResponse, ChatCompletionBody) {
  ChatMessageOut m;
  m.content = "hi \"you\"";
  ChatChoiceOut c{m, "stop", std::nullopt};
  EXPECT_EQ(chat_completion_json(kHeader, {&c, 1}, {5, 2, 3}),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":"hi \"you\""},"logprobs":null,)"
            R"("finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,)"
            R"("total_tokens":7,"prompt_tokens_details":{"cached_tokens":3}}})");
}

TEST(OpenAiResponse, ToolCallsWithoutContentHaveNullContent) {
  ChatMessageOut m;
  m.reasoning = "r";
  m.tool_calls = {{"call_1", "f", "{\"a\":1}"}};
  ChatChoiceOut c{m, "tool_calls", std::nullopt};
  EXPECT_EQ(chat_completion_json(kHeader, {&c, 1}, {1, 1, 0}),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":null,"reasoning_content":"r",)"
            R"("tool_calls":[{"id":"call_1","type":"function","function":{"name":"f",)"
            R"("arguments":"{\"a\":1}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],)"
            R"("usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenAiResponse, Chunks) {
  const std::string head =
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"m","choices":[{"index":0,"delta":)";
  ChatDelta role;
  role.role = true;
  EXPECT_EQ(chat_chunk_json(kHeader, role),
            head + R"({"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})");
  ChatDelta start;
  start.tool = ChatDelta::Tool{1, "call_9", "g", ""};
  EXPECT_EQ(chat_chunk_json(kHeader, start),
            head + R"({"tool_calls":[{"index":1,"id":"call_9","type":"function","function":)"
                   R"({"name":"g","arguments":""}}]},"logprobs":null,"finish_reason":null}]})");
  ChatDelta args;
  args.tool = ChatDelta::Tool{1, std::nullopt, std::nullopt, "{}"};
  EXPECT_EQ(chat_chunk_json(kHeader, args),
            head + R"({"tool_calls":[{"index":1,"function":{"arguments":"{}"}}]},"logprobs":null,)"
                   R"("finish_reason":null}]})");
  ChatDelta end;
  end.finish_reason = "length";
  EXPECT_EQ(chat_chunk_json(kHeader, end),
            head + R"({},"logprobs":null,"finish_reason":"length"}]})");
  EXPECT_EQ(chat_usage_chunk_json(kHeader, {2, 3, 1}),
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"m",)"
            R"("choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5,)"
            R"("prompt_tokens_details":{"cached_tokens":1}}})");
}

TEST(OpenAiResponse, TextCompletions) {
  ResponseHeader h{"cmpl-1", 17, "m", ""};
  EXPECT_EQ(completion_chunk_json(h, 0, {"a", "", std::nullopt, 0}),
            R"({"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"text":"a","logprobs":null,"finish_reason":null}]})");
  CompletionChoiceOut c{"ab", "stop", std::nullopt, 0};
  EXPECT_EQ(completion_json(h, {&c, 1}, {1, 2, 0}),
            R"({"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"text":"ab","logprobs":null,"finish_reason":"stop"}],"usage":)"
            R"({"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

// Chat's logprobs: each content token with its bytes and alternatives; a token that is not whole
// UTF-8 is spelled "bytes:\\xNN..."; several choices count their index from 0.
TEST(OpenAiResponse, ChatLogprobsAndSeveralChoices) {
  ChatChoiceOut a{{}, "stop", std::vector<TokenLogprobOut>{}};
  a.message.content = "Hi";
  a.logprobs->push_back({"Hi", -0.25, {{"Hi", -0.25}, {"\xe2\x80", -1.5}}});
  ChatChoiceOut b{{}, "length", std::nullopt};
  b.message.content = "Yo";
  std::vector<ChatChoiceOut> both = {a, b};
  EXPECT_EQ(
      chat_completion_json(kHeader, both, {1, 2, 0}),
      R"({"id":"chatcmpl-1","object":"chat.completion","created":17,"model":"m","choices":[)"
      R"({"index":0,"message":{"role":"assistant","content":"Hi"},"logprobs":{"content":[)"
      R"({"token":"Hi","logprob":-0.25,"bytes":[72,105],"top_logprobs":[)"
      R"({"token":"Hi","logprob":-0.25,"bytes":[72,105]},)"
      R"({"token":"bytes:\\xe2\\x80","logprob":-1.5,"bytes":[226,128]}]}],"refusal":null},)"
      R"("finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"Yo"},)"
      R"("logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":1,)"
      R"("completion_tokens":2,"total_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}})");
  ChatDelta d;
  d.index = 1;
  d.content = "Hi";
  d.logprobs = std::vector<TokenLogprobOut>{{"Hi", -0.5, {}}};
  EXPECT_EQ(
      chat_chunk_json(kHeader, d),
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":17,"model":"m",)"
      R"("choices":[{"index":1,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi",)"
      R"("logprob":-0.5,"bytes":[72,105],"top_logprobs":[]}],"refusal":null},)"
      R"("finish_reason":null}]})");
}

// The legacy shape: parallel lists; an echoed prompt's first token has null entries; offsets
// count code points from the chunk's offset.
TEST(OpenAiResponse, LegacyCompletionLogprobs) {
  ResponseHeader h{"cmpl-1", 17, "m", ""};
  CompletionChoiceOut c{"abé", "", std::vector<TokenLogprobOut>{}, 5};
  c.logprobs->push_back({"a", std::nullopt, {}});
  c.logprobs->push_back({"bé", -1.0, {{"bé", -1.0}, {"c", -2.0}}});
  c.logprobs->push_back({"!", -0.5, {}});
  EXPECT_EQ(completion_chunk_json(h, 2, c),
            R"({"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[)"
            R"({"index":2,"text":"abé","logprobs":{"tokens":["a","bé","!"],)"
            R"("token_logprobs":[null,-1,-0.5],"top_logprobs":[null,{"bé":-1,"c":-2},{}],)"
            R"("text_offset":[5,6,8]},"finish_reason":null}]})");
}

TEST(OpenAiResponse, ModelList) {
  EXPECT_EQ(models_json("k3", 17, 4096),
            R"({"object":"list","data":[{"id":"k3","object":"model","created":17,)"
            R"("owned_by":"waste","context_length":4096,"max_model_len":4096}]})");
}

}  // namespace
}  // namespace waste
