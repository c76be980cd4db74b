// A generation's output in the Responses API's shapes: one response object, or the typed event
// stream (response.created and .in_progress, then per output item its added event, its text or
// arguments deltas and done events, then response.completed or .incomplete). The think channel
// becomes a reasoning item (its text as a summary part), content a message item with one
// output_text part, each tool call a function_call item.
#pragma once

#include <memory>
#include <string>

#include "protocol/openai/responses_response.h"
#include "server/http/http.h"
#include "server/runtime/engine_worker.h"

namespace waste {

class ResponsesSink final : public JobSink {
 public:
  ResponsesSink(std::shared_ptr<http::ResponseWriter> out, ResponseObject header, bool stream);

  bool cancelled() override { return out_->closed(); }
  void on_event(const ReplyEvent& e) override;
  void on_token(int32_t, const TokenLogprobs*) override { unread_tokens_++; }
  void begin() override;
  void end(std::span<const DecodeResult> replies) override;
  void fail(JobFailure failure, const std::string& message) override;

 private:
  void open_item(OutputItem item);
  // Finishes the open item: status "incomplete" when the reply was cut in it.
  void close_item(bool cut = false);
  void append(OutputItem::Kind kind, const std::string& text);
  void write(const char* type, const std::string& data);
  int64_t next_seq() { return seq_++; }

  std::shared_ptr<http::ResponseWriter> out_;
  ResponseObject r_;
  bool stream_;
  bool started_ = false;
  // r_.output.back() is not finished yet: it may still receive text, and the item open when the
  // reply ends is the one a cut left incomplete, so only the next item or end() closes it.
  bool open_ = false;
  // The open item's end arrived (a call's kToolCallEnd, the model's end token): a budget that runs
  // out before the next item or end() cut nothing in it, so it closes completed.
  bool ended_ = false;
  int64_t seq_ = 0;
  size_t ids_ = 0;             // output items numbered so far, for their ids
  int64_t unread_tokens_ = 0;  // tokens chosen since the last event
  int64_t reasoning_tokens_ = 0;
};

}  // namespace waste
