#include "server/runtime/expert_warm_start.h"

#include <spdlog/spdlog.h>

#include "server/prompt_cache/disk_prefix_cache.h"
#include "server/prompt_cache/expert_usage_file.h"

namespace waste {

namespace fs = std::filesystem;

ExpertWarmStart::ExpertWarmStart(Model& model, std::function<uint64_t()> fingerprint,
                                 WarmStartOptions opt)
    : model_(model), fingerprint_(std::move(fingerprint)), opt_(std::move(opt)) {
  thread_ = std::thread([this] { loop(); });
}

ExpertWarmStart::~ExpertWarmStart() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ExpertWarmStart::loop() {
  uint64_t fp = 0;
  fs::path file;
  try {
    fp = fingerprint_();
    fs::path dir = model_cache_dir(opt_.root, fp);
    fs::create_directories(dir);
    file = dir / kExpertUsageFile;
  } catch (const std::exception& e) {
    spdlog::warn("expert cache: no usage file ({}); it starts cold and nothing is saved", e.what());
    return;
  }
  if (opt_.warm) warm(file, fp);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    const bool stopping = cv_.wait_for(lock, opt_.save_every, [&] { return stop_; });
    lock.unlock();
    const bool saved = save(file, fp);
    lock.lock();
    if (stopping || !saved) return;
  }
}

// Queues the reads, then waits (without holding anything the server needs) to report how many
// arrived and how long they took.
void ExpertWarmStart::warm(const fs::path& file, uint64_t fp) {
  if (!fs::exists(file)) return;
  std::vector<ExpertUse> earlier;
  try {
    earlier = read_expert_usage(file, fp);
  } catch (const std::exception& e) {
    spdlog::warn("expert cache: skipping {}; it starts cold", e.what());
    std::error_code ec;
    fs::remove(file, ec);
    return;
  }
  const size_t queued = model_.warm_experts(earlier);
  spdlog::info("expert cache: warming {} records from {}", queued, file.string());
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ExpertStats st = model_.expert_stats();
    if (st.warmed >= st.warm_queued) {
      spdlog::info("expert cache: warmed {} records in {:.2f} s", st.warmed, st.warm_seconds);
      return;
    }
    if (cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; })) return;
  }
}

bool ExpertWarmStart::save(const fs::path& file, uint64_t fp) {
  try {
    write_expert_usage(file, fp, model_.expert_usage());
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("expert cache: usage not saved ({}); saving stops", e.what());
    return false;
  }
}

}  // namespace waste
