#include "server/runtime/step_gate.h"

#include <algorithm>
#include <exception>

namespace waste {

using Clock = std::chrono::steady_clock;

// One forward() call while it waits: how far its tokens have run.
struct StepGate::Call {
  Member* member = nullptr;
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  float* logits = nullptr;
  std::span<const EmbeddingOverride> embeds;
  size_t done = 0;          // tokens already in the session
  Clock::time_point since;  // when it started waiting for its next step
  bool finished = false;
  std::exception_ptr error;
};

StepGate::StepGate(Model& model, StepGateOptions opt) : model_(model), opt_(opt) {
  if (opt_.step_tokens <= 0) opt_.step_tokens = model.options().chunk;
}

StepGate::Member::Member(StepGate& gate) : gate_(gate) {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  gate_.members_++;
}

StepGate::Member::~Member() {
  gate_.leave();
}

StepGate::Member::Away::Away(Member& m) : gate_(m.gate_) {
  gate_.leave();
}

StepGate::Member::Away::~Away() {
  std::lock_guard<std::mutex> lock(gate_.mu_);
  gate_.members_++;
}

void StepGate::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  members_--;
  cv_.notify_all();  // the ones left may all be waiting now
}

int StepGate::members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_;
}

StepCounters StepGate::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

bool StepGate::ready(Clock::time_point now) const {
  if (running_ || waiting_.empty()) return false;
  if ((int)waiting_.size() >= members_) return true;
  const auto oldest = std::min_element(waiting_.begin(), waiting_.end(),
                                       [](Call* a, Call* b) { return a->since < b->since; });
  return now >= (*oldest)->since + opt_.gather;
}

void StepGate::Member::forward(Session& s, std::span<const int32_t> tokens, float* logits,
                               std::span<const EmbeddingOverride> embeds) {
  gate_.forward(*this, s, tokens, logits, embeds);
}

void StepGate::Member::with_pool(const std::function<void(ThreadPool&)>& fn) {
  gate_.with_pool(fn);
}

void StepGate::forward(Member& m, Session& s, std::span<const int32_t> tokens, float* logits,
                       std::span<const EmbeddingOverride> embeds) {
  // Refused here, before it can share a step: a bad call must not fail its neighbours.
  model_.check_input(s, tokens, embeds);
  Call call;
  call.member = &m;
  call.session = &s;
  call.tokens = tokens;
  call.logits = logits;
  call.embeds = embeds;
  std::unique_lock<std::mutex> lock(mu_);
  call.since = Clock::now();
  waiting_.push_back(&call);
  cv_.notify_all();
  while (!call.finished) {
    const Clock::time_point now = Clock::now();
    if (ready(now)) {
      run_step(lock);
      continue;
    }
    if (running_ || (int)waiting_.size() >= members_)
      cv_.wait(lock);
    else
      cv_.wait_until(lock, call.since + opt_.gather);
  }
  if (call.error) std::rethrow_exception(call.error);
}

std::vector<size_t> StepGate::shares() const {
  std::vector<size_t> take(waiting_.size(), 1);
  std::vector<size_t> order(waiting_.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  auto run = [&](size_t i) { return waiting_[i]->member->run_; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return run(a) < run(b); });
  const bool newcomer = !order.empty() && run(order[0]) == 0;
  size_t budget = (size_t)opt_.step_tokens;
  for (size_t i : order) {
    if (newcomer && run(i) > 0) break;  // the newcomers' step stays as short as theirs alone
    const Call& c = *waiting_[i];
    const size_t extra = std::min(c.tokens.size() - c.done - 1, budget);
    take[i] += extra;
    budget -= extra;
  }
  return take;
}

void StepGate::run_step(std::unique_lock<std::mutex>& lock) {
  running_ = true;
  const std::vector<Call*> calls(waiting_);
  const std::vector<size_t> take = shares();
  std::vector<StepPiece> pieces;
  std::vector<std::vector<EmbeddingOverride>> embeds(calls.size());
  for (size_t i = 0; i < calls.size(); i++) {
    const Call& c = *calls[i];
    const size_t end = c.done + take[i];
    for (const EmbeddingOverride& e : c.embeds)  // re-based to this piece
      if (e.index >= (int64_t)c.done && e.index < (int64_t)end)
        embeds[i].push_back({e.index - (int64_t)c.done, e.row});
    pieces.push_back({c.session, c.tokens.subspan(c.done, take[i]),
                      end == c.tokens.size() ? c.logits : nullptr, embeds[i]});
  }
  lock.unlock();
  std::exception_ptr error;
  try {
    model_.step(pieces);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  const Clock::time_point now = Clock::now();
  for (size_t i = 0; i < calls.size(); i++) {
    Call& c = *calls[i];
    c.done += take[i];
    c.member->run_ += take[i];
    counters_.tokens += take[i];
    c.since = now;  // the rest waits for the others' next calls, as a new call would
    c.error = error;
    c.finished = error || c.done == c.tokens.size();
  }
  waiting_.erase(
      std::remove_if(waiting_.begin(), waiting_.end(), [](Call* c) { return c->finished; }),
      waiting_.end());
  counters_.steps++;
  counters_.pieces += calls.size();
  running_ = false;
  cv_.notify_all();
}

void StepGate::with_pool(const std::function<void(ThreadPool&)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !running_; });
  running_ = true;
  lock.unlock();
  std::exception_ptr error;
  try {
    fn(model_.pool());
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  running_ = false;
  cv_.notify_all();
  if (error) std::rethrow_exception(error);
}

}  // namespace waste
