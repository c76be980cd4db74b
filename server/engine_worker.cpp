#include "server/engine_worker.h"
#include "engine/stopwatch.h"

#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "server/generation.h"

namespace waste {

namespace {

// An engine failure: a JSON 500 before the response started, else an error event that ends the
// stream cleanly.
void report_failure(Job& job, const std::string& message) {
  std::string body = http::error_body(message, "server_error", "", "engine_error");
  if (!job.params.stream) {
    job.out->send(500, "application/json", body);
    return;
  }
  job.out->event(body);
  job.out->event("[DONE]");
  job.out->finish();
}

}  // namespace

EngineWorker::EngineWorker(Model& model, const Tokenizer& tok, const ChatFormat* chat,
                           WorkerOptions opt)
    : model_(model), tok_(tok), chat_(chat), opt_(opt), cache_(opt.snapshot_bytes) {
  thread_ = std::thread([this] { loop(); });
}

EngineWorker::~EngineWorker() {
  stop();
}

bool EngineWorker::submit(Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  // The limit counts requests waiting behind the running one; an idle worker takes one at once.
  bool idle = !busy_ && queue_.empty();
  if (stop_ || (!idle && queue_.size() >= opt_.queue_limit)) return false;
  job.enqueued = SteadyClock::now();
  queue_.push_back(std::move(job));
  cv_.notify_one();
  return true;
}

size_t EngineWorker::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void EngineWorker::stop() {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (Job& j : left)
    j.out->send(
        503, "application/json",
        http::error_body("the server is shutting down", "server_error", "", "shutting_down"));
  if (thread_.joinable()) thread_.join();
}

void EngineWorker::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;  // under the lock, so submit() never sees an idle worker with a job in hand
    }
    run(job);
    std::lock_guard<std::mutex> lock(mu_);
    busy_ = false;
  }
}

void EngineWorker::run(Job& job) {
  counters_.requests++;
  double queued = seconds_since(job.enqueued);
  if (job.out->closed()) {
    counters_.cancelled++;
    spdlog::info("{} cancelled while queued ({:.2f} s)", job.id, queued);
    return;
  }
  GenerationResult r;
  std::unique_ptr<Generation> g;
  try {
    g = std::make_unique<Generation>(model_, tok_, chat_, cache_, opt_, job);
    r = g->run();
  } catch (const std::exception& e) {
    counters_.failed++;
    spdlog::error("{} failed: {}", job.id, e.what());
    report_failure(job, e.what());
    return;
  }
  count(r);
  g->deliver();
  spdlog::info(
      "{} {} tokens in ({} cached), {} out, queue {:.2f} s, prefill {:.2f} s, decode {:.2f} s{}",
      job.id, r.usage.prompt_tokens, r.usage.cached_tokens, r.usage.completion_tokens, queued,
      r.prefill_seconds, r.decode_seconds,
      r.cancelled ? ", cancelled: client gone" : ", finish " + r.finish_reason);
}

// Counted before the answer goes out, so a client that reads /metrics after its response sees it.
void EngineWorker::count(const GenerationResult& r) {
  counters_.prompt_tokens += (uint64_t)r.usage.prompt_tokens;
  counters_.completion_tokens += (uint64_t)r.usage.completion_tokens;
  counters_.cached_tokens += (uint64_t)r.usage.cached_tokens;
  counters_.prefill_micros += (uint64_t)(r.prefill_seconds * 1e6);
  counters_.decode_micros += (uint64_t)(r.decode_seconds * 1e6);
  if (r.cancelled) counters_.cancelled++;
}

}  // namespace waste
