#include "server/runtime/step_gate.h"

#include <algorithm>
#include <exception>

namespace waste {

using Clock = std::chrono::steady_clock;

// One forward() call while it waits: how far its tokens have run.
struct StepGate::Call {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  float* logits = nullptr;
  std::span<const EmbeddingOverride> embeds;
  size_t done = 0;           // tokens already in the session
  uint64_t last_served = 0;  // the step that last took its tokens (0: none yet)
  Clock::time_point since;   // when it started waiting for its next step
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

void StepGate::forward(Session& s, std::span<const int32_t> tokens, float* logits,
                       std::span<const EmbeddingOverride> embeds) {
  // Refused here, before it can share a step: a bad call must not fail its neighbours.
  model_.check_input(s, tokens, embeds);
  Call call;
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

void StepGate::run_step(std::unique_lock<std::mutex>& lock) {
  running_ = true;
  // Every waiting call moves one token; the prompt budget goes to the least recently served.
  std::vector<Call*> order(waiting_);
  std::stable_sort(order.begin(), order.end(),
                   [](Call* a, Call* b) { return a->last_served < b->last_served; });
  int64_t budget = opt_.step_tokens;
  std::vector<StepPiece> pieces;
  std::vector<std::vector<EmbeddingOverride>> embeds(order.size());
  for (size_t i = 0; i < order.size(); i++) {
    Call& c = *order[i];
    const size_t left = c.tokens.size() - c.done;
    const size_t extra = std::min(left - 1, (size_t)std::max<int64_t>(budget, 0));
    budget -= (int64_t)extra;
    const size_t n = 1 + extra;
    for (const EmbeddingOverride& e : c.embeds)  // re-based to this piece
      if (e.index >= (int64_t)c.done && e.index < (int64_t)(c.done + n))
        embeds[i].push_back({e.index - (int64_t)c.done, e.row});
    pieces.push_back({c.session, c.tokens.subspan(c.done, n),
                      c.done + n == c.tokens.size() ? c.logits : nullptr, embeds[i]});
  }
  lock.unlock();
  std::exception_ptr error;
  try {
    model_.step(pieces);
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  const uint64_t step = ++served_;
  const Clock::time_point now = Clock::now();
  int64_t tokens = 0;
  for (size_t i = 0; i < order.size(); i++) {
    Call& c = *order[i];
    c.done += pieces[i].tokens.size();
    tokens += (int64_t)pieces[i].tokens.size();
    c.last_served = step;
    c.since = now;  // the rest waits for the others' next calls, as a new call would
    c.error = error;
    c.finished = error || c.done == c.tokens.size();
  }
  waiting_.erase(
      std::remove_if(waiting_.begin(), waiting_.end(), [](Call* c) { return c->finished; }),
      waiting_.end());
  counters_.steps++;
  counters_.tokens += (uint64_t)tokens;
  counters_.pieces += pieces.size();
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
