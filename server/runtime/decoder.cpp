#include "server/runtime/decoder.h"

#include <algorithm>
#include <optional>

#include "engine/base/error.h"
#include "engine/base/stopwatch.h"
#include "server/runtime/stop_matcher.h"

namespace waste {

namespace {

// Passes the parser's events on, holding back content that may be the start of a stop string;
// what is held is released before the end event.
class StopFilter {
 public:
  StopFilter(const std::vector<std::string>& stops, ReplySink& sink) : stops_(stops), sink_(sink) {}

  void push(const std::vector<ReplyEvent>& events) {
    for (const ReplyEvent& e : events) {
      if (e.kind == ReplyEvent::Kind::kContent) {
        content(stops_.push(e.text));
        continue;
      }
      if (e.kind == ReplyEvent::Kind::kEnd) content(stops_.flush());
      sink_.on_event(e);
    }
  }
  bool stopped() const { return stops_.stopped(); }
  const std::string& matched() const { return stops_.matched(); }

 private:
  void content(std::string text) {
    if (text.empty()) return;
    ReplyEvent e;
    e.kind = ReplyEvent::Kind::kContent;
    e.text = std::move(text);
    sink_.on_event(e);
  }

  StopMatcher stops_;
  ReplySink& sink_;
};

}  // namespace

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::kEnd:
      return "end";
    case Finish::kStop:
      return "stop string";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
  }
  return "?";
}

Decoder::Decoder(Model& model, PrefixCache* cache)
    : own_gate_(std::make_unique<StepGate>(model)),
      gate_(*own_gate_),
      model_(model),
      cache_(cache) {}

Decoder::Decoder(StepGate& gate, PrefixCache* cache)
    : gate_(gate), model_(gate.model()), cache_(cache) {}

bool Decoder::feed(Session& s, const DecodeInput& in, size_t from, size_t to, float* logits,
                   ReplySink& sink) {
  const size_t chunk = (size_t)std::max(1, model_.options().chunk);
  for (size_t at = from; at < to; at += chunk) {
    if (sink.cancelled()) return false;
    size_t n = std::min(chunk, to - at);
    std::vector<EmbeddingOverride> embeds;  // image positions take tower rows
    if (in.images)
      member_->with_pool([&](ThreadPool& pool) { embeds = in.images->overrides(at, n, pool); });
    member_->forward(s, std::span<const int32_t>(in.prompt).subspan(at, n),
                     at + n == to ? logits : nullptr, embeds);
    sink.prefill_progress(at + n, in.prompt.size());
  }
  return true;
}

bool Decoder::prefill(Session& s, const DecodeInput& in, ReplySink& sink, DecodeResult& r) {
  auto t0 = SteadyClock::now();
  const std::vector<int32_t>& p = in.prompt;
  if (p.empty()) fail<UsageError>("the prompt is empty");
  const std::span<const uint64_t> keys = media_keys(in.images.get());
  if (in.score_prompt) {
    s = model_.new_session(s.ctx());
    if (!score(s, in, sink)) return false;
    r.prefill_seconds = seconds_since(t0);
    return true;
  }
  const bool continues = !s.broken && s.tokens.size() < p.size() &&
                         std::equal(s.tokens.begin(), s.tokens.end(), p.begin());
  if (!continues) s = model_.new_session(s.ctx());
  std::optional<PrefixCache::Claim> claim;
  if (cache_) {
    StepGate::Member::Away away(*member_);
    // A prefix another conversation is computing now is waited for, not computed beside it.
    do {
      if (auto snap = cache_->longest_prefix(p, keys); snap && snap->pos() > s.pos())
        s = std::move(*snap);
    } while (!(claim = cache_->claim(p, keys, (size_t)s.pos(), in.snapshots)));
  }
  r.cached_tokens = s.pos();
  size_t at = (size_t)s.pos();
  for (size_t point : in.snapshots) {
    if (!cache_ || point <= at || point >= p.size()) continue;
    if (!feed(s, in, at, point, nullptr, sink)) return keep_partial(s, keys, at);
    {
      StepGate::Member::Away away(*member_);
      cache_->put(s, keys);
    }
    claim->reached(point);
    at = point;
  }
  if (!feed(s, in, at, p.size(), logits_.data(), sink)) return keep_partial(s, keys, at);
  r.prefill_seconds = seconds_since(t0);
  return true;
}

// A prefill cut short keeps what it computed: the session ends at its last finished window, a
// prefix of the prompt, so the retry of the same request restores it and computes only the rest
// (a client that times out during a long first prompt gets further on each try).
bool Decoder::keep_partial(const Session& s, std::span<const uint64_t> media, size_t kept) {
  StepGate::Member::Away away(*member_);
  if (cache_ && (size_t)s.pos() > kept) cache_->put(s, media, SnapshotKind::kPartial);
  return false;
}

bool Decoder::score(Session& s, const DecodeInput& in, ReplySink& sink) {
  Sampler scorer(in.sampler, model_.config().vocab);
  const std::vector<int32_t>& p = in.prompt;
  sink.on_prompt_token(p[0], nullptr);
  for (size_t at = 0; at < p.size(); at++) {
    if (sink.cancelled()) return false;
    member_->forward(s, std::span<const int32_t>(&p[at], 1), logits_.data());
    sink.prefill_progress(at + 1, p.size());
    if (at + 1 < p.size()) sink.on_prompt_token(p[at + 1], &scorer.score(logits_, {}, p[at + 1]));
  }
  return true;
}

int32_t Decoder::next_token(DecodeInput& in, Sampler& sampler,
                            const std::vector<int32_t>& generated) {
  if (!in.constraint) return sampler.sample(logits_, generated);
  mask_.resize(in.constraint->mask_bytes());
  in.constraint->mask(mask_.data());
  int32_t id = sampler.sample(logits_, generated, mask_.data());
  in.constraint->accept(id);
  return id;
}

DecodeResult Decoder::run(Session& s, DecodeInput& in, ReplyParser* parser, ReplySink& sink) {
  ReplyParser* const one[] = {parser};
  return std::move(run(s, in, one, sink).front());
}

std::vector<DecodeResult> Decoder::run(Session& s, DecodeInput& in,
                                       std::span<ReplyParser* const> parsers, ReplySink& sink) {
  if (parsers.empty()) fail<UsageError>("a generation needs at least one reply");
  StepGate::Member member(gate_);
  member_ = &member;
  struct Seat {  // member_ never outlives the membership, whatever run() throws
    StepGate::Member*& m;
    ~Seat() { m = nullptr; }
  } seat{member_};
  std::vector<DecodeResult> out(1);
  out[0].prompt_tokens = (int64_t)in.prompt.size();
  logits_.assign((size_t)model_.config().vocab, 0.0f);
  if (!prefill(s, in, sink, out[0])) {
    out[0].finish = Finish::kCancelled;
    return out;
  }
  // What every reply after the first starts from.
  std::optional<Session> prompt_state;
  std::vector<float> prompt_logits;
  std::unique_ptr<TokenConstraint> fresh;
  if (parsers.size() > 1) {
    prompt_state = s;
    prompt_logits = logits_;
    if (in.constraint) fresh = std::make_unique<TokenConstraint>(*in.constraint);
  }
  const std::optional<uint64_t> seed = in.sampler.seed;
  for (size_t i = 0; i < parsers.size(); i++) {
    if (i > 0) {
      s = *prompt_state;
      logits_ = prompt_logits;
      if (fresh) in.constraint = std::make_unique<TokenConstraint>(*fresh);
      if (seed) in.sampler.seed = *seed + i;
      out.push_back(DecodeResult{});
      out[i].prompt_tokens = out[0].prompt_tokens;
      out[i].cached_tokens = out[0].cached_tokens;
      sink.begin_choice(i);
    }
    decode(s, in, parsers[i], sink, out[i]);
    if (out[i].finish == Finish::kCancelled) break;
  }
  in.sampler.seed = seed;
  return out;
}

void Decoder::decode(Session& s, DecodeInput& in, ReplyParser* parser, ReplySink& sink,
                     DecodeResult& r) {
  Sampler sampler(in.sampler, model_.config().vocab);
  r.seed = sampler.seed();
  auto t0 = SteadyClock::now();
  StopFilter out(in.stop, sink);
  size_t forced = 0;
  r.finish = Finish::kLength;
  while ((int64_t)r.tokens.size() < in.max_new) {
    if (sink.cancelled()) {
      r.finish = Finish::kCancelled;
      break;
    }
    const bool sampled = forced >= in.forced.size();
    int32_t id = sampled ? next_token(in, sampler, r.tokens) : in.forced[forced++];
    r.tokens.push_back(id);
    const bool report = sampled && in.sampler.logprobs >= 0;
    sink.on_token(id, report ? &sampler.last_logprobs() : nullptr);
    const bool end = std::find(in.end_ids.begin(), in.end_ids.end(), id) != in.end_ids.end();
    if (parser) out.push(parser->push(id));
    // A grammar with no end token of its own (the raw format) ends the reply when complete.
    if (end || out.stopped() || (in.constraint && in.constraint->done())) {
      r.finish = out.stopped() ? Finish::kStop : Finish::kEnd;
      r.stop = out.matched();
      break;
    }
    // The prompt and the whole reply fit the context (the reply's last token is never fed).
    if ((int64_t)r.tokens.size() >= in.max_new || s.room() <= 1) break;
    member_->forward(s, std::span<const int32_t>(&r.tokens.back(), 1), logits_.data());
  }
  r.decode_seconds = seconds_since(t0);
  if (r.finish == Finish::kCancelled) return;
  // The rest of a promised call's opening is not generated: r.tokens and usage leave it out.
  if (parser && r.finish == Finish::kLength && in.call_opening_rest &&
      parser->reply().tool_calls.empty())
    for (int32_t id : in.call_opening_rest(r.tokens)) out.push(parser->push(id));
  if (parser) out.push(parser->finish());
  StepGate::Member::Away away(*member_);
  if (cache_) cache_->put(s, media_keys(in.images.get()));
}

}  // namespace waste
