#include "server/generation.h"
#include "engine/stopwatch.h"

#include <algorithm>

#include "engine/error.h"

namespace waste {

Generation::Generation(Model& m, const Tokenizer& tok, const ChatFormat* chat, PrefixCache& cache,
                       const WorkerOptions& opt, Job& job)
    : model_(m),
      tok_(tok),
      chat_(chat),
      cache_(cache),
      opt_(opt),
      job_(job),
      sampler_(job.params.sampler, m.config().vocab),
      stops_(job.params.stop),
      last_write_(SteadyClock::now()) {
  if (job.chat && chat)
    parser_ = chat->parser(job.thinking, sampler_.seed());
  else
    text_decoder_ = std::make_unique<StreamDecoder>(tok);
}

// Feeds prompt[from, to) in chunks, answering cancellation and keeping the stream alive.
bool Generation::feed(Session& s, size_t from, size_t to, float* logits) {
  const size_t chunk = (size_t)std::max(1, model_.options().chunk);
  for (size_t at = from; at < to; at += chunk) {
    if (job_.out->closed()) return false;
    size_t n = std::min(chunk, to - at);
    std::vector<EmbeddingOverride> embeds;  // image positions take tower rows
    if (job_.images) embeds = job_.images->overrides(at, n, model_.pool());
    model_.forward(s, std::span<const int32_t>(job_.prompt).subspan(at, n),
                   at + n == to ? logits : nullptr, embeds);
    if (!keep_alive()) return false;
  }
  return true;
}

bool Generation::keep_alive() {
  if (!job_.params.stream || SteadyClock::now() - last_write_ < opt_.keepalive) return true;
  last_write_ = SteadyClock::now();
  return job_.out->comment("prefill in progress");
}

bool Generation::prefill(Session& s, std::vector<float>& logits) {
  auto t0 = SteadyClock::now();
  const size_t n = job_.prompt.size();
  if (auto snap = cache_.longest_prefix(job_.prompt, media_keys(job_.images.get())))
    s = std::move(*snap);
  result_.usage.cached_tokens = s.pos();
  size_t at = (size_t)s.pos();
  if (job_.boundary > at && job_.boundary < n) {  // snapshot the last complete message
    if (!feed(s, at, job_.boundary, nullptr)) return false;
    cache_.put(s, media_keys(job_.images.get()));
    at = job_.boundary;
  }
  if (!feed(s, at, n, logits.data())) return false;
  result_.prefill_seconds = seconds_since(t0);
  return true;
}

bool Generation::write_chunk(const ChatDelta& d) {
  last_write_ = SteadyClock::now();
  return job_.out->event(chat_chunk_json(job_.header, d));
}

void Generation::on_text(const std::string& text) {
  std::string safe = stops_.push(text);
  if (safe.empty()) return;
  if (!job_.chat) {
    completion_text_ += safe;
    if (job_.params.stream) job_.out->event(completion_chunk_json(job_.header, safe, std::nullopt));
    return;
  }
  message_.content += safe;
  if (job_.params.stream) {
    ChatDelta d;
    d.content = safe;
    write_chunk(d);
  }
}

void Generation::on_reasoning(const std::string& text) {
  message_.reasoning += text;
  if (!job_.params.stream || text.empty()) return;
  ChatDelta d;
  d.reasoning = text;
  write_chunk(d);
}

void Generation::on_events(const std::vector<ReplyEvent>& events) {
  for (const ReplyEvent& e : events) {
    switch (e.kind) {
      case ReplyEvent::Kind::kReasoning:
        on_reasoning(e.text);
        break;
      case ReplyEvent::Kind::kContent:
        on_text(e.text);
        break;
      case ReplyEvent::Kind::kToolCallStart: {
        message_.tool_calls.push_back({e.id, e.name, ""});
        open_tool_ = (int)e.tool_index;
        if (job_.params.stream) {
          ChatDelta d;
          d.tool = ChatDelta::Tool{(int)e.tool_index, e.id, e.name, ""};
          write_chunk(d);
        }
        break;
      }
      case ReplyEvent::Kind::kToolCallArguments: {
        if (e.tool_index < message_.tool_calls.size())
          message_.tool_calls[e.tool_index].arguments += e.text;
        if (job_.params.stream && !e.text.empty()) {
          ChatDelta d;
          d.tool = ChatDelta::Tool{(int)e.tool_index, std::nullopt, std::nullopt, e.text};
          write_chunk(d);
        }
        break;
      }
      case ReplyEvent::Kind::kToolCallEnd:
      case ReplyEvent::Kind::kEnd:
        break;
    }
  }
}

void Generation::finish(const std::string& reason) {
  if (parser_) on_events(parser_->finish());
  if (text_decoder_) on_text(text_decoder_->flush());
  std::string tail = stops_.flush();
  if (!tail.empty()) {
    StopMatcher none({});
    stops_ = none;
    on_text(tail);
  }
  result_.finish_reason = reason;
  if (reason == "stop" && !message_.tool_calls.empty()) result_.finish_reason = "tool_calls";
  const Usage& u = result_.usage;
  if (!job_.params.stream) {
    std::string body =
        job_.chat ? chat_completion_json(job_.header, message_, result_.finish_reason, u)
                  : completion_json(job_.header, completion_text_, result_.finish_reason, u);
    job_.out->send(200, "application/json", std::move(body));
    return;
  }
  if (job_.chat) {
    ChatDelta d;
    d.finish_reason = result_.finish_reason;
    write_chunk(d);
    if (job_.params.include_usage) job_.out->event(chat_usage_chunk_json(job_.header, u));
  } else {
    job_.out->event(completion_chunk_json(job_.header, "", result_.finish_reason));
    if (job_.params.include_usage) job_.out->event(completion_usage_chunk_json(job_.header, u));
  }
  job_.out->event("[DONE]");
  job_.out->finish();
}

GenerationResult Generation::run() {
  result_.usage.prompt_tokens = (int64_t)job_.prompt.size();
  if (job_.params.stream) {
    job_.out->start_events();
    if (job_.chat) {
      ChatDelta d;
      d.role = true;
      write_chunk(d);
      role_sent_ = true;
    }
  }
  Session s = model_.new_session(opt_.ctx);
  std::vector<float> logits(model_.config().vocab);
  if (!prefill(s, logits)) {
    result_.cancelled = true;
    return result_;
  }
  auto t0 = SteadyClock::now();
  std::vector<int32_t> generated;
  const auto& ends = chat_ ? chat_->end_ids() : std::vector<int32_t>{};
  std::string reason = "length";
  size_t forced = 0;
  while ((int64_t)generated.size() < job_.max_new) {
    if (job_.out->closed()) {
      result_.cancelled = true;
      break;
    }
    int32_t id = forced < job_.forced.size() ? job_.forced[forced++] : sample(logits, generated);
    generated.push_back(id);
    bool end = std::find(ends.begin(), ends.end(), id) != ends.end() ||
               (model_.config().eos_token_id > 0 && id == model_.config().eos_token_id);
    if (parser_)
      on_events(parser_->push(id));
    else if (!end)
      on_text(text_decoder_->push(id));
    // A grammar with no end token of its own (the raw format) ends the reply when complete.
    if (end || stops_.stopped() || (job_.constraint && job_.constraint->done())) {
      reason = "stop";
      break;
    }
    if ((int64_t)generated.size() >= job_.max_new || s.room() == 0) break;
    model_.forward(s, std::span<const int32_t>(&generated.back(), 1), logits.data());
  }
  result_.decode_seconds = seconds_since(t0);
  result_.usage.completion_tokens = (int64_t)generated.size();
  if (!result_.cancelled) {
    cache_.put(s, media_keys(job_.images.get()));
    reason_ = reason;
    result_.finish_reason = reason;
    if (reason == "stop" && !message_.tool_calls.empty()) result_.finish_reason = "tool_calls";
  }
  return result_;
}

int32_t Generation::sample(const std::vector<float>& logits,
                           const std::vector<int32_t>& generated) {
  if (!job_.constraint) return sampler_.sample(logits, generated);
  mask_.resize(job_.constraint->mask_bytes());
  job_.constraint->mask(mask_.data());
  int32_t id = sampler_.sample(logits, generated, mask_.data());
  job_.constraint->accept(id);
  return id;
}

void Generation::deliver() {
  if (!result_.cancelled) finish(reason_);
}

}  // namespace waste
