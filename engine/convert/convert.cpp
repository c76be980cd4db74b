#include "engine/convert/convert.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include <simdjson.h>

#include "engine/base/atomic_file.h"
#include "engine/base/crc32.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/base/human_bytes.h"
#include "engine/base/platform.h"
#include "engine/base/stopwatch.h"
#include "engine/base/thread_pool.h"
#include "engine/convert/convert_plan.h"
#include "engine/convert/convert_side.h"
#include "engine/convert/safetensors.h"
#include "engine/convert/vq_tile.h"
#include "engine/format/container.h"
#include "engine/format/expert_bank.h"
#include "engine/kernels/quantize.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr int kDoneVersion = 1;
constexpr uint32_t kCodebookMagic = 0x4B424357;  // "WCBK"
constexpr int64_t kTrunkChunk = 1 << 22;         // elements per trunk read

using Log = std::function<void(const std::string&)>;

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{}m{:02.0f}s", (int)(s / 60), s - 60 * (int)(s / 60));
  return fmt::format("{}h{:02d}m", (int)(s / 3600), (int)(s / 60) % 60);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// The progress line: work units done against the total, ETA from this run's rate.
class Progress {
 public:
  Progress(bool on, uint64_t total) : on_(on), tty_(on && ::isatty(2)), total_(total) {}
  void add(uint64_t units, const std::string& where) {
    if (!on_) return;
    std::lock_guard<std::mutex> lock(mu_);
    done_ += units;
    double now = seconds_since(t0_);
    if (now - last_ < (tty_ ? 0.5 : 10.0) && done_ < total_) return;
    last_ = now;
    double frac = total_ ? (double)done_ / (double)total_ : 1.0;
    double eta = done_ ? now * (double)(total_ - std::min(done_, total_)) / (double)done_ : 0;
    std::string line = fmt::format("convert: {} | {:.1f}% | {} elapsed, ETA {}", where, 100 * frac,
                                   duration(now), duration(eta));
    if (tty_)
      fmt::print(stderr, "\r{}\x1b[K", line);
    else
      fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  }
  void end_line() {
    if (tty_) fmt::print(stderr, "\n");
  }

 private:
  bool on_, tty_;
  uint64_t total_, done_ = 0;
  std::mutex mu_;
  SteadyClock::time_point t0_ = SteadyClock::now();
  double last_ = -100;
};

std::string recipe_string(const VqRecipe& r) {
  return fmt::format("vq{}x{} iters {} sample {}x{} seed {}", r.stages, r.entries, r.iters,
                     r.sample_experts, r.train_vectors, r.seed);
}

uint64_t codebook_record_bytes(const VqRecipe& r) {
  return 16 + (uint64_t)r.entries * kVqDim * 2;
}

// Whole-file pread of `n` bytes at `off`; false on a short file.
bool read_exact(const fs::path& p, uint64_t off, void* dst, size_t n) {
  std::ifstream f(p, std::ios::binary);
  f.seekg((std::streamoff)off);
  f.read(static_cast<char*>(dst), (std::streamsize)n);
  return (size_t)f.gcount() == n;
}

// Releases source shards once every consumer (the trunk, each expert layer) is done
// (docs/CONVERTER.md §4.4). The ledger <src>/.reclaimed is appended and fsynced before each unlink.
class Reclaimer {
 public:
  Reclaimer(const ConvertOptions& opt, const ConvertPlan& plan, const Log& log,
            std::vector<std::string>* report)
      : mode_(opt.reclaim), src_(opt.src), log_(log), report_(report) {
    for (const std::string& s : plan.trunk_shards) consumers_[s].insert("trunk");
    for (const ExpertLayer& l : plan.layers)
      for (const std::string& s : l.shards) consumers_[s].insert(fmt::format("layer {}", l.layer));
    std::ifstream ledger(src_ / ".reclaimed");
    for (std::string line; std::getline(ledger, line);)
      if (!line.empty()) ledger_.insert(line);
    if (fs::exists(src_ / ".download-state")) {
      verified_.emplace();
      std::ifstream st(src_ / ".download-state");
      for (std::string line; std::getline(st, line);)
        if (!line.empty()) verified_->insert(line);
    }
  }

  void mark_done(const std::string& consumer) { done_.insert(consumer); }

  // Refuses, before anything is written or deleted, a run that could not finish.
  void check_start() const {
    for (const auto& [shard, cons] : consumers_) {
      std::string needer;
      for (const std::string& c : cons)
        if (!done_.count(c)) needer = c;
      if (needer.empty()) continue;
      fs::path p = src_ / shard;
      if (!fs::exists(p)) {
        if (ledger_.count(shard))
          fail<UsageError>(
              "{}: reclaimed by an earlier run but still needed by {}; download it "
              "again",
              p.string(), needer);
        fail<IoError>("{}: missing, and needed by {}", p.string(), needer);
      }
      if (verified_ && !verified_->count(shard))
        fail<UsageError>("{}: not finished downloading (not in .download-state), needed by {}",
                         p.string(), needer);
    }
    if (mode_ != Reclaim::kOn || !verified_) return;
    for (const auto& [shard, cons] : consumers_)
      if (fs::exists(src_ / shard) && !verified_->count(shard))
        fail<UsageError>(
            "--reclaim on: {} is on disk but not in .download-state (unverified); "
            "refusing to delete anything",
            (src_ / shard).string());
  }

  // Shards whose consumers are all done; `same_device` callers use it for the space forecast.
  std::vector<std::string> spent(const std::set<std::string>& done) const {
    std::vector<std::string> out;
    for (const auto& [shard, cons] : consumers_) {
      bool all = true;
      for (const std::string& c : cons) all = all && done.count(c);
      if (all) out.push_back(shard);
    }
    return out;
  }
  const std::set<std::string>& done() const { return done_; }

  void release() {
    if (mode_ == Reclaim::kOff) return;
    for (const std::string& shard : spent(done_)) {
      if (handled_.count(shard)) continue;
      handled_.insert(shard);
      fs::path p = src_ / shard;
      if (!fs::exists(p)) continue;
      std::error_code ec;
      uint64_t size = fs::file_size(p, ec);
      if (mode_ == Reclaim::kDry) {
        log_(fmt::format("reclaim (dry): would delete {} ({})", p.string(),
                         human_bytes((uint64_t)size)));
        report_->push_back(shard);
        continue;
      }
      append_ledger(shard);
      if (::unlink(p.c_str()) != 0)
        fail<IoError>("{}: cannot delete: {}", p.string(), std::strerror(errno));
      log_(fmt::format("reclaim: deleted {} ({})", p.string(), human_bytes((uint64_t)size)));
      report_->push_back(shard);
    }
  }

 private:
  void append_ledger(const std::string& shard) {
    fs::path p = src_ / ".reclaimed";
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) fail<IoError>("{}: cannot open: {}", p.string(), std::strerror(errno));
    std::string line = shard + "\n";
    bool ok = ::write(fd, line.data(), line.size()) == (ssize_t)line.size() && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) fail<IoError>("{}: cannot record {}", p.string(), shard);
  }

  Reclaim mode_;
  fs::path src_;
  const Log& log_;
  std::vector<std::string>* report_;
  std::map<std::string, std::set<std::string>> consumers_;
  std::set<std::string> done_, ledger_, handled_;
  std::optional<std::set<std::string>> verified_;
};

class Converter {
 public:
  Converter(const ConvertOptions& opt, Checkpoint& ck, ConvertPlan plan, const Log& log)
      : opt_(opt),
        ck_(ck),
        plan_(std::move(plan)),
        log_(log),
        out_(opt.out),
        state_(opt.out / kConvertStateDir),
        pool_(opt.jobs),
        nearest_(nearest_kernel(opt.isa)),
        tile_(tile_ops(opt.isa)) {}

  ConvertReport run();

 private:
  void hook(const char* step) const {
    if (opt_.step_hook) opt_.step_hook(step);
  }
  fs::path part_path(int layer) const { return state_ / fmt::format("codebooks-L{}.bin", layer); }
  fs::path done_path(int layer) const { return state_ / fmt::format("layer-L{}.done", layer); }
  fs::path bank_path(int layer) const { return out_ / fmt::format("experts-L{}.bin", layer); }
  uint64_t bank_bytes() const { return plan_.geometry.stride * (uint64_t)plan_.config.n_experts; }
  uint64_t vectors_per_expert() const {
    return 3 * (uint64_t)plan_.geometry.inter * (uint64_t)plan_.geometry.width / kVqDim;
  }

  void remove_stale_temporaries() const;
  bool trunk_done() const;
  bool layer_done(const ExpertLayer& l, LayerReport* rep) const;
  void check_space(const Reclaimer& r, bool trunk_is_done) const;
  void write_trunk(Progress& pg);
  void write_trunk_tensor(const TrunkTensor& t, AtomicFile& f);
  KindBooks train_kind(const ExpertLayer& l, int kind);
  void convert_layer(const ExpertLayer& l, LayerReport* rep, Progress& pg);
  void publish();

  const ConvertOptions& opt_;
  Checkpoint& ck_;
  ConvertPlan plan_;
  const Log& log_;
  fs::path out_, state_;
  ThreadPool pool_;
  NearestFn nearest_;
  TileOps tile_;
};

void Converter::remove_stale_temporaries() const {
  for (const fs::path& dir : {out_, state_, state_ / "headers"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename().string().find(".tmp") != std::string::npos) fs::remove(e.path());
}

bool Converter::trunk_done() const {
  fs::path done = state_ / "trunk.done";
  std::error_code ec;
  if (!fs::exists(done) || fs::file_size(out_ / "trunk.bin", ec) != plan_.trunk_bytes || ec)
    return false;
  simdjson::dom::parser p;
  simdjson::padded_string text(read_small_file(done, 1 << 20));
  simdjson::dom::element d;
  uint64_t version = 0, bytes = 0, hash = 0;
  return !p.parse(text).get(d) && !d["version"].get(version) && version == kDoneVersion &&
         !d["trunk_bytes"].get(bytes) && bytes == plan_.trunk_bytes && !d["index_hash"].get(hash) &&
         hash == fnv1a(plan_.trunk_index);
}

// A layer is done when its .done record matches this run's recipe and geometry, its codebook
// part has the recorded CRC and its bank has the recorded size and record CRCs.
bool Converter::layer_done(const ExpertLayer& l, LayerReport* rep) const {
  if (!fs::exists(done_path(l.layer))) return false;
  simdjson::dom::parser p;
  simdjson::padded_string text(read_small_file(done_path(l.layer), 64 << 20));
  simdjson::dom::element d;
  uint64_t v = 0, stride = 0, bytes = 0, base = 0, books_crc = 0, records_crc = 0;
  std::string_view recipe;
  if (p.parse(text).get(d) || d["version"].get(v) || v != kDoneVersion || d["stride"].get(stride) ||
      stride != plan_.geometry.stride || d["bytes"].get(bytes) || bytes != bank_bytes() ||
      d["codebook_base"].get(base) || base != (uint64_t)l.codebook_base ||
      d["recipe"].get(recipe) || recipe != recipe_string(plan_.recipe) ||
      d["books_crc"].get(books_crc) || d["records_crc"].get(records_crc))
    return false;
  std::error_code ec;
  if (fs::file_size(bank_path(l.layer), ec) != bytes || ec) return false;
  uint64_t part_bytes = 3 * plan_.recipe.stages * codebook_record_bytes(plan_.recipe);
  if (fs::file_size(part_path(l.layer), ec) != part_bytes || ec) return false;
  std::string part = read_small_file(part_path(l.layer), part_bytes);
  if (crc32(part.data(), part.size()) != books_crc) return false;
  // The headers walk: each record names this layer, its own id and the base; CRCs chain.
  std::vector<uint32_t> crcs((size_t)plan_.config.n_experts);
  for (int e = 0; e < plan_.config.n_experts; e++) {
    ExpertHeader h;
    if (!read_exact(bank_path(l.layer), (uint64_t)e * stride, &h, sizeof h)) return false;
    if (h.magic != kExpertMagic || h.layer != l.layer || h.expert_id != e ||
        h.codebook_id != l.codebook_base)
      return false;
    crcs[(size_t)e] = h.crc32;
  }
  if (crc32(crcs.data(), crcs.size() * 4) != records_crc) return false;
  simdjson::dom::array errs;
  if (!d["errors"].get_array().get(errs))
    for (auto e : errs) {
      double x = 0;
      if (!e.get_double().get(x)) rep->errors.push_back(x);
    }
  return true;
}

// Refuses to start without room for the rest of the output; with reclaim on one device, the
// space the spent shards give back along the way counts.
void Converter::check_space(const Reclaimer& r, bool trunk_is_done) const {
  struct statvfs vfs;
  if (::statvfs(out_.c_str(), &vfs) != 0) return;
  uint64_t avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
  struct stat a, b;
  bool same_device = opt_.reclaim == Reclaim::kOn && ::stat(out_.c_str(), &a) == 0 &&
                     ::stat(opt_.src.c_str(), &b) == 0 && a.st_dev == b.st_dev;
  std::set<std::string> done = r.done(), freed;
  int64_t used = 0, peak = 0;
  auto free_spent = [&] {
    if (!same_device) return;
    for (const std::string& s : r.spent(done)) {
      std::error_code ec;
      if (freed.insert(s).second) used -= (int64_t)fs::file_size(opt_.src / s, ec);
    }
  };
  auto add = [&](uint64_t n, const std::string& consumer) {
    used += (int64_t)n;
    peak = std::max(peak, used);
    done.insert(consumer);
    free_spent();
  };
  free_spent();
  if (!trunk_is_done) add(plan_.trunk_bytes, "trunk");
  for (const ExpertLayer& l : plan_.layers)
    if (!done.count(fmt::format("layer {}", l.layer)))
      add(bank_bytes() + 3 * plan_.recipe.stages * codebook_record_bytes(plan_.recipe),
          fmt::format("layer {}", l.layer));
  add((uint64_t)plan_.n_books() * codebook_record_bytes(plan_.recipe) + (16u << 20), "side");
  uint64_t need = (uint64_t)std::max<int64_t>(peak, 0) / 100 * 101 + (64u << 20);
  if (avail < need)
    fail<IoError>("{}: {} free, but the rest of the conversion needs about {}{}", out_.string(),
                  human_bytes((uint64_t)avail), human_bytes((uint64_t)need),
                  opt_.reclaim == Reclaim::kOn ? "" : " (--reclaim on may lower the peak)");
}

void Converter::write_trunk_tensor(const TrunkTensor& t, AtomicFile& f) {
  if (f.size() != t.off)
    fail("internal: trunk tensor {} at {} but the file is at {}", t.name, t.off, f.size());
  const int64_t rows = t.rows, cols = t.cols;
  const int64_t chunk_rows = std::max<int64_t>(1, kTrunkChunk / std::max<int64_t>(cols, 1));
  Matrix m{t.fmt, rows, cols, nullptr, nullptr};
  std::vector<uint8_t> scales, payload;
  std::vector<float> w;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    int64_t n = std::min(chunk_rows, rows - r0);
    w.resize((size_t)(n * cols));
    ck_.read_elements(t.name, r0 * cols, n * cols, w.data());
    if (t.fmt == TensorFormat::kF32) {
      f.write(w.data(), w.size() * 4);
      continue;
    }
    // Rows are independent: quantize ranges in parallel, place them by row.
    payload.resize((size_t)(n * m.row_bytes()));
    size_t s0 = scales.size();
    scales.resize(s0 + (size_t)(n * m.groups() * 2));
    pool_.parallel_for(n, 16, [&](int64_t b, int64_t e) {
      std::vector<uint8_t> p, s;
      quantize_matrix(t.fmt, w.data() + b * cols, e - b, cols, &p, &s);
      std::memcpy(payload.data() + b * m.row_bytes(), p.data(), p.size());
      std::memcpy(scales.data() + s0 + b * m.groups() * 2, s.data(), s.size());
    });
    f.write(payload.data(), payload.size());
  }
  if (!scales.empty()) f.write(scales.data(), scales.size());
}

void Converter::write_trunk(Progress& pg) {
  AtomicFile f(out_ / "trunk.bin");
  for (const TrunkTensor& t : plan_.trunk) {
    write_trunk_tensor(t, f);
    hook("trunk tensor");
    pg.add((uint64_t)(t.rows * t.cols) / 48 + 1, "trunk " + t.name);
  }
  f.commit();
  hook("trunk.bin");
  write_file_atomic(
      state_ / "trunk.done",
      fmt::format("{{\"version\":{},\"trunk_bytes\":{},\"index_hash\":{},"
                  "\"tensors\":{}}}\n",
                  kDoneVersion, plan_.trunk_bytes, fnv1a(plan_.trunk_index), plan_.trunk.size()));
  hook("trunk.done");
}

KindBooks Converter::train_kind(const ExpertLayer& l, int kind) {
  const VqRecipe& r = plan_.recipe;
  const int E = plan_.config.n_experts;
  int step = std::max(1, E / std::max(1, r.sample_experts));
  std::vector<int> ids;
  for (int e = 0; e < E && (int)ids.size() < r.sample_experts; e += step) ids.push_back(e);
  uint64_t per = (uint64_t)std::max<int64_t>(1, r.train_vectors / (int64_t)ids.size());
  std::vector<std::vector<float>> parts(ids.size());
  // Each sampled expert's vectors land in their own slot: the set is the same for any thread
  // count. The permutation's seed depends on (layer, expert) only, as in the original.
  pool_.parallel_for((int64_t)ids.size(), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      int64_t rows = 0, cols = 0;
      std::vector<float> w;
      ck_.read_all(plan_.expert_tensor(l.layer, ids[i], kind), &w, &rows, &cols);
      std::vector<float> x(w.size()), scale((size_t)rows);
      normalize_rows(w.data(), rows, cols, x.data(), scale.data());
      Rng rng(derive_seed(r.seed, (uint64_t)l.layer, (uint64_t)ids[i], 0x73616d70 /* samp */));
      std::vector<uint32_t> pick = sample_ids(x.size() / kVqDim, per, rng);
      std::vector<float>& out = parts[(size_t)i];
      out.resize(pick.size() * kVqDim);
      for (size_t k = 0; k < pick.size(); k++)
        std::memcpy(&out[k * kVqDim], &x[(size_t)pick[k] * kVqDim], kVqDim * sizeof(float));
    }
  });
  std::vector<float> all;
  for (auto& p : parts) all.insert(all.end(), p.begin(), p.end());
  static const char* kKinds[3] = {"gate", "up", "down"};
  std::string what = fmt::format("layer {} {}", l.layer, kKinds[kind]);
  return train_books(std::move(all), r,
                     derive_seed(r.seed, (uint64_t)l.layer, (uint64_t)kind, 0x626f6f6b), opt_.isa,
                     &pool_, what.c_str());
}

void Converter::convert_layer(const ExpertLayer& l, LayerReport* rep, Progress& pg) {
  const RecordGeometry& g = plan_.geometry;
  const VqRecipe& r = plan_.recipe;
  const int E = plan_.config.n_experts;
  KindBooks books[3];
  for (int k = 0; k < 3; k++) books[k] = train_kind(l, k);
  pg.add(3 * (uint64_t)r.train_vectors * (uint64_t)(r.iters + 1),
         fmt::format("layer {} codebooks", l.layer));
  // The codebook part first: a bank without its books is never taken as done.
  {
    AtomicFile f(part_path(l.layer));
    for (int k = 0; k < 3; k++) {
      std::vector<uint16_t> body = books_f16(books[k]);
      for (int s = 0; s < r.stages; s++) {
        uint32_t id = (uint32_t)(l.codebook_base + k * r.stages + s);
        uint32_t hdr[4] = {kCodebookMagic, (id & 0xffff) | (4u << 16) | ((uint32_t)kVqDim << 24),
                           (uint32_t)r.entries, 0};
        f.write(hdr, sizeof hdr);
        f.write(body.data() + (size_t)s * r.entries * kVqDim, (size_t)r.entries * kVqDim * 2);
      }
    }
    f.commit();
  }
  hook("codebooks part");

  fs::path tmp = bank_path(l.layer);
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail<IoError>("{}: cannot create: {}", tmp.string(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (int rc = reserve_file(fd, (uint64_t)bank_bytes()); rc == ENOSPC)
    fail<IoError>("{}: no space for {}", tmp.string(), human_bytes((uint64_t)bank_bytes()));
  else if (rc != 0)
    fail<IoError>("{}: cannot size: {}", tmp.string(), std::strerror(rc));

  std::vector<double> errors((size_t)E * 3);
  std::vector<uint32_t> crcs((size_t)E);
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  const uint64_t gate = g.gate_bytes(), down = g.down_bytes();
  const uint64_t idx_off[3] = {kExpertHeaderBytes, kExpertHeaderBytes + gate,
                               kExpertHeaderBytes + 2 * gate};
  const uint64_t scale_off[3] = {0, (uint64_t)g.inter, 2 * (uint64_t)g.inter};
  pool_.parallel_for(pool_.size(), 1, [&](int64_t, int64_t) {
    AlignedBuffer rec(g.stride);
    std::vector<float> w;  // one matrix at a time, its pages reused
    try {
      for (int e; !failed && (e = next++) < E;) {
        std::memset(rec.data(), 0, g.stride);
        auto* scales =
            reinterpret_cast<uint16_t*>(rec.data() + kExpertHeaderBytes + 2 * gate + down);
        for (int k = 0; k < 3; k++) {
          int64_t rows = 0, cols = 0;
          ck_.read_all(plan_.expert_tensor(l.layer, e, k), &w, &rows, &cols);
          EncodeError err = encode_matrix(w.data(), rows, cols, books[k], nearest_, tile_,
                                          rec.data() + idx_off[k], scales + scale_off[k]);
          errors[(size_t)e * 3 + k] = err.relative();
        }
        finish_record(rec.data(), g, l.layer, e, (int)l.codebook_base);
        ExpertHeader h;
        std::memcpy(&h, rec.data(), sizeof h);
        crcs[(size_t)e] = h.crc32;
        uint8_t* p = rec.data();
        for (uint64_t n = g.stride, off = (uint64_t)e * g.stride; n > 0;) {
          ssize_t put = ::pwrite(fd, p, n, (off_t)off);
          if (put < 0 && errno == EINTR) continue;
          if (put <= 0) fail<IoError>("{}: write failed: {}", tmp.string(), std::strerror(errno));
          p += put, n -= (uint64_t)put, off += (uint64_t)put;
        }
        hook("expert");
        pg.add(vectors_per_expert(), fmt::format("layer {} expert {}/{}", l.layer, e + 1, E));
      }
    } catch (...) {
      failed = true;
      throw;
    }
  });
  if (::fsync(fd) != 0) fail<IoError>("{}: fsync failed: {}", tmp.string(), std::strerror(errno));
  if (::rename(tmp.c_str(), bank_path(l.layer).c_str()) != 0)
    fail<IoError>("{}: rename failed: {}", bank_path(l.layer).string(), std::strerror(errno));
  sync_dir(out_);
  hook("bank");

  std::string part = read_small_file(part_path(l.layer), 1 << 30);
  std::string errs;
  for (double x : errors) errs += fmt::format("{}{:.6g}", errs.empty() ? "" : ",", x);
  write_file_atomic(done_path(l.layer),
                    fmt::format("{{\"version\":{},\"layer\":{},\"experts\":{},\"stride\":{},"
                                "\"bytes\":{},\"codebook_base\":{},\"recipe\":{},"
                                "\"books_crc\":{},\"records_crc\":{},\"errors\":[{}]}}\n",
                                kDoneVersion, l.layer, E, g.stride, bank_bytes(), l.codebook_base,
                                json_quote(recipe_string(r)), crc32(part.data(), part.size()),
                                crc32(crcs.data(), crcs.size() * 4), errs));
  hook("layer.done");
  rep->errors = std::move(errors);
}

void Converter::publish() {
  {
    AtomicFile f(out_ / "codebooks.bin");
    for (const ExpertLayer& l : plan_.layers) f.write(read_small_file(part_path(l.layer), 1 << 30));
    f.commit();
  }
  hook("codebooks.bin");
  write_side_files(opt_.src, out_, plan_, opt_.read_specials, log_);
  hook("side files");
  const VqRecipe& r = plan_.recipe;
  std::string layers;
  for (const ExpertLayer& l : plan_.layers)
    layers += fmt::format(
        "{}\"{}\":{{\"file\":\"experts-L{}.bin\",\"experts\":{},\"bytes\":{},"
        "\"codebook_base\":{}}}",
        layers.empty() ? "" : ",\n  ", l.layer, l.layer, plan_.config.n_experts, bank_bytes(),
        l.codebook_base);
  std::string manifest = fmt::format(
      "{{\"format_version\":0,\"arch\":{},\"tensor_prefix\":{},\n\"config\":{},\n"
      "\"expert_quant\":{{\"fmt\":\"VQ{}R\",\"stages\":{},\"vec_dim\":8,\"entries\":{},"
      "\"index_block\":64,\"index_bits\":8,\"bits_per_weight\":{}}},\n"
      "\"layers\":{{\n  {}}},\n\"trunk\":{}}}\n",
      json_quote(plan_.arch), json_quote(plan_.prefix), plan_.config_json, r.stages, r.stages,
      r.entries, r.stages, layers, plan_.trunk_index);
  write_file_atomic(out_ / "manifest.json", manifest);
  hook("manifest");
  fs::remove_all(state_);
  sync_dir(out_);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ConvertReport Converter::run() {
  auto t0 = SteadyClock::now();
  ConvertReport rep;
  rep.trunk_tensors = plan_.trunk.size();
  remove_stale_temporaries();
  Reclaimer rc(opt_, plan_, log_, &rep.reclaimed);
  rep.trunk_resumed = trunk_done();
  if (rep.trunk_resumed) rc.mark_done("trunk");
  std::vector<LayerReport> layers(plan_.layers.size());
  uint64_t total = rep.trunk_resumed ? 0 : plan_.trunk_bytes / 24;
  for (size_t i = 0; i < plan_.layers.size(); i++) {
    layers[i].layer = plan_.layers[i].layer;
    layers[i].resumed = layer_done(plan_.layers[i], &layers[i]);
    if (layers[i].resumed) {
      rc.mark_done(fmt::format("layer {}", layers[i].layer));
      rep.layers_resumed++;
    } else {
      total += vectors_per_expert() * (uint64_t)plan_.config.n_experts +
               3 * (uint64_t)plan_.recipe.train_vectors * (uint64_t)(plan_.recipe.iters + 1);
    }
  }
  if (rep.trunk_resumed || rep.layers_resumed)
    log_(fmt::format("resuming: trunk {}, {} of {} expert layers already done",
                     rep.trunk_resumed ? "done" : "to do", rep.layers_resumed, layers.size()));
  rc.check_start();
  if (opt_.check_space) check_space(rc, rep.trunk_resumed);
  rc.release();
  Progress pg(opt_.progress, total);
  if (!rep.trunk_resumed) {
    write_trunk(pg);
    rc.mark_done("trunk");
    rc.release();  // only now: the trunk is published and its record fsynced (docs/CONVERTER.md
                   // §4.4)
  }
  for (size_t i = 0; i < plan_.layers.size(); i++) {
    LayerReport& lr = layers[i];
    if (!lr.resumed) {
      convert_layer(plan_.layers[i], &lr, pg);
      rep.layers_converted++;
      rc.mark_done(fmt::format("layer {}", lr.layer));
      rc.release();
    }
    lr.median = median(lr.errors);
    lr.max = lr.errors.empty() ? 0 : *std::max_element(lr.errors.begin(), lr.errors.end());
    if (!lr.resumed)
      log_(fmt::format("layer {}: {} expert matrices, relative error median {:.2f}%, max {:.2f}%",
                       lr.layer, lr.errors.size(), 100 * lr.median, 100 * lr.max));
  }
  pg.end_line();
  publish();
  std::vector<double> all;
  for (const LayerReport& lr : layers) all.insert(all.end(), lr.errors.begin(), lr.errors.end());
  rep.median_error = median(all);
  rep.max_error = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  rep.layers = std::move(layers);
  rep.seconds = seconds_since(t0);
  return rep;
}

fs::path normal(const fs::path& p) {
  fs::path x = fs::weakly_canonical(fs::absolute(p));
  return x.has_filename() ? x : x.parent_path();
}

bool nested(const fs::path& a, const fs::path& b) {
  fs::path x = normal(a), y = normal(b);
  auto [ia, ib] = std::mismatch(x.begin(), x.end(), y.begin(), y.end());
  return ia == x.end() || ib == y.end();
}

}  // namespace

ConvertReport convert(const ConvertOptions& opt) {
  Log log = opt.log ? opt.log : Log([](const std::string& s) { fmt::print(stderr, "{}\n", s); });
  if (nested(opt.src, opt.out))
    fail<UsageError>("--src {} and --out {} must not contain one another", opt.src.string(),
                     opt.out.string());
  fs::path state = opt.out / kConvertStateDir;
  if (fs::exists(opt.out) && !fs::exists(state)) {
    if (fs::exists(opt.out / "manifest.json")) {
      log(fmt::format("{}: already a finished container; nothing to do", opt.out.string()));
      ConvertReport r;
      r.already_complete = true;
      return r;
    }
    if (!fs::is_empty(opt.out))
      fail<UsageError>("{}: exists and is not a conversion in progress; choose a new folder",
                       opt.out.string());
  }
  fs::create_directories(state / "headers");
  sync_dir(opt.out);
  // Shard headers are saved as they are read, so a resumed run can still plan after --reclaim
  // deleted shards whose work is done.
  Checkpoint ck(opt.src, state / "headers");
  ConvertPlan plan = make_plan(ck, opt.arch, opt.recipe);
  return Converter(opt, ck, std::move(plan), log).run();
}

}  // namespace waste
