// The slots that run jobs on the model. Jobs wait in a bounded FIFO queue; each of the `parallel`
// slot threads takes the next one and runs it through its own Decoder (which restores the longest
// cached prefix, prefills the rest, decodes and snapshots the conversation for its next turn),
// handing the output to the job's sink, which writes it in its API's shape. The slots' forward
// passes meet in one StepGate, which runs them as shared steps: each layer's experts are read
// once for every conversation in the step, and no conversation's bits depend on the others. A
// client that goes away cancels its job within one step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/model.h"
#include "prompt_templates/reply_parser.h"
#include "server/prompt_cache/prefix_cache.h"
#include "server/runtime/decoder.h"

namespace waste {

// Why a job ended without its replies; each API answers it in its own terms.
enum class JobFailure {
  kEngineError,   // the engine threw while running it
  kShuttingDown,  // the server stopped before it ran, or cut it short
};

// The job's side of a generation: where its events go and how it answers.
class JobSink : public ReplySink {
 public:
  // The worker took the job (a stream starts here).
  virtual void begin() {}
  // Every reply is complete (not called when one was cancelled): the final chunks, or the whole
  // body. One result per reply, in order.
  virtual void end(std::span<const DecodeResult> replies) = 0;
  // The job failed: an error body, or an error event that ends a stream that already began.
  virtual void fail(JobFailure failure, const std::string& message) = 0;
};

struct Job {
  std::string id;  // for logs
  DecodeInput input;
  // One per reply (OpenAI's n, at least one); an entry is null when only ids are wanted.
  std::vector<std::unique_ptr<ReplyParser>> parsers;
  std::unique_ptr<JobSink> sink;
  std::chrono::steady_clock::time_point enqueued;
};

struct WorkerOptions {
  int parallel = 1;  // slots: conversations running at once
  StepGateOptions step;
  size_t queue_limit = 16;  // jobs waiting for a slot
  int64_t ctx = 4096;
  uint64_t snapshot_bytes = 1ull << 30;
  // The prompt cache's disk tier, when on; `fingerprint` names the model's folder in it.
  std::optional<DiskCacheOptions> disk_cache;
  std::function<uint64_t()> fingerprint;
  // Cut from engine errors before a client sees them (the container's folder: a client has no
  // business knowing where the model lives).
  std::string private_prefix;
};

// Counters for /metrics; read from any thread.
struct WorkerCounters {
  std::atomic<uint64_t> requests{0}, failed{0}, cancelled{0};
  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};
  std::atomic<uint64_t> decode_micros{0};  // time spent decoding (for tok/s)
  std::atomic<uint64_t> prefill_micros{0};
  std::atomic<uint64_t> failed_in_a_row{0};  // engine failures since the last success
  std::atomic<uint64_t> queue_micros{0};     // time jobs waited for a slot, summed
};

class EngineWorker {
 public:
  EngineWorker(Model& model, WorkerOptions opt);
  ~EngineWorker();

  // False when the queue is full or the worker is stopping (see stopping()).
  bool submit(Job job);
  bool stopping() const;
  size_t queue_depth() const;
  bool busy() const { return busy_ > 0; }
  int slots() const { return opt_.parallel; }
  int busy_slots() const { return busy_; }
  StepCounters step_counters() const { return gate_.counters(); }
  const WorkerCounters& counters() const { return counters_; }
  // The message of the latest engine failure ("" if none), as clients saw it.
  std::string last_error() const;
  const PrefixCache& prefix_cache() const { return cache_; }
  // Waits until the disk tier has written every pending snapshot (none: returns at once).
  void flush_snapshots() {
    if (cache_.disk()) cache_.disk()->flush();
  }
  const WorkerOptions& options() const { return opt_; }
  // Stops taking jobs: queued ones fail (kShuttingDown) at once; the running ones may finish
  // within `grace`, after which they are cut (their replies end with that failure). Returns how
  // many were cut. Later calls return 0.
  size_t drain(std::chrono::milliseconds grace);
  // drain() with no grace.
  void stop() { drain(std::chrono::milliseconds(0)); }

 private:
  void loop(int slot);
  void run(int slot, Decoder& decoder, Job& job);
  void count(std::span<const DecodeResult> replies);

  Model& model_;
  WorkerOptions opt_;
  PrefixCache cache_;
  StepGate gate_;
  WorkerCounters counters_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // a job arrived, or stop
  std::condition_variable idle_cv_;  // a running job ended
  std::atomic<bool> cut_{false};     // the running jobs are to end now
  std::string last_error_;           // under mu_
  std::deque<Job> queue_;
  bool stop_ = false;
  std::atomic<int> busy_{0};  // slots running a job
  std::vector<std::thread> threads_;
};

}  // namespace waste
