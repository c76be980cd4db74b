// A few threads that turn request bodies into jobs: parsing, decoding and fetching images,
// rendering and tokenizing can each take long for a large request, and none of it may run on an
// HTTP I/O thread, where it would stall every other connection (GET /health included).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace waste {

class RequestPool {
 public:
  explicit RequestPool(int threads);
  ~RequestPool();  // runs what is queued, then joins
  RequestPool(const RequestPool&) = delete;
  RequestPool& operator=(const RequestPool&) = delete;

  // Queues `task`; it must not throw.
  void post(std::function<void()> task);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace waste
