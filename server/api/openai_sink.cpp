#include "server/api/openai_sink.h"

#include <cmath>

#include "protocol/openai/error.h"
#include "server/api/job_failure.h"

namespace waste {

namespace {

constexpr const char* kJson = "application/json";

int64_t code_points(const std::string& text) {
  int64_t n = 0;
  for (unsigned char b : text) n += (b & 0xC0) != 0x80;
  return n;
}

}  // namespace

http::Keepalive openai_keepalive() {
  return {"", "keepalive"};
}

std::string openai_finish_reason(Finish f, bool has_tool_calls, bool legacy) {
  if (f == Finish::kLength) return "length";
  if (!has_tool_calls) return "stop";
  return legacy ? "function_call" : "tool_calls";
}

OpenAiSink::OpenAiSink(std::shared_ptr<http::ResponseWriter> out, ResponseHeader header,
                       OpenAiSinkOptions options)
    : out_(std::move(out)), header_(std::move(header)), opt_(std::move(options)), choices_(1) {
  choices_[0].message.legacy_function_call = opt_.legacy_functions;
}

void OpenAiSink::begin() {
  if (!opt_.stream) return;
  out_->start_events(openai_keepalive());
  started_ = true;
  if (opt_.chat) {
    ChatDelta d;
    d.role = true;
    write_chunk(d);
  }
}

// Replies may take turns (several decoded at once): a new index opens its choice (a stream says
// its role), a known one makes it current again.
void OpenAiSink::begin_choice(size_t index) {
  current_ = index;
  if (index < choices_.size()) return;
  choices_.resize(index + 1);
  choices_.back().message.legacy_function_call = opt_.legacy_functions;
  if (opt_.stream && opt_.chat) {
    ChatDelta d;
    d.role = true;
    write_chunk(d);
  }
}

// JSON has no -inf: an impossible token is written as OpenAI writes one, -9999.
double json_logprob(float lp) {
  return std::isfinite(lp) ? (double)lp : -9999.0;
}

TokenLogprobOut OpenAiSink::entry(const TokenLogprobs& lp) const {
  TokenLogprobOut t;
  t.bytes = std::string(opt_.logprobs->token_bytes(lp.id));
  t.logprob = json_logprob(lp.logprob);
  for (auto [id, logprob] : lp.top)
    t.top.push_back({std::string(opt_.logprobs->token_bytes(id)), json_logprob(logprob)});
  return t;
}

void OpenAiSink::on_prompt_token(int32_t id, const TokenLogprobs* lp) {
  if (!opt_.logprobs) return;
  if (lp) {
    prompt_logprobs_.push_back(entry(*lp));
    return;
  }
  TokenLogprobOut first;  // nothing comes before the first prompt token: no probability
  first.bytes = std::string(opt_.logprobs->token_bytes(id));
  prompt_logprobs_.push_back(std::move(first));
}

void OpenAiSink::on_token(int32_t id, const TokenLogprobs* lp) {
  if (!lp || !opt_.logprobs) return;
  // Chat structure (the think markers, the turn's end) is not content.
  if (opt_.chat && opt_.logprobs->is_special(id)) return;
  current().pending.push_back(entry(*lp));
}

std::optional<std::vector<TokenLogprobOut>> OpenAiSink::take_pending() {
  if (!opt_.logprobs) return std::nullopt;
  std::vector<TokenLogprobOut> out = std::move(current().pending);
  current().pending.clear();
  return out;
}

void OpenAiSink::write_chunk(ChatDelta d) {
  d.index = (int)current_;
  d.legacy_function_call = opt_.legacy_functions;
  out_->event(chat_chunk_json(header_, d));
}

// A completion's text (and its tokens' log-probabilities): kept, and streamed as one chunk.
void OpenAiSink::echo_once() {
  Choice& c = current();
  if (!opt_.echo || c.echoed) return;
  c.echoed = true;
  std::vector<TokenLogprobOut> held = std::move(c.pending);
  c.pending = prompt_logprobs_;
  on_text(*opt_.echo);
  current().pending = std::move(held);
}

void OpenAiSink::on_text(const std::string& text) {
  if (text.empty()) return;
  echo_once();
  Choice& c = current();
  std::optional<std::vector<TokenLogprobOut>> lp = take_pending();
  if (lp) c.logprobs.insert(c.logprobs.end(), lp->begin(), lp->end());
  if (!opt_.chat) {
    c.text += text;
    if (opt_.stream) {
      CompletionChoiceOut chunk{text, "", std::move(lp), c.text_offset};
      out_->event(completion_chunk_json(header_, (int)current_, chunk));
    }
    c.text_offset += code_points(text);
    return;
  }
  c.message.content += text;
  if (opt_.stream) {
    ChatDelta d;
    d.content = text;
    d.logprobs = std::move(lp);
    write_chunk(d);
  }
}

void OpenAiSink::on_event(const ReplyEvent& e) {
  if (e.kind != ReplyEvent::Kind::kContent) current().pending.clear();
  ChatMessageOut& m = current().message;
  switch (e.kind) {
    case ReplyEvent::Kind::kReasoning: {
      m.reasoning += e.text;
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
      m.tool_calls.push_back({e.id, e.name, ""});
      if (!opt_.stream) return;
      ChatDelta d;
      d.tool = ChatDelta::Tool{(int)e.tool_index, e.id, e.name, ""};
      write_chunk(d);
      return;
    }
    case ReplyEvent::Kind::kToolCallArguments: {
      if (e.tool_index < m.tool_calls.size()) m.tool_calls[e.tool_index].arguments += e.text;
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

void OpenAiSink::end(std::span<const DecodeResult> rs) {
  for (size_t i = 0; i < choices_.size(); i++) {  // a reply that wrote no text still shows the
    current_ = i;                                 // prompt
    echo_once();
  }
  Usage u;
  u.prompt_tokens = rs[0].prompt_tokens;  // prefilled once for every reply
  u.cached_tokens = rs[0].cached_tokens;
  for (const DecodeResult& r : rs) u.completion_tokens += (int64_t)r.tokens.size();
  std::vector<std::string> reasons;
  for (size_t i = 0; i < rs.size() && i < choices_.size(); i++)
    reasons.push_back(openai_finish_reason(rs[i].finish, !choices_[i].message.tool_calls.empty(),
                                           opt_.legacy_functions));
  if (!opt_.stream) {
    std::string body;
    if (opt_.chat) {
      std::vector<ChatChoiceOut> out;
      for (size_t i = 0; i < reasons.size(); i++) {
        out.push_back({choices_[i].message, reasons[i], std::nullopt});
        if (opt_.logprobs) out.back().logprobs = choices_[i].logprobs;
      }
      body = chat_completion_json(header_, out, u);
    } else {
      std::vector<CompletionChoiceOut> out;
      for (size_t i = 0; i < reasons.size(); i++) {
        out.push_back({choices_[i].text, reasons[i], std::nullopt, 0});
        if (opt_.logprobs) out.back().logprobs = choices_[i].logprobs;
      }
      body = completion_json(header_, out, u);
    }
    out_->send(200, kJson, std::move(body));
    return;
  }
  for (size_t i = 0; i < reasons.size(); i++) {
    if (opt_.chat) {
      ChatDelta d;
      d.index = (int)i;
      d.finish_reason = reasons[i];
      d.legacy_function_call = opt_.legacy_functions;
      out_->event(chat_chunk_json(header_, d));
    } else {
      out_->event(completion_chunk_json(header_, (int)i, {"", reasons[i], std::nullopt, 0}));
    }
  }
  if (opt_.include_usage)
    out_->event(opt_.chat ? chat_usage_chunk_json(header_, u)
                          : completion_usage_chunk_json(header_, u));
  out_->event("[DONE]");
  out_->finish();
}

void OpenAiSink::fail(JobFailure failure, const std::string& message) {
  const HttpFailure f = http_failure(failure);
  std::string body = openai_refusal_body(f.status, message, f.code);
  if (!started_) {
    out_->send(f.status, kJson, body);
    return;
  }
  out_->event(body);
  out_->event("[DONE]");
  out_->finish();
}

}  // namespace waste
