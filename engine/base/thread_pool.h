// A fork-join pool for the engine's matrix and expert work. Work is split by index ranges whose
// boundaries never depend on timing, so results do not depend on the thread count. Waiting
// threads sleep on condition variables; nothing spins.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace waste {

class ThreadPool {
 public:
  // n_threads counts the calling thread; 0 = one per hardware thread.
  explicit ThreadPool(int n_threads = 0);
  // The threads a pool asked for n_threads runs (the RAM plan counts each one's buffers).
  static int resolve(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return (int)workers_.size() + 1; }

  // Calls fn(begin, end) over [0, n) in chunks that are multiples of `grain` (except the last),
  // at most one chunk per thread; returns when all are done. The first exception thrown by any
  // chunk is rethrown here.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, chunk_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace waste
