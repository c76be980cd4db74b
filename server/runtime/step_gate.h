// Where several conversations meet the one model. Each conversation runs on its own thread (a
// slot) and, as a Member of the gate, calls forward() as if it had the model to itself; the gate
// gathers the calls waiting at a moment into one Model::step, so each layer's experts are read
// once for all of them, and returns each call when its tokens have run. What a conversation
// computes never depends on its neighbours (Model::step), so scheduling is free to follow timing.
//
// Who runs what in a step: every waiting call moves at least one token (a decode step never
// waits), and the prompt budget (`step_tokens`) goes first to members that have not run a token
// yet — alone, so a short request that arrives during a long prefill costs its own time plus
// the step already running, not a full shared step more — and otherwise to the members that have
// run the fewest tokens, so prefills take turns and none starves.
//
// A step runs when every member is waiting, or when a call has waited `gather` (a member busy
// elsewhere, restoring a snapshot or sampling a large vocabulary, does not hold the others
// longer). It runs on the thread of one of the waiting calls, so a lone conversation steps with
// no hand-off.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <vector>

#include "engine/model/model.h"

namespace waste {

struct StepGateOptions {
  // Prompt tokens one step takes at most, beside one token of every waiting call (0: the model's
  // prefill window, which the RAM plan sized the step's activations for).
  int64_t step_tokens = 0;
  std::chrono::microseconds gather{20000};
};

// Counters for /metrics; each step adds to them.
struct StepCounters {
  uint64_t steps = 0;
  uint64_t tokens = 0;  // summed over steps
  uint64_t pieces = 0;  // conversations summed over steps
};

class StepGate {
 public:
  explicit StepGate(Model& model, StepGateOptions opt = {});

  Model& model() const { return model_; }

  // One conversation's seat at the gate, for as long as it runs (a request, on its slot).
  class Member {
   public:
    explicit Member(StepGate& gate);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;

    // Model::forward's contract, run in shared steps: returns once all of `tokens` are in `s`
    // (`logits` holds the last one's). Bad input is refused (UsageError) before it can share a
    // step. An engine error in a step that carried this call is rethrown here; `s` is then
    // broken.
    void forward(Session& s, std::span<const int32_t> tokens, float* logits,
                 std::span<const EmbeddingOverride> embeds = {});
    // Runs `fn` with the compute threads to itself (no step runs meanwhile): the vision tower.
    void with_pool(const std::function<void(ThreadPool&)>& fn);

    // While one lives, the gate does not wait for this member's calls: it is busy elsewhere
    // (copying a snapshot, waiting for another's).
    class Away {
     public:
      explicit Away(Member& m);
      ~Away();
      Away(const Away&) = delete;
      Away& operator=(const Away&) = delete;

     private:
      StepGate& gate_;
    };

   private:
    friend class StepGate;
    StepGate& gate_;
    uint64_t run_ = 0;  // tokens of this member's calls run so far
  };

  int members() const;
  StepCounters counters() const;

 private:
  struct Call;
  bool ready(std::chrono::steady_clock::time_point now) const;  // under mu_
  void forward(Member& m, Session& s, std::span<const int32_t> tokens, float* logits,
               std::span<const EmbeddingOverride> embeds);
  void with_pool(const std::function<void(ThreadPool&)>& fn);
  std::vector<size_t> shares() const;  // under mu_: tokens each waiting call runs next
  void run_step(std::unique_lock<std::mutex>& lock);
  void leave();

  Model& model_;
  StepGateOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Call*> waiting_;  // arrival order
  int members_ = 0;
  bool running_ = false;  // a step, or with_pool's work, has the model
  StepCounters counters_;
};

}  // namespace waste
