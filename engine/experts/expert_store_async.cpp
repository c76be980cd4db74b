// The asynchronous reader's loop: one thread keeps up to io_threads direct reads in flight
// through the platform's AsyncReader, so a layer's misses reach the device together without a
// thread per read.
#include <algorithm>
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

// Queues the rest of `p`'s record (the reader has room for one per pending read).
void queue_read(AsyncReader& reader, const ExpertBank& bank, uint8_t* buf, const Pending& p,
                unsigned tag) {
  reader.queue(bank.fd(), buf + p.got, bank.stride() - p.got, bank.offset(p.expert) + p.got, tag);
}

}  // namespace

// Under mu_. A loop blocked in the reader does not see the condition variable, so a new demand
// also wakes the reader; otherwise the miss would wait for an unrelated completion.
void ExpertStore::wake_readers() {
  job_cv_.notify_all();
  if (async_waiting_ && async_) async_->wake();
}

// Probed per store (a few microseconds): seccomp filters and some containers forbid rings.
bool ExpertStore::async_available() {
  std::string why;
  if (!AsyncReader::open(1, &why)) {
    spdlog::warn("{}; reading experts with reader threads", why);
    return false;
  }
  return true;
}

void ExpertStore::async_loop() {
  // Speculative reads fill `spec_depth` places, and only while no demanded read is in flight:
  // demanded ones may use twice that, so a miss the layer is waiting for goes to the device at
  // once and has it to itself instead of sharing it with guesses about the next layer.
  const unsigned spec_depth = (unsigned)std::max(1, opt_.io_threads);
  const unsigned depth = 2 * spec_depth;
  std::string why;
  std::unique_ptr<AsyncReader> reader = AsyncReader::open(depth, &why);
  if (!reader) {
    spdlog::warn("{}; reading experts with one thread instead", why);
    return reader_loop();
  }
  std::vector<Pending> table(depth);
  std::vector<AsyncReader::Completion> done;
  unsigned busy = 0, demanded = 0;
  std::unique_lock<std::mutex> lock(mu_);
  async_ = reader.get();
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
      queue_read(*reader, c_.bank(j.layer), buf_[j.slot]->data(), table[tag], tag);
      ++busy;
    }
    async_waiting_ = true;
    lock.unlock();
    done.clear();
    const std::string broken = reader->wait(done);
    // Check what is done without the lock, as read_into does.
    std::vector<std::pair<unsigned, std::string>> finished;
    if (!broken.empty()) {  // the reader itself failed: fail what is pending rather than spin
      for (unsigned tag = 0; tag < depth; ++tag)
        if (table[tag].slot >= 0)
          finished.emplace_back(tag, fmt::format("expert {} of layer {}: {}", table[tag].expert,
                                                 table[tag].layer, broken));
    }
    for (const AsyncReader::Completion& c : done) {
      const unsigned tag = (unsigned)c.tag;
      Pending& p = table[tag];
      const ExpertBank& bank = c_.bank(p.layer);
      if (c.result > 0 && p.got + (size_t)c.result < bank.stride()) {
        p.got += (size_t)c.result;  // short read: ask for the rest
        queue_read(*reader, bank, buf_[p.slot]->data(), p, tag);
        continue;
      }
      if (c.result > 0) p.got += (size_t)c.result;
      std::string err;
      try {
        int io_err = c.result < 0 ? -c.result : 0;
        inject_fault(p.layer, p.expert, p.got, io_err);
        bank.finish_read(p.expert, buf_[p.slot]->data(), p.got, io_err);
      } catch (const std::exception& e) {
        err = e.what();
      }
      finished.emplace_back(tag, std::move(err));
    }
    lock.lock();
    async_waiting_ = false;
    for (auto& [tag, err] : finished) {
      complete(table[tag].slot, seconds_since(table[tag].t0), err);
      table[tag].slot = -1;
      demanded -= !table[tag].speculative;
      --busy;
    }
  }
  async_ = nullptr;
}

}  // namespace waste
