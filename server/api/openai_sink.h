// A generation's output in OpenAI's shapes: chat.completion (one body) or chat.completion.chunk
// events, text_completion likewise. Streams begin when the worker takes the job, stay alive with
// SSE comments through a long prefill, and end with [DONE].
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "protocol/openai/response.h"
#include "server/http/http.h"
#include "server/runtime/engine_worker.h"

namespace waste {

struct OpenAiSinkOptions {
  bool chat = true;  // chat.completion, else text_completion
  bool stream = false;
  bool include_usage = false;
  bool legacy_functions = false;  // the request used `functions`: answer with `function_call`
  std::chrono::milliseconds keepalive{5000};  // SSE comment interval while nothing is written
};

class OpenAiSink final : public JobSink {
 public:
  OpenAiSink(std::shared_ptr<http::ResponseWriter> out, ResponseHeader header,
             OpenAiSinkOptions options);

  bool cancelled() override { return out_->closed(); }
  void prefill_progress(size_t done, size_t total) override;
  void on_event(const ReplyEvent& e) override;
  void begin() override;
  void end(const DecodeResult& r) override;
  void fail(int status, const std::string& message, const std::string& code) override;

 private:
  void write_chunk(ChatDelta d);
  void on_text(const std::string& text);

  std::shared_ptr<http::ResponseWriter> out_;
  ResponseHeader header_;
  OpenAiSinkOptions opt_;
  bool started_ = false;  // the event stream is open
  ChatMessageOut message_;
  std::string completion_text_;
  std::chrono::steady_clock::time_point last_write_;
};

// OpenAI's finish_reason for a finished reply: "stop" (or "tool_calls" when the reply called
// tools, "function_call" when a `legacy` functions request did) for an end token or a stop
// string, "length" when the budget or the context ran out.
std::string openai_finish_reason(Finish f, bool has_tool_calls, bool legacy = false);

}  // namespace waste
