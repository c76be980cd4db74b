// A generation's output in Anthropic's Messages shapes: one message body, or the named event
// stream (message_start, each content block's start, deltas and stop, message_delta,
// message_stop), with a ping event whenever
// it falls silent (a long prefill: see http::Keepalive). Reasoning becomes a thinking block,
// content a text block, each tool call a tool_use block whose input streams as JSON pieces.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "protocol/anthropic/messages_response.h"
#include "server/http/http.h"
#include "server/runtime/engine_worker.h"

namespace waste {

struct AnthropicSinkOptions {
  bool stream = false;
  int64_t prompt_tokens = 0;   // for message_start, before the prefill says what was cached
  bool omit_thinking = false;  // a thinking block is opened and closed, its text left out
};

class AnthropicSink final : public JobSink {
 public:
  AnthropicSink(std::shared_ptr<http::ResponseWriter> out, AnthropicHeader header,
                AnthropicSinkOptions options);

  bool cancelled() override { return out_->closed(); }
  void on_event(const ReplyEvent& e) override;
  void begin() override;
  void end(std::span<const DecodeResult> replies) override;
  void fail(JobFailure failure, const std::string& message) override;

 private:
  void append(ContentBlockOut::Kind kind, const std::string& text);
  void start_block(ContentBlockOut b);
  void close_block();
  void write(const char* name, const std::string& data);

  std::shared_ptr<http::ResponseWriter> out_;
  AnthropicHeader header_;
  AnthropicSinkOptions opt_;
  bool started_ = false;  // the event stream is open
  std::vector<ContentBlockOut> blocks_;
  bool open_ = false;  // blocks_.back() is still receiving
};

// Anthropic's stop_reason for a finished reply.
StopOut anthropic_stop(const DecodeResult& r, bool has_tool_calls);

}  // namespace waste
