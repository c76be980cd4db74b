// The expert cache across restarts: at start, the records the earlier runs demanded most are
// read into the cache's free slots in the background, behind every demanded and speculative
// read (never delaying readiness); while serving, and at shutdown, the demand counts are saved
// (expert-usage.bin in the model's cache folder, written atomically) for the next start.
#pragma once

#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/model/model.h"

namespace waste {

struct WarmStartOptions {
  std::filesystem::path root;  // the cache folder; the file goes in its model subfolder
  bool warm = true;            // false: only save (--warm-start off)
  std::chrono::seconds save_every{300};
};

class ExpertWarmStart {
 public:
  // `fingerprint` (which may take seconds) runs on this object's thread.
  ExpertWarmStart(Model& model, std::function<uint64_t()> fingerprint, WarmStartOptions opt);
  ~ExpertWarmStart();  // saves the counts once more

 private:
  void loop();
  void warm(const std::filesystem::path& file, uint64_t fingerprint);
  bool save(const std::filesystem::path& file, uint64_t fingerprint);  // false: saving stopped

  Model& model_;
  std::function<uint64_t()> fingerprint_;
  WarmStartOptions opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace waste
