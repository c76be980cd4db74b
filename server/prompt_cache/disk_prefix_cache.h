// The prompt cache's disk tier: the snapshots the memory tier takes, kept in files under one
// folder per model (named by the model's content fingerprint), so an agent's long prefix
// survives a restart and a busy memory tier. Files are written atomically by a writer thread
// with a bounded backlog; the folder is scanned at start (headers only) into an index that finds
// the longest cached prefix of a prompt; least recently used snapshots are deleted to stay under
// the byte bound, and row segments no snapshot references with them. A file that fails any check
// is skipped with one warning and deleted; a folder that cannot be written switches the tier
// off with one warning. Layout and checks: snapshot_file.h.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "engine/model/session.h"
#include "server/prompt_cache/snapshot_file.h"

namespace waste {

struct DiskCacheOptions {
  std::filesystem::path root;  // the cache folder; the model's files go in root/FINGERPRINT/
  uint64_t max_bytes = 32ull << 30;
  size_t backlog = 4;  // snapshots waiting to be written; a newer one drops the oldest
  // The free space kept on the folder's file system, whatever max_bytes says.
  uint64_t free_margin = 256ull << 20;
  // Scan only (`waste cache ls`): nothing is deleted, written or restored.
  bool inspect_only = false;
};

// One snapshot as the index knows it.
struct CachedSnapshot {
  SnapshotInfo info;
  uint64_t bytes = 0;     // its .snap file; the row segments are shared, counted in stats().bytes
  int64_t last_used = 0;  // ns since the epoch
};

struct DiskCacheStats {
  uint64_t hits = 0, misses = 0, tokens_reused = 0, evictions = 0;
  uint64_t writes = 0, dropped_writes = 0, skipped_files = 0;
  uint64_t bytes = 0, snapshots = 0;
  bool ready = false, enabled = true;
};

// The folder of one model's files under `root`, and the fingerprint a folder's name gives (nullopt
// when it is not such a folder).
std::filesystem::path model_cache_dir(const std::filesystem::path& root, uint64_t fingerprint);
std::optional<uint64_t> model_cache_fingerprint(const std::filesystem::path& dir);

class DiskPrefixCache {
 public:
  // `fingerprint` runs on the writer thread (it may read the whole model) before the folder is
  // scanned. `blank` gives a fresh session to restore into.
  DiskPrefixCache(DiskCacheOptions opt, std::function<uint64_t()> fingerprint,
                  std::function<Session()> blank);
  ~DiskPrefixCache();  // writes what is pending, then stops

  // The longest snapshot whose keys are a proper prefix of `keys` and longer than `longer_than`
  // positions, restored from disk; nullopt when none is (or it fails its checks). Waits for the
  // folder to be opened.
  std::optional<Session> longest_prefix(std::span<const uint64_t> keys, int64_t longer_than);
  // Queues `s` (its position keys `keys`) to be written.
  void put(std::shared_ptr<const Session> s, std::vector<uint64_t> keys);
  // Waits until every queued snapshot is written (or dropped) and the scan is done.
  void flush();

  DiskCacheStats stats() const;
  std::vector<CachedSnapshot> snapshots() const;  // most recently used first
  std::filesystem::path dir() const;

 private:
  struct Snap {
    SnapshotInfo info;
    uint64_t bytes = 0;
    int64_t last_used = 0;  // ns since the epoch; files keep it as their mtime
    int pins = 0;           // being read: not evicted
  };
  struct Rows {
    uint64_t bytes = 0;
    int refs = 0;
  };
  struct Pending {
    std::shared_ptr<const Session> session;
    std::vector<uint64_t> keys;
  };
  using SnapKey = std::pair<int64_t, uint64_t>;  // (tokens, key hash)

  void loop();
  void open();
  bool scan();  // false when the folder's disk is already too full
  void write(const Pending& p);
  bool make_room(uint64_t need, const SnapKey* keep);
  void evict(std::map<SnapKey, Snap>::iterator it);
  void add_snap(const SnapshotInfo& info, uint64_t bytes, int64_t last_used);
  void drop_bad(const SnapKey& key, const std::filesystem::path& bad, const std::string& why);
  void switch_off(const std::string& why);
  void touch(const SnapKey& key);
  void release_rows(const RowSegment& seg, bool held);

  DiskCacheOptions opt_;
  std::function<uint64_t()> fingerprint_fn_;
  std::function<Session()> blank_;
  uint64_t fingerprint_ = 0;
  std::filesystem::path dir_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Pending> pending_;
  bool writing_ = false, stop_ = false;
  std::map<SnapKey, Snap> snaps_;
  std::map<std::string, Rows> rows_;
  DiskCacheStats stats_;
  std::thread thread_;
};

}  // namespace waste
