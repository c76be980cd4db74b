// The io_uring reader: one thread keeps up to io_threads direct reads in flight, so a layer's
// misses reach the device together without a thread per read.
#include <liburing.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include <spdlog/spdlog.h>

#include "engine/base/stopwatch.h"
#include "engine/experts/expert_store.h"

namespace waste {
namespace {

struct Pending {
  int slot = -1, layer = 0, expert = 0;
  bool speculative = false;
  size_t got = 0;  // bytes already read (a short read is continued)
  SteadyClock::time_point t0;
};

// Queues the rest of `p`'s record (the ring has one entry per pending read, so one is free).
void queue_read(io_uring& ring, const ExpertBank& bank, uint8_t* buf, Pending& p, unsigned tag) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, bank.fd(), buf + p.got, (unsigned)(bank.stride() - p.got),
                     bank.offset(p.expert) + p.got);
  io_uring_sqe_set_data64(sqe, tag);
}

// Tag of the eventfd read that wakes the loop while it waits for completions.
constexpr uint64_t kWakeTag = ~0ull;

void arm_wake(io_uring& ring, int fd, uint64_t* counter) {
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, fd, counter, sizeof *counter, 0);
  io_uring_sqe_set_data64(sqe, kWakeTag);
}

}  // namespace

// Under mu_. A loop blocked in the ring does not see the condition variable, so a new demand
// also pokes its eventfd; otherwise the miss would wait for an unrelated completion.
void ExpertStore::wake_readers() {
  job_cv_.notify_all();
  if (uring_waiting_ && wake_fd_ >= 0) {
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
      // The counter cannot overflow at these rates; a failed poke only delays the read.
    }
  }
}

// Probed per store (a few microseconds): seccomp filters and some containers forbid rings.
bool ExpertStore::uring_available() {
  io_uring ring;
  if (int rc = io_uring_queue_init(1, &ring, 0); rc < 0) {
    spdlog::warn("io_uring is not available ({}); reading experts with reader threads",
                 std::strerror(-rc));
    return false;
  }
  io_uring_queue_exit(&ring);
  return true;
}

void ExpertStore::uring_loop() {
  // Speculative reads fill `spec_depth` places, and only while no demanded read is in flight:
  // demanded ones may use twice that, so a miss the layer is waiting for goes to the device at
  // once and has it to itself instead of sharing it with guesses about the next layer.
  const unsigned spec_depth = (unsigned)std::max(1, opt_.io_threads);
  const unsigned depth = 2 * spec_depth;
  io_uring ring;
  if (int rc = io_uring_queue_init(depth + 1, &ring, 0); rc < 0) {
    spdlog::warn("io_uring is not available ({}); reading experts with one thread instead",
                 std::strerror(-rc));
    return reader_loop();
  }
  uint64_t wake_counter = 0;
  int wake_fd = eventfd(0, EFD_CLOEXEC);
  if (wake_fd >= 0) arm_wake(ring, wake_fd, &wake_counter);
  std::vector<Pending> table(depth);
  unsigned busy = 0, demanded = 0;
  std::unique_lock<std::mutex> lock(mu_);
  wake_fd_ = wake_fd;
  for (;;) {
    if (busy == 0) {
      job_cv_.wait(lock, [&] { return stop_ || has_jobs(); });
      if (stop_) break;
    }
    Job j;
    while (!stop_ && busy < depth && next_job(j, busy < spec_depth && demanded == 0)) {
      unsigned tag = 0;
      while (table[tag].slot >= 0) ++tag;
      if (!buf_[j.slot]) buf_[j.slot] = std::make_unique<AlignedBuffer>(stride_, false);
      table[tag] = {j.slot, j.layer, j.expert, j.speculative, 0, SteadyClock::now()};
      demanded += !j.speculative;
      queue_read(ring, c_.bank(j.layer), buf_[j.slot]->data(), table[tag], tag);
      ++busy;
    }
    uring_waiting_ = true;
    lock.unlock();
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    int rc;
    while ((rc = io_uring_wait_cqe(&ring, &cqe)) == -EINTR) {
    }
    // Reap everything that is done; check records without the lock, as read_into does.
    std::vector<std::pair<unsigned, std::string>> finished;
    if (rc < 0) {  // the ring itself failed: fail what is pending rather than spin
      for (unsigned tag = 0; tag < depth; ++tag)
        if (table[tag].slot >= 0)
          finished.emplace_back(
              tag, fmt::format("expert {} of layer {}: io_uring wait failed: {}", table[tag].expert,
                               table[tag].layer, std::strerror(-rc)));
    }
    while (rc == 0 && cqe) {
      uint64_t data = io_uring_cqe_get_data64(cqe);
      int res = cqe->res;
      io_uring_cqe_seen(&ring, cqe);
      if (data == kWakeTag) {  // new jobs: re-arm and go take them
        arm_wake(ring, wake_fd, &wake_counter);
        if (io_uring_peek_cqe(&ring, &cqe) != 0) cqe = nullptr;
        continue;
      }
      unsigned tag = (unsigned)data;
      Pending& p = table[tag];
      const ExpertBank& bank = c_.bank(p.layer);
      if (res > 0 && p.got + (size_t)res < bank.stride()) {
        p.got += (size_t)res;  // short read: ask for the rest
        queue_read(ring, bank, buf_[p.slot]->data(), p, tag);
        io_uring_submit(&ring);
      } else {
        if (res > 0) p.got += (size_t)res;
        std::string err;
        try {
          int io_err = res < 0 ? -res : 0;
          inject_fault(p.layer, p.expert, p.got, io_err);
          bank.finish_read(p.expert, buf_[p.slot]->data(), p.got, io_err);
        } catch (const std::exception& e) {
          err = e.what();
        }
        finished.emplace_back(tag, std::move(err));
      }
      if (io_uring_peek_cqe(&ring, &cqe) != 0) cqe = nullptr;
    }
    lock.lock();
    uring_waiting_ = false;
    for (auto& [tag, err] : finished) {
      complete(table[tag].slot, seconds_since(table[tag].t0), err);
      table[tag].slot = -1;
      demanded -= !table[tag].speculative;
      --busy;
    }
  }
  wake_fd_ = -1;
  lock.unlock();
  io_uring_queue_exit(&ring);
  if (wake_fd >= 0) close(wake_fd);
}

}  // namespace waste
