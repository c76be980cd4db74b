#include "server/api/anthropic_sink.h"

#include "protocol/api_error.h"
#include "protocol/json/json_reader.h"
#include "server/api/job_failure.h"

namespace waste {

namespace {

constexpr const char* kJson = "application/json";
using Kind = ContentBlockOut::Kind;

AnthropicUsage usage_of(const DecodeResult& r) {
  AnthropicUsage u;
  u.input_tokens = r.prompt_tokens - r.cached_tokens;
  u.cache_read_input_tokens = r.cached_tokens;
  u.output_tokens = (int64_t)r.tokens.size();
  return u;
}

// A tool_use input must be an object; the reply parsers close what they write, so anything
// else is a bug, answered as the empty object rather than as broken JSON.
std::string object_or_empty(const std::string& json) {
  try {
    json::Body object(json);  // refuses anything but an object
  } catch (const json::FieldError&) {
    return "{}";
  }
  return json;
}

}  // namespace

StopOut anthropic_stop(const DecodeResult& r, bool has_tool_calls) {
  switch (r.finish) {
    case Finish::kLength:
      return {"max_tokens", std::nullopt};
    case Finish::kStop:
      return {"stop_sequence", r.stop};
    default:
      return {has_tool_calls ? "tool_use" : "end_turn", std::nullopt};
  }
}

AnthropicSink::AnthropicSink(std::shared_ptr<http::ResponseWriter> out, AnthropicHeader header,
                             AnthropicSinkOptions options)
    : out_(std::move(out)), header_(std::move(header)), opt_(options) {}

void AnthropicSink::write(const char* name, const std::string& data) {
  out_->named_event(name, data);
}

void AnthropicSink::begin() {
  if (!opt_.stream) return;
  out_->start_events({"ping", ping_json()});
  started_ = true;
  AnthropicUsage u;
  u.input_tokens = opt_.prompt_tokens;
  write("message_start", message_start_json(header_, u));
}

void AnthropicSink::start_block(ContentBlockOut b) {
  close_block();
  if (b.kind == Kind::kToolUse) b.input_json.clear();
  blocks_.push_back(std::move(b));
  open_ = true;
  if (started_) write("content_block_start", block_start_json(blocks_.size() - 1, blocks_.back()));
}

void AnthropicSink::close_block() {
  if (!open_) return;
  open_ = false;
  ContentBlockOut& b = blocks_.back();
  if (b.kind == Kind::kToolUse) b.input_json = object_or_empty(b.input_json);
  if (started_) write("content_block_stop", block_stop_json(blocks_.size() - 1));
}

// Text of `kind`: into the open block of that kind, or a new one.
void AnthropicSink::append(Kind kind, const std::string& text) {
  if (text.empty()) return;
  if (!open_ || blocks_.back().kind != kind) {
    ContentBlockOut b;
    b.kind = kind;
    start_block(std::move(b));
  }
  ContentBlockOut& b = blocks_.back();
  (kind == Kind::kToolUse ? b.input_json : b.text) += text;
  if (started_) write("content_block_delta", block_delta_json(blocks_.size() - 1, kind, text));
}

void AnthropicSink::on_event(const ReplyEvent& e) {
  switch (e.kind) {
    case ReplyEvent::Kind::kReasoning:
      if (!opt_.omit_thinking) return append(Kind::kThinking, e.text);
      if (!open_ || blocks_.back().kind != Kind::kThinking) {
        ContentBlockOut b;
        b.kind = Kind::kThinking;
        start_block(std::move(b));
      }
      return;
    case ReplyEvent::Kind::kContent:
      return append(Kind::kText, e.text);
    case ReplyEvent::Kind::kToolCallStart: {
      ContentBlockOut b;
      b.kind = Kind::kToolUse;
      b.id = e.id;
      b.name = e.name;
      return start_block(std::move(b));
    }
    case ReplyEvent::Kind::kToolCallArguments:
      if (open_ && blocks_.back().kind == Kind::kToolUse) append(Kind::kToolUse, e.text);
      return;
    case ReplyEvent::Kind::kToolCallEnd:
    case ReplyEvent::Kind::kEnd:
      return close_block();
  }
}

void AnthropicSink::end(std::span<const DecodeResult> rs) {
  close_block();
  const DecodeResult& r = rs[0];
  bool calls = false;
  for (const ContentBlockOut& b : blocks_) calls = calls || b.kind == Kind::kToolUse;
  const StopOut stop = anthropic_stop(r, calls);
  if (!opt_.stream) {
    out_->send(200, kJson, anthropic_message_json(header_, blocks_, stop, usage_of(r)));
    return;
  }
  write("message_delta", message_delta_json(stop, usage_of(r)));
  write("message_stop", message_stop_json());
  out_->finish();
}

void AnthropicSink::fail(JobFailure failure, const std::string& message) {
  const int status = http_failure(failure).status;
  std::string body = anthropic_error_body(status, message);
  if (!started_) {
    out_->send(status, kJson, body);
    return;
  }
  write("error", body);
  out_->finish();
}

}  // namespace waste
