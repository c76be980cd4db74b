#include "engine/experts/expert_store.h"
#include "engine/base/stopwatch.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "engine/base/error.h"

namespace waste {

ExpertStore::ExpertStore(const Container& c, const StoreOptions& opt)
    : c_(c), opt_(opt), cache_(0, opt.policy) {
  for (auto& [layer, b] : c.manifest().banks) stride_ = std::max(stride_, b.stride());
  if (stride_ == 0) return;
  uint64_t min_slots = 2 * (uint64_t)c.config().top_k;
  uint64_t slots = std::max(min_slots, opt.cache_bytes / stride_);
  double per_token = (double)c.config().top_k * (double)c.manifest().banks.size();
  cache_ = ExpertCache((int)std::min<uint64_t>(slots, 1 << 24), opt.policy,
                       kLrfuHalfLifeTokens * per_token);
  buf_.resize(cache_.n_slots());  // allocated on first use: a big cache costs nothing until used
  state_.assign(cache_.n_slots(), State::kEmpty);
  error_.resize(cache_.n_slots());
  speculative_.assign(cache_.n_slots(), 0);
  warming_.assign(cache_.n_slots(), 0);
  if (opt.backend == IoBackend::kUring && opt.io_threads > 0 && async_available())
    readers_.emplace_back([this] { async_loop(); });
  else
    for (int i = 0; i < opt.io_threads; i++) readers_.emplace_back([this] { reader_loop(); });
}

ExpertStore::~ExpertStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    wake_readers();
  }
  for (std::thread& t : readers_) t.join();
}

ExpertStats ExpertStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

// Reads without holding the lock; the slot is pinned and kReading, so nobody else touches it.
void ExpertStore::read_into(int slot, int layer, int expert, std::unique_lock<std::mutex>& lock) {
  lock.unlock();
  auto t0 = SteadyClock::now();
  std::string err;
  try {
    if (!buf_[slot]) buf_[slot] = std::make_unique<AlignedBuffer>(stride_, false);
    const ExpertBank& bank = c_.bank(layer);
    int io_err = 0;
    size_t got = bank.read_raw(expert, buf_[slot]->data(), &io_err);
    inject_fault(layer, expert, got, io_err);
    bank.finish_read(expert, buf_[slot]->data(), got, io_err);
  } catch (const std::exception& e) {
    err = e.what();
  }
  double dt = seconds_since(t0);
  lock.lock();
  complete(slot, dt, err);
}

void ExpertStore::inject_fault(int layer, int expert, size_t& got, int& err) const {
  if (!opt_.fault_hook) return;
  const ReadFault f = opt_.fault_hook(layer, expert);
  switch (f.kind) {
    case ReadFault::Kind::kNone:
      return;
    case ReadFault::Kind::kError:
      err = f.error;
      return;
    case ReadFault::Kind::kShort:
      got /= 2;
      return;
    case ReadFault::Kind::kStall:
      std::this_thread::sleep_for(f.stall);
      return;
  }
}

void ExpertStore::complete(int slot, double seconds, const std::string& err) {
  stats_.read_seconds += seconds;
  stats_.bytes_read += stride_;
  state_[slot] = err.empty() ? State::kReady : State::kFailed;
  in_flight_--;
  error_[slot] = err;
  cache_.unpin(slot);  // the in-flight pin
  if (warming_[slot]) {
    warming_[slot] = 0;
    stats_.warmed++;
    stats_.warm_seconds = seconds_since(warm_start_);
  }
  done_cv_.notify_all();
}

// Under mu_: the next queued read, demanded ones first.
bool ExpertStore::next_job(Job& j, bool speculative_ok) {
  std::deque<Job>& q = !jobs_.empty() ? jobs_ : !spec_jobs_.empty() ? spec_jobs_ : warm_jobs_;
  if (q.empty() || (&q != &jobs_ && !speculative_ok)) return false;
  j = q.front();
  q.pop_front();
  return true;
}

void ExpertStore::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    job_cv_.wait(lock, [&] { return stop_ || has_jobs(); });
    if (stop_) return;
    Job j;
    next_job(j);
    read_into(j.slot, j.layer, j.expert, lock);
  }
}

int ExpertStore::claim(int layer, int expert, std::unique_lock<std::mutex>& lock) {
  int slot;
  while ((slot = cache_.admit(ExpertCache::key(layer, expert))) < 0) {
    if (in_flight_ == 0)
      fail<IoError>("expert {} of layer {}: the expert cache could not free a slot to read into",
                    expert, layer);
    done_cv_.wait(lock);  // a finishing speculative read releases its slot
  }
  in_flight_++;
  state_[slot] = State::kReading;
  speculative_[slot] = 0;
  cache_.pin(slot);  // released when the read completes
  return slot;
}

void ExpertStore::fetch(int layer, std::span<const int> experts,
                        const std::function<void(size_t, const ExpertView&)>& fn, int next_layer,
                        std::span<const int> next, const std::function<void()>& overlap) {
  const ExpertBank& bank = c_.bank(layer);
  for (int e : experts)
    if (e < 0 || e >= bank.entry().experts)
      fail<UsageError>("layer {}: expert id {} is out of range", layer, e);
  // A chunk may want more distinct experts than the cache holds: take them in windows that
  // leave room for the rest of the cache to keep working.
  const size_t window = std::max<size_t>(1, (size_t)cache_.n_slots() / 2);
  if (experts.empty() && overlap) overlap();
  for (size_t first = 0; first < experts.size(); first += window)
    fetch_window(layer, experts.subspan(first, std::min(window, experts.size() - first)), first, fn,
                 first == 0 ? next_layer : -1, next, first == 0 ? overlap : nullptr);
}

void ExpertStore::fetch_window(int layer, std::span<const int> experts, size_t first,
                               const std::function<void(size_t, const ExpertView&)>& fn,
                               int next_layer, std::span<const int> next,
                               const std::function<void()>& overlap) {
  const ExpertBank& bank = c_.bank(layer);
  const size_t n = experts.size();
  std::vector<int> slot(n, -1);
  std::vector<bool> sync_read(n, false), done(n, false);
  std::unique_lock<std::mutex> lock(mu_);
  // Resident records are pinned before any miss is admitted, so that a miss can never evict a
  // record this same layer is about to use (a prefetched one, say).
  for (size_t i = 0; i < n; i++) {
    int s = cache_.find(ExpertCache::key(layer, experts[i]));
    if (s < 0 || state_[s] == State::kFailed) continue;
    stats_.hits++;
    if (speculative_[s]) stats_.prefetch_used++;
    speculative_[s] = 0;
    if (warming_[s]) promote_warm(s);
    cache_.touch(s);
    cache_.add_uses(ExpertCache::key(layer, experts[i]), 1);
    slot[i] = s;
    cache_.pin(s);  // held until this layer is done with it
  }
  for (size_t i = 0; i < n; i++) {
    if (slot[i] >= 0) continue;
    int s = cache_.find(ExpertCache::key(layer, experts[i]));
    if (s >= 0) cache_.drop(s);  // a failed speculative read: try again on demand
    stats_.misses++;
    cache_.add_uses(ExpertCache::key(layer, experts[i]), 1);
    s = claim(layer, experts[i], lock);
    if (readers_.empty())
      sync_read[i] = true;
    else
      jobs_.push_back({s, layer, experts[i]});
    slot[i] = s;
    cache_.pin(s);
  }
  if (next_layer >= 0) prefetch_locked(next_layer, next);  // after the demands: they go first
  wake_readers();
  auto release = [&] {
    for (int s : slot)
      if (s >= 0) cache_.unpin(s);
  };
  try {
    if (overlap) {
      lock.unlock();
      overlap();
      lock.lock();
    }
    for (size_t delivered = 0; delivered < n; delivered++) {
      size_t pick = n;
      auto t0 = SteadyClock::now();
      done_cv_.wait(lock, [&] {
        for (size_t i = 0; i < n && pick == n; i++)
          if (!done[i] && (sync_read[i] || state_[slot[i]] != State::kReading)) pick = i;
        return pick < n;
      });
      stats_.wait_seconds += seconds_since(t0);
      if (sync_read[pick]) read_into(slot[pick], layer, experts[pick], lock);
      if (state_[slot[pick]] == State::kFailed) {
        std::string msg = error_[slot[pick]];
        cache_.drop(slot[pick]);
        fail<IoError>("{}", msg);
      }
      done[pick] = true;
      const uint8_t* rec = buf_[slot[pick]]->data();
      lock.unlock();
      fn(first + pick, view_record(rec, bank.geometry()));
      lock.lock();
    }
  } catch (...) {
    if (!lock.owns_lock()) lock.lock();
    // Synchronous reads not made yet never will be: their slots must not stay claimed (a later
    // demand would take them for records on their way and wait forever).
    for (size_t i = 0; i < n; i++)
      if (sync_read[i] && state_[slot[i]] == State::kReading) {
        complete(slot[i], 0, "not read: another record of the layer failed first");
        cache_.drop(slot[i]);
      }
    // In-flight reads still hold their own pins; wait for them so buffers stay valid.
    done_cv_.wait(lock, [&] {
      for (size_t i = 0; i < n; i++)
        if (!sync_read[i] && state_[slot[i]] == State::kReading) return false;
      return true;
    });
    release();
    throw;
  }
  release();
}

void ExpertStore::prefetch(int layer, std::span<const int> experts) {
  std::lock_guard<std::mutex> lock(mu_);
  prefetch_locked(layer, experts);
}

void ExpertStore::prefetch_locked(int layer, std::span<const int> experts) {
  if (readers_.empty()) return;
  const int keep_free = c_.config().top_k;  // a demand must always find room
  for (int e : experts) {
    if (cache_.find(ExpertCache::key(layer, e)) >= 0) continue;
    if (cache_.n_slots() - cache_.n_pinned() <= keep_free) return;
    int s = cache_.admit(ExpertCache::key(layer, e));
    if (s < 0) return;
    in_flight_++;
    state_[s] = State::kReading;
    speculative_[s] = 1;
    cache_.pin(s);
    stats_.prefetched++;
    spec_jobs_.push_back({s, layer, e, true});
  }
  wake_readers();
}

// Under mu_: a warm read a demand is waiting for moves to the demand queue, if not begun yet.
void ExpertStore::promote_warm(int slot) {
  for (auto it = warm_jobs_.begin(); it != warm_jobs_.end(); ++it)
    if (it->slot == slot) {
      jobs_.push_back(*it);
      jobs_.back().speculative = false;
      warm_jobs_.erase(it);
      return;
    }
}

std::vector<ExpertUse> ExpertStore::usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ExpertUse> out;
  for (auto [key, n] : cache_.uses()) out.push_back({(int)(key >> 16), (int)(key & 0xffff), n});
  std::sort(out.begin(), out.end(), [](const ExpertUse& a, const ExpertUse& b) {
    return a.uses != b.uses ? a.uses > b.uses
                            : std::tie(a.layer, a.expert) < std::tie(b.layer, b.expert);
  });
  return out;
}

size_t ExpertStore::warm(std::span<const ExpertUse> earlier) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ExpertUse> ranked;
  for (const ExpertUse& u : earlier) {
    if (!c_.manifest().banks.count(u.layer) || u.expert < 0 ||
        u.expert >= c_.bank(u.layer).entry().experts)
      continue;  // a record this container does not have
    cache_.add_uses(ExpertCache::key(u.layer, u.expert), u.uses);
    ranked.push_back(u);
  }
  if (readers_.empty()) return 0;
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const ExpertUse& a, const ExpertUse& b) { return a.uses > b.uses; });
  // Only free slots, less the room a demand always needs: warming never evicts.
  const int keep_free = c_.config().top_k;
  size_t queued = 0;
  warm_start_ = SteadyClock::now();
  for (const ExpertUse& u : ranked) {
    if (cache_.n_free() <= keep_free) break;
    const uint32_t key = ExpertCache::key(u.layer, u.expert);
    if (cache_.find(key) >= 0) continue;
    int s = cache_.admit(key);
    in_flight_++;
    state_[s] = State::kReading;
    speculative_[s] = 0;  // not a lookahead guess: prefetch_used counts those alone
    warming_[s] = 1;
    cache_.pin(s);
    warm_jobs_.push_back({s, u.layer, u.expert, true});
    queued++;
  }
  stats_.warm_queued += queued;
  wake_readers();
  return queued;
}

}  // namespace waste
