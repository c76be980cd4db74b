#include "server/prompt_cache/disk_prefix_cache.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>

#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/base/platform.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void set_mtime(const fs::path& p, int64_t ns) {
  timespec t[2] = {{0, UTIME_OMIT}, {(time_t)(ns / 1000000000), (long)(ns % 1000000000)}};
  ::utimensat(AT_FDCWD, p.c_str(), t, 0);  // best effort: only the order after a restart
}

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Bytes the files of a snapshot of `s` will take: the .snap, and the .rows of [start, pos).
uint64_t snap_bytes(const Session& s, size_t segments) {
  uint64_t n = 64 + segments * sizeof(RowSegment) + (uint64_t)s.pos() * 12;
  for (const KdaState& k : s.kda) n += (k.S.size() + k.conv.size()) * sizeof(float);
  return n;
}

uint64_t rows_bytes(const Session& s, int64_t start) {
  uint64_t mla = 0;
  for (const KdaState& k : s.kda) mla += k.S.empty() ? 1 : 0;
  return 64 + mla * (uint64_t)(s.pos() - start) * (uint64_t)s.latent_width() * sizeof(float);
}

}  // namespace

fs::path model_cache_dir(const fs::path& root, uint64_t fingerprint) {
  return root / fmt::format("{:016x}", fingerprint);
}

std::optional<uint64_t> model_cache_fingerprint(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (name.size() != 16 || name.find_first_not_of("0123456789abcdef") != std::string::npos)
    return std::nullopt;
  return std::stoull(name, nullptr, 16);
}

DiskPrefixCache::DiskPrefixCache(DiskCacheOptions opt, std::function<uint64_t()> fingerprint,
                                 std::function<Session()> blank)
    : opt_(std::move(opt)), fingerprint_fn_(std::move(fingerprint)), blank_(std::move(blank)) {
  thread_ = std::thread([this] { loop(); });
}

DiskPrefixCache::~DiskPrefixCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

fs::path DiskPrefixCache::dir() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dir_;
}

std::vector<CachedSnapshot> DiskPrefixCache::snapshots() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CachedSnapshot> out;
  for (const auto& [key, s] : snaps_) out.push_back({s.info, s.bytes, s.last_used});
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.last_used > b.last_used; });
  return out;
}

DiskCacheStats DiskPrefixCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  DiskCacheStats s = stats_;
  s.snapshots = snaps_.size();
  return s;
}

void DiskPrefixCache::loop() {
  open();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) break;  // stopping, and everything queued is written
    Pending p = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    lock.unlock();
    try {
      write(p);
    } catch (const std::exception& e) {
      switch_off(e.what());
    }
    p.session.reset();  // its memory goes back before the next one is taken
    lock.lock();
    writing_ = false;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void DiskPrefixCache::open() {
  auto t0 = std::chrono::steady_clock::now();
  try {
    uint64_t fp = fingerprint_fn_();
    fs::path dir = model_cache_dir(opt_.root, fp);
    if (!opt_.inspect_only) fs::create_directories(dir);
    {
      std::lock_guard<std::mutex> lock(mu_);
      fingerprint_ = fp;
      dir_ = dir;
    }
    if (!scan())
      fail<IoError>("{}: the disk is full (free space below the {} MiB margin)", dir.string(),
                    opt_.free_margin >> 20);
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    DiskCacheStats s = stats();
    spdlog::info("prompt cache: {} holds {} snapshots ({:.1f} MiB), opened in {:.2f} s",
                 dir.string(), s.snapshots, s.bytes / 1048576.0, took.count());
  } catch (const std::exception& e) {
    switch_off(e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.ready = true;
  idle_cv_.notify_all();
}

// Headers only: a leftover temporary file (a write cut by a crash) is deleted, a snapshot that
// fails its checks or lacks a row segment is skipped and deleted, and row segments no snapshot
// references are deleted.
bool DiskPrefixCache::scan() {
  std::vector<fs::path> snaps;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) {
      if (!opt_.inspect_only) remove_quietly(e.path());
    } else if (ends_with(name, ".rows")) {
      rows_[name] = Rows{(uint64_t)e.file_size(), 0};
    } else if (ends_with(name, ".snap")) {
      snaps.push_back(e.path());
    }
  }
  for (const fs::path& p : snaps) {
    try {
      SnapshotInfo info = read_snapshot_info(p, fingerprint_);
      if (info.file_name() != p.filename().string())
        fail("{}: its name does not match what it holds", p.string());
      for (const RowSegment& g : info.segments)
        if (!rows_.count(g.file_name()))
          fail("{}: its row segment {} is missing", p.string(), g.file_name());
      add_snap(info, fs::file_size(p), file_mtime_ns(p.string()));
    } catch (const std::exception& e) {
      spdlog::warn("prompt cache: skipping {}", e.what());
      stats_.skipped_files++;
      if (!opt_.inspect_only) remove_quietly(p);
    }
  }
  for (auto it = rows_.begin(); it != rows_.end();) {
    if (it->second.refs == 0 && !opt_.inspect_only) {
      remove_quietly(dir_ / it->first);
      it = rows_.erase(it);
    } else {
      stats_.bytes += it->second.bytes;
      ++it;
    }
  }
  return opt_.inspect_only || make_room(0, nullptr);
}

void DiskPrefixCache::add_snap(const SnapshotInfo& info, uint64_t bytes, int64_t last_used) {
  SnapKey key{info.n_tokens, info.key_hash};
  snaps_[key] = Snap{info, bytes, last_used, 0};
  for (const RowSegment& g : info.segments) rows_[g.file_name()].refs++;
  stats_.bytes += bytes;
}

void DiskPrefixCache::evict(std::map<SnapKey, Snap>::iterator it) {
  remove_quietly(dir_ / it->second.info.file_name());
  stats_.bytes -= it->second.bytes;
  for (const RowSegment& g : it->second.info.segments) {
    auto r = rows_.find(g.file_name());
    if (r == rows_.end() || --r->second.refs > 0) continue;
    remove_quietly(dir_ / r->first);
    stats_.bytes -= r->second.bytes;
    rows_.erase(r);
  }
  snaps_.erase(it);
}

// Deletes least recently used snapshots (never a pinned one or `keep`) until `need` more bytes
// fit under the bound; false when they cannot.
bool DiskPrefixCache::make_room(uint64_t need, const SnapKey* keep) {
  std::error_code ec;
  fs::space_info sp = fs::space(dir_, ec);
  uint64_t bound = opt_.max_bytes;
  if (!ec) {
    uint64_t free = sp.available > opt_.free_margin ? sp.available - opt_.free_margin : 0;
    bound = std::min(bound, stats_.bytes + free);
  }
  while (stats_.bytes + need > bound) {
    auto victim = snaps_.end();
    for (auto it = snaps_.begin(); it != snaps_.end(); ++it) {
      if (it->second.pins > 0 || (keep && it->first == *keep)) continue;
      if (victim == snaps_.end() || it->second.last_used < victim->second.last_used) victim = it;
    }
    if (victim == snaps_.end()) return false;
    evict(victim);
    stats_.evictions++;
  }
  return true;
}

void DiskPrefixCache::write(const Pending& p) {
  const Session& s = *p.session;
  const int64_t n = s.pos();
  if (n <= 0 || s.broken || p.keys.size() != (size_t)n) return;
  const std::vector<uint64_t> h = prefix_hashes(p.keys);
  const SnapKey key{n, h[(size_t)n]};
  SnapshotInfo info{n, key.second, {}};
  SnapKey base{0, 0};
  uint64_t need = 0;
  bool have_rows = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.enabled) return;
    if (snaps_.count(key)) return touch(key);
    // The longest snapshot this one extends lends its row segments: only the new rows are written.
    for (int64_t q = n - 1; q > 0 && base.first == 0; q--)
      if (auto it = snaps_.find({q, h[(size_t)q]}); it != snaps_.end()) {
        base = it->first;
        info.segments = it->second.info.segments;
      }
    info.segments.push_back(RowSegment{base.first, n, key.second});
    // The rows may be on disk already, kept by a longer snapshot that outlived this one: they
    // are held (a reference for the time of the write) instead of being written again.
    if (auto r = rows_.find(info.segments.back().file_name()); r != rows_.end()) {
      r->second.refs++;
      have_rows = true;
    }
    need = snap_bytes(s, info.segments.size()) + (have_rows ? 0 : rows_bytes(s, base.first));
    const bool too_large = need > opt_.max_bytes;  // than the whole tier may hold
    if (too_large) stats_.dropped_writes++;
    if (!too_large && !make_room(need, base.first ? &base : nullptr)) {
      release_rows(info.segments.back(), have_rows);
      fail<IoError>("{}: the disk is full (free space below the {} MiB margin)", dir_.string(),
                    opt_.free_margin >> 20);
    }
    if (too_large) return release_rows(info.segments.back(), have_rows);
    if (base.first) snaps_[base].pins++;
  }
  const RowSegment& seg = info.segments.back();
  try {
    if (!have_rows) write_rows_file(dir_, fingerprint_, s, seg);
    write_snapshot_file(dir_, fingerprint_, s, p.keys, info);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (base.first) snaps_[base].pins--;
    if (!have_rows) remove_quietly(dir_ / seg.file_name());
    release_rows(seg, have_rows);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (base.first) snaps_[base].pins--;
  if (!have_rows) {
    uint64_t rb = fs::file_size(dir_ / seg.file_name());
    rows_[seg.file_name()] = Rows{rb, 0};
    stats_.bytes += rb;
  }
  add_snap(info, fs::file_size(dir_ / info.file_name()), now_ns());
  release_rows(seg, have_rows);
  stats_.writes++;
}

// Drops the hold write() took on rows that were already on disk.
void DiskPrefixCache::release_rows(const RowSegment& seg, bool held) {
  if (!held) return;
  if (auto r = rows_.find(seg.file_name()); r != rows_.end()) r->second.refs--;
}

void DiskPrefixCache::touch(const SnapKey& key) {
  auto it = snaps_.find(key);
  if (it == snaps_.end()) return;
  it->second.last_used = now_ns();
  set_mtime(dir_ / it->second.info.file_name(), it->second.last_used);
}

void DiskPrefixCache::put(std::shared_ptr<const Session> s, std::vector<uint64_t> keys) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stats_.enabled || stop_ || opt_.inspect_only) return;
    if (pending_.size() >= std::max<size_t>(1, opt_.backlog)) {
      pending_.pop_front();
      stats_.dropped_writes++;
    }
    pending_.push_back(Pending{std::move(s), std::move(keys)});
  }
  cv_.notify_all();
}

void DiskPrefixCache::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return stats_.ready && pending_.empty() && !writing_; });
}

std::optional<Session> DiskPrefixCache::longest_prefix(std::span<const uint64_t> keys,
                                                       int64_t longer_than) {
  const std::vector<uint64_t> h = prefix_hashes(keys);
  for (;;) {
    SnapKey key{0, 0};
    SnapshotInfo info;
    {
      // A request that comes while the folder is still being opened waits for it: seconds of
      // hashing and scanning against a prefill that may take hours.
      std::unique_lock<std::mutex> lock(mu_);
      idle_cv_.wait(lock, [&] { return stats_.ready; });
      if (!stats_.enabled) return std::nullopt;
      for (int64_t p = (int64_t)keys.size() - 1; p > longer_than && key.first == 0; p--)
        if (auto it = snaps_.find({p, h[(size_t)p]}); it != snaps_.end()) {
          key = it->first;
          info = it->second.info;
          it->second.pins++;
        }
      if (key.first == 0) {
        stats_.misses++;
        return std::nullopt;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    Session s = blank_();
    fs::path bad;
    uint64_t read = 0;
    std::string why;
    try {
      read_snapshot(dir_ / info.file_name(), fingerprint_, info, keys.first((size_t)key.first), s,
                    &bad, &read);
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::lock_guard<std::mutex> lock(mu_);
    snaps_[key].pins--;
    if (!why.empty()) {
      drop_bad(key, bad, why);
      continue;  // a shorter snapshot may still serve
    }
    touch(key);
    stats_.hits++;
    stats_.tokens_reused += (uint64_t)key.first;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    spdlog::info("prompt cache: restored {} tokens from disk ({:.1f} MiB in {} files) in {:.3f} s",
                 key.first, read / 1048576.0, info.segments.size() + 1, took.count());
    return s;
  }
}

// A file that failed its checks: it is deleted, with every snapshot that relies on it.
void DiskPrefixCache::drop_bad(const SnapKey& key, const fs::path& bad, const std::string& why) {
  spdlog::warn("prompt cache: skipping {}; the prompt is computed instead", why);
  stats_.skipped_files++;
  const std::string name = bad.filename().string();
  remove_quietly(bad);
  if (auto r = rows_.find(name); r != rows_.end()) {
    stats_.bytes -= r->second.bytes;
    rows_.erase(r);
  }
  for (auto it = snaps_.begin(); it != snaps_.end();) {
    bool uses = it->first == key;
    for (const RowSegment& g : it->second.info.segments) uses = uses || g.file_name() == name;
    if (uses && it->second.pins == 0) {
      auto next = std::next(it);
      evict(it);
      it = next;
    } else {
      ++it;
    }
  }
}

void DiskPrefixCache::switch_off(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!stats_.enabled) return;
  stats_.enabled = false;
  pending_.clear();
  spdlog::warn("prompt cache: the disk tier is off: {}; serving goes on from memory", why);
}

}  // namespace waste
