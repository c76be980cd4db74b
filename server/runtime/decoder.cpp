#include "server/runtime/decoder.h"

#include <algorithm>
#include <mutex>
#include <optional>
#include <thread>

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
      main_.member->with_pool(
          [&](ThreadPool& pool) { embeds = in.images->overrides(at, n, pool); });
    main_.member->forward(s, std::span<const int32_t>(in.prompt).subspan(at, n),
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
    StepGate::Member::Away away(*main_.member);
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
      StepGate::Member::Away away(*main_.member);
      cache_->put(s, keys);
    }
    claim->reached(point);
    at = point;
  }
  if (!feed(s, in, at, p.size(), main_.logits.data(), sink)) return keep_partial(s, keys, at);
  r.prefill_seconds = seconds_since(t0);
  return true;
}

// A prefill cut short keeps what it computed: the session ends at its last finished window, a
// prefix of the prompt, so the retry of the same request restores it and computes only the rest
// (a client that times out during a long first prompt gets further on each try).
bool Decoder::keep_partial(const Session& s, std::span<const uint64_t> media, size_t kept) {
  StepGate::Member::Away away(*main_.member);
  if (cache_ && (size_t)s.pos() > kept) cache_->put(s, media, SnapshotKind::kPartial);
  return false;
}

bool Decoder::score(Session& s, const DecodeInput& in, ReplySink& sink) {
  Sampler scorer(in.sampler, model_.config().vocab);
  const std::vector<int32_t>& p = in.prompt;
  sink.on_prompt_token(p[0], nullptr);
  for (size_t at = 0; at < p.size(); at++) {
    if (sink.cancelled()) return false;
    main_.member->forward(s, std::span<const int32_t>(&p[at], 1), main_.logits.data());
    sink.prefill_progress(at + 1, p.size());
    if (at + 1 < p.size())
      sink.on_prompt_token(p[at + 1], &scorer.score(main_.logits, {}, p[at + 1]));
  }
  return true;
}

int32_t Decoder::next_token(Lane& lane, DecodeInput& in, Sampler& sampler,
                            const std::vector<int32_t>& generated) {
  if (!in.constraint) return sampler.sample(lane.logits, generated);
  lane.mask.resize(in.constraint->mask_bytes());
  in.constraint->mask(lane.mask.data());
  int32_t id = sampler.sample(lane.logits, generated, lane.mask.data());
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
  main_.member = &member;
  struct Seat {  // the lane never outlives the membership, whatever run() throws
    StepGate::Member*& m;
    ~Seat() { m = nullptr; }
  } seat{main_.member};
  std::vector<DecodeResult> out(1);
  out[0].prompt_tokens = (int64_t)in.prompt.size();
  main_.logits.assign((size_t)model_.config().vocab, 0.0f);
  if (!prefill(s, in, sink, out[0])) {
    out[0].finish = Finish::kCancelled;
    return out;
  }
  if (parsers.size() == 1) {
    decode(main_, s, in, parsers[0], sink, out[0]);
    return out;
  }
  const Session prompt_state = s;  // what every reply after the first starts from
  more_replies(prompt_state, in, parsers, sink, out);
  return out;
}

namespace {

// Reply `i`'s input: the prompt's rules with a fresh copy of the constraint and the seed plus i.
DecodeInput reply_input(const DecodeInput& in, const TokenConstraint* fresh, size_t i) {
  DecodeInput r;
  r.images = in.images;
  r.forced = in.forced;
  if (fresh) r.constraint = std::make_unique<TokenConstraint>(*fresh);
  r.call_opening_rest = in.call_opening_rest;
  r.end_ids = in.end_ids;
  r.stop = in.stop;
  r.sampler = in.sampler;
  if (r.sampler.seed) *r.sampler.seed += i;
  r.max_new = in.max_new;
  return r;
}

// One of several replies decoded at once: its calls reach the shared sink one at a time, each
// after switching the sink to this reply's choice.
class ChoiceSink final : public ReplySink {
 public:
  ChoiceSink(ReplySink& inner, std::mutex& mu, size_t& current, size_t index)
      : inner_(inner), mu_(mu), current_(current), index_(index) {}
  bool cancelled() override {
    std::lock_guard<std::mutex> lock(mu_);
    return inner_.cancelled();
  }
  void on_event(const ReplyEvent& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    select();
    inner_.on_event(e);
  }
  void on_token(int32_t id, const TokenLogprobs* lp) override {
    std::lock_guard<std::mutex> lock(mu_);
    select();
    inner_.on_token(id, lp);
  }

 private:
  void select() {
    if (current_ != index_) inner_.begin_choice(current_ = index_);
  }

  ReplySink& inner_;
  std::mutex& mu_;
  size_t& current_;
  const size_t index_;
};

}  // namespace

// The replies after the first (out[0] holds the first's prefill figures). One after another;
// or, to a sink that interleaves, all at once, each on its own thread and seat at the gate.
void Decoder::more_replies(const Session& prompt, DecodeInput& in,
                           std::span<ReplyParser* const> parsers, ReplySink& sink,
                           std::vector<DecodeResult>& out) {
  const size_t n = parsers.size();
  const std::unique_ptr<TokenConstraint> fresh =
      in.constraint ? std::make_unique<TokenConstraint>(*in.constraint) : nullptr;
  std::vector<DecodeInput> inputs;
  inputs.reserve(n);
  inputs.push_back(std::move(in));
  for (size_t i = 1; i < n; i++) inputs.push_back(reply_input(inputs[0], fresh.get(), i));
  out.resize(n);
  for (size_t i = 1; i < n; i++) {
    out[i].prompt_tokens = out[0].prompt_tokens;
    out[i].cached_tokens = out[0].cached_tokens;
  }
  const std::vector<float> prompt_logits = main_.logits;
  if (!sink.interleaves()) {
    for (size_t i = 0; i < n; i++) {
      Session s = prompt;
      main_.logits = prompt_logits;
      if (i > 0) sink.begin_choice(i);
      decode(main_, s, inputs[i], parsers[i], sink, out[i]);
      if (out[i].finish == Finish::kCancelled) {
        out.resize(i + 1);
        break;
      }
    }
  } else {
    for (size_t i = 1; i < n; i++) sink.begin_choice(i);  // each choice opens in order
    std::mutex mu;
    size_t current = n - 1;
    std::vector<std::exception_ptr> errors(n);
    auto reply = [&](size_t i, Lane& lane) {
      try {
        Session s = prompt;
        ChoiceSink cs(sink, mu, current, i);
        decode(lane, s, inputs[i], parsers[i], cs, out[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    };
    std::vector<std::thread> threads;
    std::vector<Lane> lanes(n);
    for (size_t i = 1; i < n; i++)
      threads.emplace_back([&, i] {
        StepGate::Member m(gate_);
        lanes[i].member = &m;
        lanes[i].logits = prompt_logits;
        reply(i, lanes[i]);
      });
    reply(0, main_);
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
    for (size_t i = 0; i < n; i++)
      if (out[i].finish == Finish::kCancelled) {
        out.resize(i + 1);
        break;
      }
  }
  in = std::move(inputs[0]);
}

void Decoder::decode(Lane& lane, Session& s, DecodeInput& in, ReplyParser* parser, ReplySink& sink,
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
    int32_t id = sampled ? next_token(lane, in, sampler, r.tokens) : in.forced[forced++];
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
    lane.member->forward(s, std::span<const int32_t>(&r.tokens.back(), 1), lane.logits.data());
  }
  r.decode_seconds = seconds_since(t0);
  if (r.finish == Finish::kCancelled) return;
  // The rest of a promised call's opening is not generated: r.tokens and usage leave it out.
  if (parser && r.finish == Finish::kLength && in.call_opening_rest &&
      parser->reply().tool_calls.empty())
    for (int32_t id : in.call_opening_rest(r.tokens)) out.push(parser->push(id));
  if (parser) out.push(parser->finish());
  StepGate::Member::Away away(*lane.member);
  if (cache_) cache_->put(s, media_keys(in.images.get()));
}

}  // namespace waste
