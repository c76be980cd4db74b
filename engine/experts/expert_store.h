// Hands the forward pass the expert records a layer asks for. A layer asks for all its experts
// at once; misses are read in parallel by reader threads with one aligned direct read each,
// and each expert is handed to the caller the moment its bytes are in RAM. Callers store results
// by slot, so the order of arrival never changes a result. Spare RAM is a bounded cache of
// whole records; the next layer's likely experts can be prefetched speculatively.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/base/platform.h"
#include "engine/experts/expert_cache.h"
#include "engine/format/container.h"
#include "engine/format/expert_bank.h"

namespace waste {

// How misses are read: reader threads each doing one blocking pread, or one thread keeping up to
// io_threads reads in flight through the platform's AsyncReader (where the OS has one); both
// issue one direct read per record.
enum class IoBackend { kThreads, kUring };

// For tests only (the product never sets one): what a read of (layer, expert) suffers after the
// I/O and before its checks, so that failing disks can be shown to be handled by both readers.
struct ReadFault {
  enum class Kind { kNone, kError, kShort, kStall };
  Kind kind = Kind::kNone;
  int error = 5;                       // kError: the errno the read reports (EIO)
  std::chrono::milliseconds stall{0};  // kStall: how long the read takes first
};
using ReadFaultHook = std::function<ReadFault(int layer, int expert)>;

struct StoreOptions {
  uint64_t cache_bytes = 0;  // 0 = the minimum: one layer's experts, double-buffered
  int io_threads = 4;        // 0 = read synchronously on the compute thread (no read-ahead)
  IoBackend backend = IoBackend::kUring;    // faster here (docs/PERFORMANCE.md); threads if absent
  CachePolicy policy = CachePolicy::kLrfu;  // best on the real routing trace
  ReadFaultHook fault_hook;                 // tests only
};

struct ExpertStats {
  uint64_t hits = 0;           // demanded records found resident (or already being prefetched)
  uint64_t misses = 0;         // demanded records that had to be read
  uint64_t bytes_read = 0;     // demand and speculative reads
  uint64_t prefetched = 0;     // speculative reads issued
  uint64_t prefetch_used = 0;  // of which a later demand used the record
  double read_seconds = 0;     // summed over reader threads
  double wait_seconds = 0;     // compute thread waiting for records
  uint64_t warm_queued = 0;    // records warm() asked for
  uint64_t warmed = 0;         // of which read (or failed)
  double warm_seconds = 0;     // from warm() to its latest read
};

// A record and how often it was demanded, for warming a cache across runs.
struct ExpertUse {
  int layer = 0, expert = 0;
  uint64_t uses = 0;
};

class ExpertStore {
 public:
  ExpertStore(const Container& c, const StoreOptions& opt);
  ~ExpertStore();
  ExpertStore(const ExpertStore&) = delete;
  ExpertStore& operator=(const ExpertStore&) = delete;

  // Calls fn(i, view) once for each experts[i], in arrival order, on the calling thread. Throws
  // IoError/FormatError naming the layer and expert when a record cannot be read.
  // `next` (experts of `next_layer` likely to be demanded soon) are prefetched as soon as this
  // layer's own reads are queued, so they arrive while this layer computes. `overlap`, when
  // given, runs on the calling thread once the reads are queued and before the first record is
  // awaited: the layer's work that needs no expert hides the latency of its misses.
  void fetch(int layer, std::span<const int> experts,
             const std::function<void(size_t, const ExpertView&)>& fn, int next_layer = -1,
             std::span<const int> next = {}, const std::function<void()>& overlap = {});

  // Starts speculative reads of records likely to be demanded soon, without evicting anything
  // the current layer uses. Never blocks on I/O.
  void prefetch(int layer, std::span<const int> experts);

  // Every record demanded so far (with counts added by warm()), most used first.
  std::vector<ExpertUse> usage() const;
  // Adds an earlier run's counts and reads the most used records into free slots, in the
  // background behind every demanded and speculative read, never evicting a record (a demand for
  // one still queued takes its place in the demand queue). Returns how many reads it queued.
  size_t warm(std::span<const ExpertUse> earlier);

  ExpertStats stats() const;
  int n_slots() const { return cache_.n_slots(); }
  uint64_t record_bytes() const { return stride_; }

 private:
  enum class State : uint8_t { kEmpty, kReading, kReady, kFailed };
  struct Job {
    int slot = -1, layer = -1, expert = -1;
    bool speculative = false;
  };

  void fetch_window(int layer, std::span<const int> experts, size_t first,
                    const std::function<void(size_t, const ExpertView&)>& fn, int next_layer,
                    std::span<const int> next, const std::function<void()>& overlap);
  void prefetch_locked(int layer, std::span<const int> experts);
  void reader_loop();
  void async_loop();              // expert_store_async.cpp
  static bool async_available();  // the OS lets this process have an AsyncReader
  bool next_job(Job& j, bool speculative_ok = true);
  bool has_jobs() const { return !jobs_.empty() || !spec_jobs_.empty() || !warm_jobs_.empty(); }
  void promote_warm(int slot);
  void wake_readers();  // under mu_: jobs were queued
  void read_into(int slot, int layer, int expert, std::unique_lock<std::mutex>& lock);
  // Applies the test hook's fault to a finished read (its byte count and errno).
  void inject_fault(int layer, int expert, size_t& got, int& err) const;
  // Under mu_: publishes a finished read of `slot` (err empty on success).
  void complete(int slot, double seconds, const std::string& err);
  // Under mu_: a slot bound to (layer, expert), waiting for in-flight reads to free one.
  int claim(int layer, int expert, std::unique_lock<std::mutex>& lock);

  const Container& c_;
  StoreOptions opt_;
  uint64_t stride_ = 0;
  ExpertCache cache_;
  std::vector<std::unique_ptr<AlignedBuffer>> buf_;
  std::vector<State> state_;
  std::vector<std::string> error_;    // per slot, when kFailed
  std::vector<uint8_t> speculative_;  // filled by prefetch, not yet demanded

  mutable std::mutex mu_;
  std::condition_variable job_cv_, done_cv_;
  std::deque<Job> jobs_;          // demanded records: always read first
  std::deque<Job> spec_jobs_;     // speculative (lookahead) reads
  std::deque<Job> warm_jobs_;     // warm() reads: after every other
  std::vector<uint8_t> warming_;  // per slot: its read was queued by warm()
  std::chrono::steady_clock::time_point warm_start_;
  std::vector<std::thread> readers_;
  int in_flight_ = 0;             // reads queued or running
  AsyncReader* async_ = nullptr;  // async_loop's reader, while it runs
  bool async_waiting_ = false;    // that loop is blocked in the reader
  bool stop_ = false;
  ExpertStats stats_;
};

}  // namespace waste
