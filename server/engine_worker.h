// The one thread that owns the model. Requests wait in a bounded FIFO queue; the worker restores
// the longest cached prefix of each prompt, prefills the rest (keeping streams alive with SSE
// comments), decodes token by token, writes deltas or one response, and snapshots the session
// for the next turn. A client that goes away cancels its request within one token.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/model.h"
#include "engine/tokenizer.h"
#include "protocol/generation_params.h"
#include "protocol/openai_response.h"
#include "protocol/token_constraint.h"
#include "server/chat_format.h"
#include "server/http.h"
#include "server/prefix_cache.h"
#include "server/prompt_images.h"

namespace waste {

struct GenerationResult;

struct Job {
  std::string id;
  bool chat = true;  // chat.completion vs text_completion
  std::vector<int32_t> prompt;
  size_t boundary = 0;  // snapshot point inside the prompt (0 = none)
  // The prompt's images (their positions, keys and tower rows); null for a text-only prompt.
  std::shared_ptr<PromptImages> images;
  bool thinking = false;
  std::vector<int32_t> forced;  // reply tokens written in the model's place (a named tool call)
  // The reply's required shape (response_format, a forced tool call), after `forced`; null when
  // the reply is free.
  std::unique_ptr<TokenConstraint> constraint;
  GenerationParams params;
  int64_t max_new = 0;  // tokens to generate at most
  ResponseHeader header;
  std::shared_ptr<http::ResponseWriter> out;
  std::chrono::steady_clock::time_point enqueued;
};

struct WorkerOptions {
  size_t queue_limit = 16;
  int64_t ctx = 4096;
  uint64_t snapshot_bytes = 1ull << 30;
  std::chrono::milliseconds keepalive{5000};  // SSE comment interval during a long prefill
};

// Counters for /metrics; read from any thread.
struct WorkerCounters {
  std::atomic<uint64_t> requests{0}, failed{0}, cancelled{0};
  std::atomic<uint64_t> prompt_tokens{0}, completion_tokens{0}, cached_tokens{0};
  std::atomic<uint64_t> decode_micros{0};  // time spent decoding (for tok/s)
  std::atomic<uint64_t> prefill_micros{0};
};

class EngineWorker {
 public:
  EngineWorker(Model& model, const Tokenizer& tok, const ChatFormat* chat, WorkerOptions opt);
  ~EngineWorker();

  // False when the queue is full (the caller answers 429).
  bool submit(Job job);
  size_t queue_depth() const;
  bool busy() const { return busy_; }
  const WorkerCounters& counters() const { return counters_; }
  const PrefixCache& prefix_cache() const { return cache_; }
  const WorkerOptions& options() const { return opt_; }
  // Stops taking work; queued requests get 503; the running one finishes or is cancelled.
  void stop();

 private:
  void loop();
  void run(Job& job);
  void count(const GenerationResult& r);

  Model& model_;
  const Tokenizer& tok_;
  const ChatFormat* chat_;  // null for raw-only models
  WorkerOptions opt_;
  PrefixCache cache_;
  WorkerCounters counters_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::atomic<bool> busy_{false};
  std::thread thread_;
};

}  // namespace waste
