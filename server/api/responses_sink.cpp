#include "server/api/responses_sink.h"

#include <fmt/format.h>

#include "protocol/openai/error.h"
#include "server/api/job_failure.h"
#include "server/api/openai_sink.h"

namespace waste {

namespace {

constexpr const char* kJson = "application/json";
using Kind = OutputItem::Kind;

const char* prefix(Kind k) {
  return k == Kind::kReasoning ? "rs" : k == Kind::kMessage ? "msg" : "fc";
}

}  // namespace

ResponsesSink::ResponsesSink(std::shared_ptr<http::ResponseWriter> out, ResponseObject header,
                             bool stream)
    : out_(std::move(out)), r_(std::move(header)), stream_(stream) {}

void ResponsesSink::write(const char* type, const std::string& data) {
  out_->named_event(type, data);
}

void ResponsesSink::begin() {
  if (!stream_) return;
  out_->start_events(openai_keepalive());
  started_ = true;
  write("response.created", response_event("response.created", next_seq(), r_));
  write("response.in_progress", response_event("response.in_progress", next_seq(), r_));
}

void ResponsesSink::open_item(OutputItem item) {
  close_item();
  item.id = fmt::format("{}_{}_{}", prefix(item.kind), r_.id.substr(5), ids_++);
  r_.output.push_back(std::move(item));
  open_ = true;
  ended_ = false;
  if (!started_) return;
  const size_t at = r_.output.size() - 1;
  const OutputItem& it = r_.output.back();
  write("response.output_item.added", item_event("response.output_item.added", next_seq(), at, it));
  if (it.kind == Kind::kMessage)
    write("response.content_part.added",
          part_event("response.content_part.added", next_seq(), at, it));
  if (it.kind == Kind::kReasoning)
    write("response.reasoning_summary_part.added",
          part_event("response.reasoning_summary_part.added", next_seq(), at, it));
}

void ResponsesSink::close_item(bool cut) {
  if (!open_) return;
  open_ = false;
  OutputItem& it = r_.output.back();
  if (it.kind == Kind::kFunctionCall && it.arguments.empty()) it.arguments = "{}";
  it.done = true;
  it.cut = cut && !ended_;
  if (!started_) return;
  const size_t at = r_.output.size() - 1;
  switch (it.kind) {
    case Kind::kMessage:
      write("response.output_text.done",
            text_event("response.output_text.done", next_seq(), at, it, "text", it.text));
      write("response.content_part.done",
            part_event("response.content_part.done", next_seq(), at, it));
      break;
    case Kind::kReasoning:
      write(
          "response.reasoning_summary_text.done",
          text_event("response.reasoning_summary_text.done", next_seq(), at, it, "text", it.text));
      write("response.reasoning_summary_part.done",
            part_event("response.reasoning_summary_part.done", next_seq(), at, it));
      break;
    case Kind::kFunctionCall:
      write("response.function_call_arguments.done",
            text_event("response.function_call_arguments.done", next_seq(), at, it, "arguments",
                       it.arguments));
      break;
  }
  write("response.output_item.done", item_event("response.output_item.done", next_seq(), at, it));
}

// Text for an item of `kind`: into the open one of that kind, or a new one.
void ResponsesSink::append(Kind kind, const std::string& text) {
  if (text.empty()) return;
  if (!open_ || r_.output.back().kind != kind) {
    if (kind == Kind::kFunctionCall) return;  // arguments without a call: nothing to add to
    OutputItem item;
    item.kind = kind;
    open_item(std::move(item));
  }
  OutputItem& it = r_.output.back();
  (kind == Kind::kFunctionCall ? it.arguments : it.text) += text;
  if (!started_) return;
  const size_t at = r_.output.size() - 1;
  const char* type = kind == Kind::kMessage     ? "response.output_text.delta"
                     : kind == Kind::kReasoning ? "response.reasoning_summary_text.delta"
                                                : "response.function_call_arguments.delta";
  write(type, text_event(type, next_seq(), at, it, "delta", text));
}

void ResponsesSink::on_event(const ReplyEvent& e) {
  // A token's events follow it: the ones that produced reasoning text count as reasoning.
  if (e.kind == ReplyEvent::Kind::kReasoning) reasoning_tokens_ += unread_tokens_;
  unread_tokens_ = 0;
  switch (e.kind) {
    case ReplyEvent::Kind::kReasoning:
      return append(Kind::kReasoning, e.text);
    case ReplyEvent::Kind::kContent:
      return append(Kind::kMessage, e.text);
    case ReplyEvent::Kind::kToolCallStart: {
      OutputItem item;
      item.kind = Kind::kFunctionCall;
      item.call_id = e.id;
      item.name = e.name;
      return open_item(std::move(item));
    }
    case ReplyEvent::Kind::kToolCallArguments:
      return append(Kind::kFunctionCall, e.text);
    case ReplyEvent::Kind::kToolCallEnd:
      ended_ = open_ && !e.cut;
      return;  // the item stays open until the next one or end(), but a cut no longer reaches it
    case ReplyEvent::Kind::kEnd:
      if (e.end_of_message) ended_ = open_;
      return;
  }
}

void ResponsesSink::end(std::span<const DecodeResult> rs) {
  const DecodeResult& d = rs[0];
  const bool cut = d.finish == Finish::kLength;
  close_item(cut);
  r_.usage = true;
  r_.input_tokens = d.prompt_tokens;
  r_.cached_tokens = d.cached_tokens;
  r_.output_tokens = (int64_t)d.tokens.size();
  r_.reasoning_tokens = reasoning_tokens_;
  r_.status = cut ? "incomplete" : "completed";
  if (cut) r_.incomplete_reason = "max_output_tokens";
  if (!stream_) {
    out_->send(200, kJson, response_json(r_));
    return;
  }
  const char* type = cut ? "response.incomplete" : "response.completed";
  write(type, response_event(type, next_seq(), r_));
  out_->finish();
}

void ResponsesSink::fail(JobFailure failure, const std::string& message) {
  const HttpFailure f = http_failure(failure);
  if (!started_) {
    out_->send(f.status, kJson, openai_refusal_body(f.status, message, f.code));
    return;
  }
  r_.status = "failed";
  r_.error = message;
  write("error", error_event(next_seq(), message, f.code));
  write("response.failed", response_event("response.failed", next_seq(), r_));
  out_->finish();
}

}  // namespace waste
