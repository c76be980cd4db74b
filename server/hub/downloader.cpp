#include "server/hub/downloader.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/human_bytes.h"

namespace waste::hub {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- the record of completed files ----

struct Record {
  std::string sha256;
  uint64_t size = 0;
  std::string commit;
};

// DIR/.download/state: a header line, then "SHA256 SIZE COMMIT NAME" per verified file (the name
// last, so it may hold spaces). Rewritten whole and atomically after each file. DIR/.download-state
// (one name per line) is kept beside it, because `waste convert` reads that list to tell verified
// shards from unfinished ones.
class StateFile {
 public:
  explicit StateFile(fs::path dest) : dest_(std::move(dest)) { load(); }

  const Record* find(const std::string& name) const {
    auto it = records_.find(name);
    return it == records_.end() ? nullptr : &it->second;
  }

  void add(const std::string& name, Record r) {
    records_[name] = std::move(r);
    std::string state = "waste-download-state 1\n", names;
    for (const auto& [n, rec] : records_) {
      state += fmt::format("{} {} {} {}\n", rec.sha256, rec.size, rec.commit, n);
      names += n + "\n";
    }
    write_file_atomic(dest_ / ".download" / "state", state);
    write_file_atomic(dest_ / ".download-state", names);
  }

 private:
  void load() {
    fs::path p = dest_ / ".download" / "state";
    std::ifstream in(p);
    if (!in) return;
    std::string line;
    if (!std::getline(in, line) || line != "waste-download-state 1")
      fail<FormatError>("{}: not a waste download state file (delete it to start over)",
                        p.string());
    for (int no = 2; std::getline(in, line); no++) {
      std::istringstream ls(line);
      Record r;
      std::string name;
      if (!(ls >> r.sha256 >> r.size >> r.commit) || !std::getline(ls >> std::ws, name) ||
          name.empty())
        fail<FormatError>("{}:{}: malformed record '{}'", p.string(), no, line);
      records_[name] = std::move(r);
    }
  }

  fs::path dest_;
  std::map<std::string, Record> records_;
};

// ---- retries ----

milliseconds backoff(const Settings& s, int failures, std::optional<milliseconds> retry_after) {
  static std::mt19937_64 rng(std::random_device{}());
  double ceiling = std::min<double>((double)s.backoff_cap.count(),
                                    s.backoff_base.count() * std::pow(2.0, failures - 1));
  // Half fixed, half random: many clients that failed together do not come back together.
  std::uniform_real_distribution<double> jitter(0, ceiling / 2);
  milliseconds d((int64_t)(ceiling / 2 + jitter(rng)));
  return retry_after ? std::max(d, *retry_after) : d;
}

template <class F>
auto with_retries(const Settings& s, const std::string& what, F&& fn) {
  for (int failures = 1;; failures++) {
    try {
      return fn();
    } catch (const TransientError& e) {
      if (failures > s.retries)
        fail<IoError>("{}: giving up after {} tries: {}", what, failures, e.what());
      milliseconds d = backoff(s, failures, e.retry_after);
      std::fprintf(stderr, "%s: %s; retrying in %.1f s\n", what.c_str(), e.what(), d.count() / 1e3);
      std::this_thread::sleep_for(d);
    }
  }
}

// ---- the plan ----

struct Item {
  std::string name;
  uint64_t size = 0;
  std::optional<std::string> sha256;
  bool complete = false;
  uint64_t have = 0;  // bytes already in the .part file
};

// A listing names files relative to the repository; anything that could escape DIR, or collide
// with the downloader's own files, is refused.
void check_name(const std::string& name) {
  bool bad = name.empty() || name[0] == '/' || name.find('\\') != std::string::npos ||
             name.find('\0') != std::string::npos || name == ".download-state";
  std::istringstream parts(name);
  std::string seg;
  for (bool first = true; std::getline(parts, seg, '/'); first = false)
    bad = bad || seg.empty() || seg == "." || seg == ".." || (first && seg == ".download");
  if (bad || name.back() == '/') fail<FormatError>("{}: refusing an unsafe file name", name);
}

fs::path part_path(const Settings& s, const std::string& name) {
  return s.dest / ".download" / (name + ".part");
}

uint64_t size_or_zero(const fs::path& p) {
  std::error_code ec;
  uint64_t n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

bool recorded_complete(const Settings& s, const StateFile& state, const Item& it,
                       const std::string& commit) {
  const Record* r = state.find(it.name);
  if (!r || r->size != it.size) return false;
  // The content hash identifies an LFS file across commits; a small file only at its commit.
  bool same = it.sha256 ? r->sha256 == *it.sha256 : r->commit == commit;
  std::error_code ec;
  return same && fs::is_regular_file(s.dest / it.name, ec) &&
         size_or_zero(s.dest / it.name) == r->size;
}

std::vector<Item> make_plan(const Settings& s, Hub& hub, const RepoListing& listing,
                            const StateFile& state) {
  std::vector<Item> items;
  for (const RepoFile& f : listing.files) {
    check_name(f.name);
    Item it;
    it.name = f.name;
    it.sha256 = f.sha256;
    if (f.size) {
      it.size = *f.size;
    } else {  // an older listing without sizes: ask for this one
      FileMeta m =
          with_retries(s, f.name, [&] { return hub.head(s.repo, listing.commit, f.name); });
      it.size = m.size;
      if (!it.sha256) it.sha256 = m.sha256;
    }
    it.complete = recorded_complete(s, state, it, listing.commit);
    uint64_t part = size_or_zero(part_path(s, f.name));
    it.have = it.complete || part > it.size ? 0 : part;
    items.push_back(std::move(it));
  }
  return items;
}

// ---- disk space ----

uint64_t free_bytes(const fs::path& dest) {
  if (const char* v = std::getenv("WASTE_DOWNLOAD_FREE_BYTES")) return std::strtoull(v, 0, 10);
  fs::path p = fs::absolute(dest);
  while (!fs::exists(p) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  return fs::space(p).available;
}

struct SpacePlan {
  uint64_t total = 0, here = 0, to_fetch = 0, free = 0, needed = 0;
  size_t complete = 0;
  bool fits() const { return free >= needed; }
};

SpacePlan space_plan(const Settings& s, const std::vector<Item>& items) {
  SpacePlan p;
  for (const Item& it : items) {
    p.total += it.size;
    p.here += it.complete ? it.size : it.have;
    p.complete += it.complete;
    if (!it.complete) p.to_fetch += it.size - it.have;
  }
  p.free = free_bytes(s.dest);
  // 5% and 64 MiB of slack: the filesystem's own overhead, and room for the state files.
  p.needed = p.to_fetch == 0 ? 0 : p.to_fetch + p.to_fetch / 20 + (64ull << 20);
  return p;
}

void print_dry_run(const Settings& s, const std::string& commit, const std::vector<Item>& items,
                   const SpacePlan& p) {
  fmt::print("{} at {} (commit {})\n", s.repo, s.revision, commit);
  for (const Item& it : items) {
    std::string status = it.complete ? "complete"
                         : it.have   ? fmt::format("partial {}", human_bytes(it.have))
                                     : "to fetch";
    fmt::print("  {:>12}  {:<22}  {}\n", human_bytes(it.size), status, it.name);
  }
  fmt::print(
      "{} files, {} in all; {} complete, {} already here; to fetch {} ({} bytes); free {}; "
      "needed {} (with margin); free after {}\n",
      items.size(), human_bytes(p.total), p.complete, human_bytes(p.here), human_bytes(p.to_fetch),
      p.to_fetch, human_bytes(p.free), human_bytes(p.needed),
      p.free >= p.to_fetch ? human_bytes(p.free - p.to_fetch) : "none");
}

// ---- progress on stderr ----

class Progress {
 public:
  explicit Progress(uint64_t total) : total_(total), tty_(isatty(2)) {}

  void start_file(const std::string& name, size_t index, size_t count) {
    name_ = fmt::format("[{}/{}] {}", index, count, name);
    show(true);
  }
  void add(uint64_t n) {
    done_ += n;
    show(false);
  }
  // A message on its own line, which a progress line being redrawn must not swallow.
  void note(const std::string& msg) {
    if (tty_ && drawn_) std::fputs("\n", stderr);
    drawn_ = false;
    std::fprintf(stderr, "%s\n", msg.c_str());
  }
  void finish() {
    show(true);
    if (tty_) std::fputs("\n", stderr);
  }

 private:
  void show(bool force) {
    auto now = Clock::now();
    // A terminal gets a redrawn line; a log gets a line every 10 s.
    auto every = tty_ ? milliseconds(250) : milliseconds(10'000);
    if (!force && now - last_ < every) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double rate = secs > 0 ? done_ / secs : 0;
    std::string eta = rate > 0 && total_ > done_ ? eta_text((total_ - done_) / rate) : "-";
    std::string line = fmt::format("{}  {} / {}  {}/s  ETA {}", name_, human_bytes(done_),
                                   human_bytes(total_), human_bytes((uint64_t)rate), eta);
    std::fprintf(stderr, tty_ ? "\r\033[K%s" : "%s\n", line.c_str());
    drawn_ = true;
  }
  static std::string eta_text(double s) {
    auto t = (uint64_t)s;
    return fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60);
  }

  uint64_t total_, done_ = 0;
  bool tty_, drawn_ = false;
  std::string name_;
  Clock::time_point start_ = Clock::now(), last_{};
};

// ---- one file ----

class ShaMismatch : public IoError {
 public:
  using IoError::IoError;
};

class FileDownload {
 public:
  FileDownload(const Settings& s, Hub& hub, StateFile& state, Progress& progress,
               const std::string& commit, const Item& item)
      : s_(s), hub_(hub), state_(state), progress_(progress), commit_(commit), item_(item) {}
  ~FileDownload() {
    if (fd_ >= 0) ::close(fd_);
  }

  void run() {
    meta_ = with_retries(s_, item_.name, [&] { return hub_.head(s_.repo, commit_, item_.name); });
    check_meta();
    if (adopt_existing()) return;
    open_part();
    for (int failures = 0, mismatches = 0;;) {
      uint64_t before = have_;
      try {
        if (have_ < meta_.size) attempt();
        publish();
        return;
      } catch (const ShaMismatch& e) {
        if (++mismatches >= 2) fail<IoError>("{}: {} (twice; giving up)", item_.name, e.what());
        progress_.note(fmt::format("{}: {}; downloading it again", item_.name, e.what()));
      } catch (const TransientError& e) {
        failures = have_ > before ? 1 : failures + 1;  // progress restarts the count
        if (failures > s_.retries)
          fail<IoError>("{}: giving up after {} tries without progress: {}", item_.name, failures,
                        e.what());
        milliseconds d = backoff(s_, failures, e.retry_after);
        progress_.note(fmt::format("{}: {} (at byte {} of {}); retrying in {:.1f} s", item_.name,
                                   e.what(), have_, meta_.size, d.count() / 1e3));
        std::this_thread::sleep_for(d);
      }
    }
  }

 private:
  // The listing and the file's own headers must agree, or the revision is not what was planned.
  void check_meta() {
    if (meta_.size != item_.size)
      fail<IoError>("{}: the hub lists {} bytes but resolves {} bytes", item_.name, item_.size,
                    meta_.size);
    if (item_.sha256 && meta_.sha256 && *item_.sha256 != *meta_.sha256)
      fail<IoError>("{}: the hub lists sha256 {} but its linked etag is {}", item_.name,
                    *item_.sha256, *meta_.sha256);
    if (!meta_.sha256) meta_.sha256 = item_.sha256;
  }

  // A file already in place but not recorded (a kill between rename and record, or a copy made
  // by hand) is kept when its hash matches.
  bool adopt_existing() {
    fs::path target = s_.dest / item_.name;
    if (!meta_.sha256 || size_or_zero(target) != meta_.size) return false;
    Sha256 sha;
    hash_range(target, 0, meta_.size, sha);
    std::string got = sha.hex();
    if (got != *meta_.sha256) return false;
    state_.add(item_.name, {got, meta_.size, commit_});
    progress_.note(fmt::format("{}: already in place and verified", item_.name));
    return true;
  }

  void hash_range(const fs::path& p, uint64_t from, uint64_t to, Sha256& sha) {
    std::ifstream in(p, std::ios::binary);
    in.seekg((std::streamoff)from);
    std::vector<char> buf(1 << 20);
    for (uint64_t left = to - from; left > 0;) {
      in.read(buf.data(), (std::streamsize)std::min<uint64_t>(left, buf.size()));
      if (in.gcount() <= 0) fail<IoError>("{}: read failed while hashing", p.string());
      sha.update(buf.data(), (size_t)in.gcount());
      left -= (uint64_t)in.gcount();
    }
  }

  void open_part() {
    part_ = part_path(s_, item_.name);
    fs::create_directories(part_.parent_path());
    fd_ = ::open(part_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail<IoError>("{}: cannot open {}: {}", item_.name, part_.string(), strerror(errno));
    struct stat st;
    if (fstat(fd_, &st) != 0) fail<IoError>("{}: stat failed: {}", part_.string(), strerror(errno));
    have_ = (uint64_t)st.st_size;
    if (have_ > meta_.size) {
      progress_.note(
          fmt::format("{}: partial file is longer than the file; starting over", item_.name));
      truncate();
    }
    // The hash covers the bytes of an earlier run once, so the resumed stream can extend it.
    if (have_ > 0) hash_range(part_, 0, have_, sha_);
  }

  void truncate() {
    if (ftruncate(fd_, 0) != 0)
      fail<IoError>("{}: cannot truncate: {}", part_.string(), strerror(errno));
    have_ = 0;
    sha_.reset();
  }

  // One GET from the current size; returns with every byte in place or throws.
  void attempt() {
    std::map<std::string, std::string> headers;
    if (have_ > 0) headers["Range"] = fmt::format("bytes={}-", have_);
    BodyHandler h;
    h.on_headers = [&](const Response& r) { return accept(r); };
    h.on_data = [&](const char* d, size_t n) { append(d, n); };
    // The resolve URL is asked again on every try: the CDN URL it redirects to is signed and
    // expires.
    Response r = hub_.client().request("GET", hub_.resolve_url(s_.repo, commit_, item_.name),
                                       headers, true, &h);
    if (have_ != meta_.size)
      throw TransientError(
          fmt::format("GET {}: body ended after {} of {} bytes", r.url.str(), have_, meta_.size));
  }

  // Checks status and headers before a byte is written.
  bool accept(const Response& r) {
    if (r.status == 206) {
      check_content_range(r);
      check_length(r, meta_.size - have_);
      return true;
    }
    if (r.status == 200) {
      if (have_ > 0) {
        progress_.note(
            fmt::format("{}: {} ignored the range request (200, not 206); starting "
                        "over from byte 0",
                        item_.name, r.url.origin()));
        truncate();
      }
      check_length(r, meta_.size);
      return true;
    }
    if (r.status == 416) {
      truncate();
      throw TransientError(fmt::format(
          "GET {}: HTTP 416 for a range the file should have; starting over", r.url.str()));
    }
    if (r.status == 429 || r.status >= 500)
      throw TransientError(fmt::format("GET {}: HTTP {}", r.url.str(), r.status), retry_after(r));
    fail<IoError>("{}", describe_status(r));
  }

  void check_content_range(const Response& r) {
    std::string cr = r.header("content-range");
    uint64_t first = 0, last = 0, total = 0;
    bool ok = std::sscanf(cr.c_str(), "bytes %" SCNu64 "-%" SCNu64 "/%" SCNu64, &first, &last,
                          &total) == 3;
    if (!ok || first != have_ || last + 1 != meta_.size || total != meta_.size)
      throw TransientError(
          fmt::format("GET {}: 206 with Content-Range '{}', expected bytes "
                      "{}-{}/{}",
                      r.url.str(), cr, have_, meta_.size - 1, meta_.size));
  }

  void check_length(const Response& r, uint64_t expected) {
    auto len = r.content_length();
    if (len && *len != expected)
      throw TransientError(fmt::format("GET {}: Content-Length {} but {} bytes expected",
                                       r.url.str(), *len, expected));
  }

  void append(const char* d, size_t n) {
    bool over = have_ + n > meta_.size;
    if (over) n = meta_.size - have_;
    for (size_t off = 0; off < n;) {
      ssize_t w = ::pwrite(fd_, d + off, n - off, (off_t)(have_ + off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) fail<IoError>("{}: writing {}: {}", item_.name, part_.string(), strerror(errno));
      off += (size_t)w;
    }
    sha_.update(d, n);
    have_ += n;
    progress_.add(n);
    if (over) throw TransientError("the server sent more bytes than the file has");
  }

  void publish() {
    std::string got = sha_.hex();
    if (meta_.sha256 && got != *meta_.sha256) {
      truncate();
      throw ShaMismatch(
          fmt::format("sha256 {} does not match the hub's {}; the bytes were "
                      "discarded",
                      got, *meta_.sha256));
    }
    if (fsync(fd_) != 0) fail<IoError>("{}: fsync: {}", part_.string(), strerror(errno));
    fs::path target = s_.dest / item_.name;
    fs::create_directories(target.parent_path());
    fs::rename(part_, target);
    sync_dir(target.parent_path());
    state_.add(item_.name, {got, meta_.size, commit_});
  }

  const Settings& s_;
  Hub& hub_;
  StateFile& state_;
  Progress& progress_;
  const std::string& commit_;
  const Item& item_;
  FileMeta meta_;
  fs::path part_;
  int fd_ = -1;
  uint64_t have_ = 0;
  Sha256 sha_;
};

// One download into a folder at a time: two would write the same .part files.
int lock_dest(const Settings& s) {
  fs::create_directories(s.dest / ".download");
  fs::path p = s.dest / ".download" / "lock";
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail<IoError>("{}: {}", p.string(), strerror(errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0)
    fail<IoError>("{}: another waste download is writing to this folder", s.dest.string());
  return fd;  // held until the process exits
}

DownloadOutcome fetch_all(const Settings& s, Hub& hub, StateFile& state, const std::string& commit,
                          const std::vector<Item>& items, const SpacePlan& plan) {
  Progress progress(plan.to_fetch);
  size_t index = 0, count = items.size() - plan.complete;
  for (const Item& it : items) {
    if (it.complete) continue;
    // Re-checked per file: something else may be filling the same disk.
    uint64_t free = free_bytes(s.dest);
    if (free < it.size - it.have) {
      progress.note(fmt::format("{}: needs {} but only {} is free on {}; stopping", it.name,
                                human_bytes(it.size - it.have), human_bytes(free),
                                s.dest.string()));
      return DownloadOutcome::kNoSpace;
    }
    progress.start_file(it.name, ++index, count);
    FileDownload(s, hub, state, progress, commit, it).run();
  }
  progress.finish();
  return DownloadOutcome::kDone;
}

}  // namespace

DownloadOutcome download(const Settings& s) {
  Hub hub(s.endpoint, s.client);
  RepoListing listing = with_retries(s, s.repo, [&] { return hub.list(s.repo, s.revision); });
  if (!s.dry_run) lock_dest(s);  // before reading the state another run could be writing
  StateFile state(s.dest);
  std::vector<Item> items = make_plan(s, hub, listing, state);
  SpacePlan plan = space_plan(s, items);
  if (s.dry_run) {
    print_dry_run(s, listing.commit, items, plan);
    if (!plan.fits()) std::fprintf(stderr, "waste download: not enough free space\n");
    return plan.fits() ? DownloadOutcome::kDone : DownloadOutcome::kNoSpace;
  }
  std::fprintf(stderr, "%s at %s (commit %s): %zu files, %zu complete, %s to fetch\n",
               s.repo.c_str(), s.revision.c_str(), listing.commit.c_str(), items.size(),
               plan.complete, human_bytes(plan.to_fetch).c_str());
  if (!plan.fits()) {
    std::fprintf(stderr, "waste download: %s needs %s (with margin) but %s is free\n",
                 s.dest.string().c_str(), human_bytes(plan.needed).c_str(),
                 human_bytes(plan.free).c_str());
    return DownloadOutcome::kNoSpace;
  }
  DownloadOutcome rc = fetch_all(s, hub, state, listing.commit, items, plan);
  if (rc == DownloadOutcome::kDone)
    fmt::print("{}: {} files complete at commit {}\n", s.dest.string(), items.size(),
               listing.commit);
  return rc;
}

}  // namespace waste::hub
