// A generation's output in OpenAI's shapes: chat.completion (one body) or chat.completion.chunk
// events, text_completion likewise, with one choice per reply (`n`) and log-probabilities when
// asked. Streams begin when the worker takes the job, say an SSE comment whenever they fall silent
// (a long prefill: see http::Keepalive), and end with [DONE].
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "protocol/openai/response.h"
#include "server/http/http.h"
#include "server/runtime/engine_worker.h"

namespace waste {

struct OpenAiSinkOptions {
  bool chat = true;  // chat.completion, else text_completion
  bool stream = false;
  bool include_usage = false;
  bool legacy_functions = false;  // the request used `functions`: answer with `function_call`
  // Log-probabilities are reported (the tokenizer spells the ids); null: none.
  const Tokenizer* logprobs = nullptr;
  // Completions with `echo`: the prompt's text, written before each choice's reply.
  std::optional<std::string> echo;
};

class OpenAiSink final : public JobSink {
 public:
  OpenAiSink(std::shared_ptr<http::ResponseWriter> out, ResponseHeader header,
             OpenAiSinkOptions options);

  bool cancelled() override { return out_->closed(); }
  void on_prompt_token(int32_t id, const TokenLogprobs* logprobs) override;
  void on_token(int32_t id, const TokenLogprobs* logprobs) override;
  void on_event(const ReplyEvent& e) override;
  void begin_choice(size_t index) override;
  bool interleaves() const override { return true; }
  void begin() override;
  void end(std::span<const DecodeResult> replies) override;
  void fail(JobFailure failure, const std::string& message) override;

 private:
  // What one reply has produced so far.
  struct Choice {
    ChatMessageOut message;
    std::string text;  // completions
    std::vector<TokenLogprobOut> logprobs;
    // Reported tokens whose text has not reached the content yet: they join the content delta
    // that carries it, and are dropped when reasoning or a tool call takes them instead.
    std::vector<TokenLogprobOut> pending;
    int64_t text_offset = 0;  // code points written in this choice's text
    bool echoed = false;      // a stream wrote the echo
  };
  Choice& current() { return choices_[current_]; }
  void write_chunk(ChatDelta d);
  void on_text(const std::string& text);
  void echo_once();
  std::optional<std::vector<TokenLogprobOut>> take_pending();
  TokenLogprobOut entry(const TokenLogprobs& lp) const;

  std::shared_ptr<http::ResponseWriter> out_;
  ResponseHeader header_;
  OpenAiSinkOptions opt_;
  bool started_ = false;  // the event stream is open
  std::vector<Choice> choices_;
  size_t current_ = 0;                            // the choice the events are for
  std::vector<TokenLogprobOut> prompt_logprobs_;  // echo: the prompt's tokens
};

// What OpenAI's streams (chat, completions, Responses) say when silent: an SSE comment, which
// every client skips; a typed Responses event would take a sequence_number.
http::Keepalive openai_keepalive();

// OpenAI's finish_reason for a finished reply: "stop" (or "tool_calls" when the reply called
// tools, "function_call" when a `legacy` functions request did) for an end token or a stop
// string, "length" when the budget or the context ran out.
std::string openai_finish_reason(Finish f, bool has_tool_calls, bool legacy = false);

}  // namespace waste
