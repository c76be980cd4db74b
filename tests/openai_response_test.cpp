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
  EXPECT_EQ(chat_completion_json(kHeader, m, "stop", {5, 2, 3}),
            R"({"id":"chatcmpl-1","object":"chat.completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"message":{"role":"assistant","content":"hi \"you\""},"logprobs":null,)"
            R"("finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,)"
            R"("total_tokens":7,"prompt_tokens_details":{"cached_tokens":3}}})");
}

TEST(OpenAiResponse, ToolCallsWithoutContentHaveNullContent) {
  ChatMessageOut m;
  m.reasoning = "r";
  m.tool_calls = {{"call_1", "f", "{\"a\":1}"}};
  EXPECT_EQ(chat_completion_json(kHeader, m, "tool_calls", {1, 1, 0}),
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
  EXPECT_EQ(completion_chunk_json(h, "a", std::nullopt),
            R"({"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"text":"a","logprobs":null,"finish_reason":null}]})");
  EXPECT_EQ(completion_json(h, "ab", "stop", {1, 2, 0}),
            R"({"id":"cmpl-1","object":"text_completion","created":17,"model":"m","choices":[)"
            R"({"index":0,"text":"ab","logprobs":null,"finish_reason":"stop"}],"usage":)"
            R"({"prompt_tokens":1,"completion_tokens":2,"total_tokens":3,)"
            R"("prompt_tokens_details":{"cached_tokens":0}}})");
}

TEST(OpenAiResponse, ModelList) {
  EXPECT_EQ(models_json("k3", 17, 4096),
            R"({"object":"list","data":[{"id":"k3","object":"model","created":17,)"
            R"("owned_by":"waste","context_length":4096,"max_model_len":4096}]})");
}

}  // namespace
}  // namespace waste
