#include "server/api/openai_sink.h"

#include "engine/base/stopwatch.h"
#include "protocol/openai/error.h"

namespace waste {

namespace {
constexpr const char* kJson = "application/json";
}

std::string openai_finish_reason(Finish f, bool has_tool_calls, bool legacy) {
  if (f == Finish::kLength) return "length";
  if (!has_tool_calls) return "stop";
  return legacy ? "function_call" : "tool_calls";
}

OpenAiSink::OpenAiSink(std::shared_ptr<http::ResponseWriter> out, ResponseHeader header,
                       OpenAiSinkOptions options)
    : out_(std::move(out)),
      header_(std::move(header)),
      opt_(options),
      last_write_(SteadyClock::now()) {
  message_.legacy_function_call = opt_.legacy_functions;
}

void OpenAiSink::begin() {
  if (!opt_.stream) return;
  out_->start_events();
  started_ = true;
  if (opt_.chat) {
    ChatDelta d;
    d.role = true;
    write_chunk(d);
  }
}

void OpenAiSink::prefill_progress(size_t, size_t) {
  if (!started_ || SteadyClock::now() - last_write_ < opt_.keepalive) return;
  last_write_ = SteadyClock::now();
  out_->comment("prefill in progress");
}

void OpenAiSink::write_chunk(ChatDelta d) {
  last_write_ = SteadyClock::now();
  d.legacy_function_call = opt_.legacy_functions;
  out_->event(chat_chunk_json(header_, d));
}

void OpenAiSink::on_text(const std::string& text) {
  if (text.empty()) return;
  if (!opt_.chat) {
    completion_text_ += text;
    if (opt_.stream) out_->event(completion_chunk_json(header_, text, std::nullopt));
    return;
  }
  message_.content += text;
  if (opt_.stream) {
    ChatDelta d;
    d.content = text;
    write_chunk(d);
  }
}

void OpenAiSink::on_event(const ReplyEvent& e) {
  switch (e.kind) {
    case ReplyEvent::Kind::kReasoning: {
      message_.reasoning += e.text;
      if (!opt_.stream || e.text.empty()) return;
      ChatDelta d;
      d.reasoning = e.text;
      write_chunk(d);
      return;
    }
    case ReplyEvent::Kind::kContent:
      on_text(e.text);
      return;
    case ReplyEvent::Kind::kToolCallStart: {
      message_.tool_calls.push_back({e.id, e.name, ""});
      if (!opt_.stream) return;
      ChatDelta d;
      d.tool = ChatDelta::Tool{(int)e.tool_index, e.id, e.name, ""};
      write_chunk(d);
      return;
    }
    case ReplyEvent::Kind::kToolCallArguments: {
      if (e.tool_index < message_.tool_calls.size())
        message_.tool_calls[e.tool_index].arguments += e.text;
      if (!opt_.stream || e.text.empty()) return;
      ChatDelta d;
      d.tool = ChatDelta::Tool{(int)e.tool_index, std::nullopt, std::nullopt, e.text};
      write_chunk(d);
      return;
    }
    case ReplyEvent::Kind::kToolCallEnd:
    case ReplyEvent::Kind::kEnd:
      return;
  }
}

void OpenAiSink::end(const DecodeResult& r) {
  const std::string reason =
      openai_finish_reason(r.finish, !message_.tool_calls.empty(), opt_.legacy_functions);
  Usage u;
  u.prompt_tokens = r.prompt_tokens;
  u.completion_tokens = (int64_t)r.tokens.size();
  u.cached_tokens = r.cached_tokens;
  if (!opt_.stream) {
    std::string body = opt_.chat ? chat_completion_json(header_, message_, reason, u)
                                 : completion_json(header_, completion_text_, reason, u);
    out_->send(200, kJson, std::move(body));
    return;
  }
  if (opt_.chat) {
    ChatDelta d;
    d.finish_reason = reason;
    write_chunk(d);
    if (opt_.include_usage) out_->event(chat_usage_chunk_json(header_, u));
  } else {
    out_->event(completion_chunk_json(header_, "", reason));
    if (opt_.include_usage) out_->event(completion_usage_chunk_json(header_, u));
  }
  out_->event("[DONE]");
  out_->finish();
}

void OpenAiSink::fail(int status, const std::string& message, const std::string& code) {
  std::string body = openai_refusal_body(status, message, code);
  if (!started_) {
    out_->send(status, kJson, body);
    return;
  }
  out_->event(body);
  out_->event("[DONE]");
  out_->finish();
}

}  // namespace waste
