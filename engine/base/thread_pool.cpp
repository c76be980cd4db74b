#include "engine/base/thread_pool.h"

#include "engine/base/platform.h"

namespace waste {

int ThreadPool::resolve(int n_threads) {
  return n_threads > 0 ? n_threads : compute_cpus();
}

ThreadPool::ThreadPool(int n_threads) {
  n_threads = resolve(n_threads);
  for (int i = 1; i < n_threads; i++) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* job = job_;
    int64_t b = index * chunk_, e = std::min(n_, b + chunk_);
    lock.unlock();
    if (b < e) {
      try {
        (*job)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> g(mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    lock.lock();
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t threads = size();
  int64_t chunk = (n + threads - 1) / threads;
  chunk = (chunk + grain - 1) / grain * grain;
  if (workers_.empty() || chunk >= n) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    n_ = n;
    chunk_ = chunk;
    pending_ = (int)workers_.size();
    error_ = nullptr;
    generation_++;
  }
  start_cv_.notify_all();
  std::exception_ptr mine;
  try {
    fn(0, std::min(n, chunk));
  } catch (...) {
    mine = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace waste
