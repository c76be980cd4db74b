#include "server/runtime/engine_worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/base/stopwatch.h"

namespace waste {

namespace {

// The job's sink, which also reports a cancellation when the worker is told to cut its job.
class CuttableSink final : public ReplySink {
 public:
  CuttableSink(JobSink& inner, const std::atomic<bool>& cut) : inner_(inner), cut_(cut) {}
  bool cancelled() override { return cut_ || inner_.cancelled(); }
  void prefill_progress(size_t done, size_t total) override {
    inner_.prefill_progress(done, total);
  }
  void on_event(const ReplyEvent& e) override { inner_.on_event(e); }
  void on_token(int32_t id, const TokenLogprobs* lp) override { inner_.on_token(id, lp); }
  void begin_choice(size_t index) override { inner_.begin_choice(index); }
  bool interleaves() const override { return inner_.interleaves(); }
  void on_prompt_token(int32_t id, const TokenLogprobs* lp) override {
    inner_.on_prompt_token(id, lp);
  }

 private:
  JobSink& inner_;
  const std::atomic<bool>& cut_;
};

// `message` without any occurrence of `prefix`.
std::string public_message(std::string message, const std::string& prefix) {
  if (prefix.empty()) return message;
  for (size_t at; (at = message.find(prefix)) != std::string::npos;)
    message.erase(at, prefix.size());
  return message;
}

}  // namespace

std::string EngineWorker::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

namespace {

std::unique_ptr<DiskPrefixCache> disk_tier(Model& model, const WorkerOptions& opt) {
  if (!opt.disk_cache) return nullptr;
  const int64_t ctx = opt.ctx;
  return std::make_unique<DiskPrefixCache>(*opt.disk_cache, opt.fingerprint,
                                           [&model, ctx] { return model.new_session(ctx); });
}

}  // namespace

EngineWorker::EngineWorker(Model& model, WorkerOptions opt)
    : model_(model),
      opt_(opt),
      cache_(opt.snapshot_bytes, disk_tier(model, opt)),
      gate_(model, opt.step) {
  if (opt_.parallel < 1)
    fail<UsageError>("parallel slots must be at least 1, not {}", opt_.parallel);
  for (int i = 0; i < opt_.parallel; i++) threads_.emplace_back([this, i] { loop(i); });
}

EngineWorker::~EngineWorker() {
  stop();
}

bool EngineWorker::submit(Job job) {
  std::lock_guard<std::mutex> lock(mu_);
  // The limit counts jobs waiting for a slot; a free slot takes one at once.
  const size_t free = (size_t)(opt_.parallel - busy_);
  if (stop_ || queue_.size() >= opt_.queue_limit + free) return false;
  job.enqueued = SteadyClock::now();
  queue_.push_back(std::move(job));
  cv_.notify_one();
  return true;
}

bool EngineWorker::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stop_;
}

size_t EngineWorker::queue_depth() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

size_t EngineWorker::drain(std::chrono::milliseconds grace) {
  std::deque<Job> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && threads_.empty()) return 0;
    stop_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  for (Job& j : left) j.sink->fail(JobFailure::kShuttingDown, "the server is shutting down");
  size_t cut = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_for(lock, grace, [&] { return busy_ == 0; })) {
      cut = (size_t)busy_.load();
      cut_ = true;
    }
  }
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  return cut;
}

void EngineWorker::loop(int slot) {
  Decoder decoder(gate_, &cache_);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      busy_++;  // under the lock, so submit() never counts a slot free with a job in hand
    }
    run(slot, decoder, job);
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_--;
    }
    idle_cv_.notify_all();
  }
}

void EngineWorker::run(int slot, Decoder& decoder, Job& job) {
  counters_.requests++;
  double queued = seconds_since(job.enqueued);
  counters_.queue_micros += (uint64_t)(queued * 1e6);
  if (job.sink->cancelled()) {
    counters_.cancelled++;
    spdlog::info("{} cancelled while queued ({:.2f} s)", job.id, queued);
    return;
  }
  std::vector<DecodeResult> rs;
  CuttableSink sink(*job.sink, cut_);
  try {
    job.sink->begin();
    Session s = model_.new_session(opt_.ctx);
    std::vector<ReplyParser*> parsers;
    for (const auto& p : job.parsers) parsers.push_back(p.get());
    if (parsers.empty()) parsers.push_back(nullptr);
    rs = decoder.run(s, job.input, parsers, sink);
  } catch (const std::exception& e) {
    counters_.failed++;
    counters_.failed_in_a_row++;
    spdlog::error("{} failed: {}", job.id, e.what());
    std::string message = public_message(e.what(), opt_.private_prefix);
    {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = message;
    }
    job.sink->fail(JobFailure::kEngineError, message);
    return;
  }
  counters_.failed_in_a_row = 0;
  count(rs);
  const DecodeResult& last = rs.back();
  if (last.finish != Finish::kCancelled)
    job.sink->end(rs);
  else if (cut_)
    job.sink->fail(JobFailure::kShuttingDown,
                   "the server is shutting down; this reply was cut short");
  size_t out = 0;
  double decode = 0;
  for (const DecodeResult& r : rs) out += r.tokens.size(), decode += r.decode_seconds;
  spdlog::info(
      "{} slot {}: {} tokens in ({} cached), {} out{}, queue {:.2f} s, prefill {:.2f} s, decode "
      "{:.2f} s, {}",
      job.id, slot, rs[0].prompt_tokens, rs[0].cached_tokens, out,
      rs.size() > 1 ? fmt::format(" in {} replies", rs.size()) : "", queued, rs[0].prefill_seconds,
      decode,
      last.finish != Finish::kCancelled ? std::string("finish: ") + finish_name(last.finish)
      : cut_                            ? "cut: shutting down"
                                        : "cancelled: client gone");
}

// Counted before the answer goes out, so a client that reads /metrics after its response sees it.
void EngineWorker::count(std::span<const DecodeResult> rs) {
  // The prompt is prefilled once for all the replies.
  counters_.prompt_tokens += (uint64_t)rs[0].prompt_tokens;
  counters_.cached_tokens += (uint64_t)rs[0].cached_tokens;
  counters_.prefill_micros += (uint64_t)(rs[0].prefill_seconds * 1e6);
  for (const DecodeResult& r : rs) {
    counters_.completion_tokens += (uint64_t)r.tokens.size();
    counters_.decode_micros += (uint64_t)(r.decode_seconds * 1e6);
  }
  if (rs.back().finish == Finish::kCancelled) counters_.cancelled++;
}

}  // namespace waste
