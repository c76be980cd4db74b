#include "engine/format/container.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/file_read.h"
#include "engine/base/json_fields.h"
#include "engine/format/tensor_specs.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxManifestBytes = 64 << 20;
constexpr uint64_t kMaxSideFileBytes = 64 << 20;
constexpr uint32_t kCodebookHeaderBytes = 16;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::vector<SpecialToken> parse_specials(const std::string& text, const std::string& where,
                                         int vocab) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  json::element root = json::parse(parser, padded, where);
  if (!root.is_array()) fail("{}: must be a JSON array of {{\"id\", \"text\"}}", where);
  std::vector<SpecialToken> out;
  size_t i = 0;
  for (json::element e : json::items(root)) {
    std::string w = fmt::format("{}[{}]", where, i++);
    if (!e.is_object()) fail("{}: must be an object", w);
    SpecialToken t;
    t.id = (int)json::get_int(e, "id", w, 0, vocab - 1);
    t.text = json::get_string(e, "text", w);
    if (t.text.empty()) fail("{}.text: must not be empty", w);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::unique_ptr<Container> Container::open(const fs::path& dir, const OpenOptions& opt) {
  std::unique_ptr<Container> c(new Container());
  c->dir_ = dir;
  c->opt_ = opt;
  if (!fs::is_directory(dir)) fail<IoError>("{}: not a container directory", dir.string());
  fs::path mpath = dir / "manifest.json";
  if (!fs::exists(mpath)) fail<IoError>("{}: missing (not a WASTE container?)", mpath.string());
  std::string text = read_small_file(mpath, kMaxManifestBytes);
  c->manifest_ = parse_manifest(text, mpath.string());
  c->fingerprint_ = 0xcbf29ce484222325ull;
  for (unsigned char ch : text) c->fingerprint_ = (c->fingerprint_ ^ ch) * 0x100000001b3ull;
  c->check_trunk_index();
  c->check_required_tensors();
  c->load_codebooks();
  c->open_banks();
  c->load_side_files();
  if (opt.load_trunk) c->load_trunk();
  return c;
}

Container::~Container() {
  if (embed_fd_ >= 0) ::close(embed_fd_);
}

void Container::check_trunk_index() {
  fs::path p = dir_ / "trunk.bin";
  std::error_code ec;
  trunk_file_bytes_ = fs::file_size(p, ec);
  if (ec) fail<IoError>("{}: missing or unreadable: {}", p.string(), ec.message());
  const std::string where = (dir_ / "manifest.json").string();
  for (const TrunkEntry& t : manifest_.trunk) {
    uint64_t pay = t.payload_bytes(), sc = t.scale_bytes();
    auto out_of_file = [&](uint64_t off, uint64_t n) {
      return off > trunk_file_bytes_ || n > trunk_file_bytes_ - off;
    };
    if (out_of_file(t.off, pay))
      fail("{}: trunk tensor {}: off {} + {} payload bytes lies outside trunk.bin ({} bytes)",
           where, t.name, t.off, pay, trunk_file_bytes_);
    if (sc && out_of_file(t.scale_off, sc))
      fail("{}: trunk tensor {}: scale_off {} + {} scale bytes lies outside trunk.bin ({} bytes)",
           where, t.name, t.scale_off, sc, trunk_file_bytes_);
  }
}

void Container::check_required_tensors() const {
  const std::string where = (dir_ / "manifest.json").string();
  for (const TensorSpec& s : text_tensor_specs(config())) {
    const TrunkEntry* t = manifest_.find(s.name);
    if (!t) {
      if (s.optional) continue;
      fail("{}: trunk tensor {}{} is missing", where, manifest_.tensor_prefix, s.name);
    }
    bool ok = s.count_only ? t->elements() >= s.min_elements : t->shape == s.shape;
    if (!ok)
      fail("{}: trunk tensor {} has shape {}, expected {}", where, t->name, shape_str(t->shape),
           shape_str(s.shape));
    bool vector_like = s.count_only || s.shape.size() == 1;
    if (vector_like && t->fmt != TensorFormat::kF32)
      fail("{}: trunk tensor {} must be F32, not {}", where, t->name, format_name(t->fmt));
  }
}

void Container::load_trunk() {
  fs::path p = dir_ / "trunk.bin";
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail<IoError>("{}: cannot open: {}", p.string(), std::strerror(errno));
  const std::string& pre = manifest_.tensor_prefix;
  for (const TrunkEntry& t : manifest_.trunk) {
    if (t.name.compare(0, pre.size(), pre) != 0) continue;  // vision: loaded on demand
    std::string name = t.name.substr(pre.size());
    if (name == "model.embed_tokens.weight" && t.fmt != TensorFormat::kF32) {
      embed_on_disk_ = &t;  // one row per token is read when needed (docs/FORMAT.md §3)
      continue;
    }
    Resident r;
    r.entry = &t;
    uint64_t pay = t.payload_bytes(), sc = t.scale_bytes();
    r.data.reset(new uint8_t[pay + sc + 64]);
    read_exact(fd, r.data.get(), pay, t.off, p.string());
    if (sc) read_exact(fd, r.data.get() + pay, sc, t.scale_off, p.string());
    resident_[name] = std::move(r);
  }
  if (embed_on_disk_)
    embed_fd_ = fd;
  else
    ::close(fd);
}

bool Container::has(std::string_view name) const {
  return resident_.count(name) > 0;
}

Matrix Container::matrix(std::string_view name) const {
  auto it = resident_.find(name);
  if (it == resident_.end()) fail("trunk tensor {} is not loaded", name);
  const TrunkEntry& t = *it->second.entry;
  Matrix m;
  m.fmt = t.fmt;
  m.rows = t.rows();
  m.cols = t.cols();
  m.data = it->second.data.get();
  if (t.fmt != TensorFormat::kF32)
    m.scales = reinterpret_cast<const uint16_t*>(it->second.data.get() + t.payload_bytes());
  return m;
}

const float* Container::f32(std::string_view name, int64_t n) const {
  Matrix m = matrix(name);
  if (m.fmt != TensorFormat::kF32) fail("trunk tensor {} must be F32", name);
  if (m.rows * m.cols < n) fail("trunk tensor {} has fewer than {} values", name, n);
  return static_cast<const float*>(m.data);
}

void Container::embedding_row(int64_t token, float* out) const {
  int64_t hid = config().hidden;
  if (token < 0 || token >= config().vocab)
    fail<UsageError>("token id {} is out of range (vocabulary has {})", token, config().vocab);
  if (!embed_on_disk_) {
    Matrix m = matrix("model.embed_tokens.weight");
    std::memcpy(out, static_cast<const float*>(m.data) + token * hid, hid * sizeof(float));
    return;
  }
  const TrunkEntry& t = *embed_on_disk_;
  Matrix row{t.fmt, 1, hid, nullptr, nullptr};
  std::vector<uint8_t> buf((size_t)row.row_bytes() + (size_t)row.groups() * 2);
  std::string what = (dir_ / "trunk.bin").string();
  read_exact(embed_fd_, buf.data(), row.row_bytes(), t.off + (uint64_t)(token * row.row_bytes()),
             what);
  read_exact(embed_fd_, buf.data() + row.row_bytes(), row.groups() * 2,
             t.scale_off + (uint64_t)(token * row.groups() * 2), what);
  const uint8_t* q = buf.data();
  const uint8_t* sc = buf.data() + row.row_bytes();
  for (int64_t i = 0; i < hid; i++) {
    uint16_t s16;
    std::memcpy(&s16, sc + 2 * (i / kQuantGroup), 2);
    int code = t.fmt == TensorFormat::kQ8G ? (int)(int8_t)q[i]
                                           : (int)((q[i / 2] >> (4 * (i & 1))) & 15) - 8;
    out[i] = (float)code * f16_to_f32(s16);
  }
}

void Container::load_codebooks() {
  if (config().n_experts == 0) return;
  fs::path p = dir_ / "codebooks.bin";
  const ExpertQuant& q = manifest_.quant;
  uint64_t rec = kCodebookHeaderBytes + (uint64_t)q.entries * q.vec_dim * 2;
  std::string raw = read_small_file(p, uint64_t{1} << 32);
  n_codebooks_ = (int)(raw.size() / rec);
  // Headers are unreliable in real containers (docs/FORMAT.md §5): position is the id.
  size_t per = (size_t)q.entries * q.vec_dim;
  codebooks_.assign((size_t)n_codebooks_ * per, 0.0f);
  for (int b = 0; b < n_codebooks_; b++) {
    const char* body = raw.data() + b * rec + kCodebookHeaderBytes;
    float* dst = codebooks_.data() + b * per;
    for (size_t i = 0; i < per; i++) {
      uint16_t h;
      std::memcpy(&h, body + 2 * i, 2);
      dst[i] = f16_to_f32_flush(h);
    }
  }
  for (auto& [layer, b] : manifest_.banks)
    if (b.codebook_base + 3 * q.stages > n_codebooks_)
      fail("{}: layer {} needs codebooks {}..{} but the file holds {}", p.string(), layer,
           b.codebook_base, b.codebook_base + 3 * q.stages - 1, n_codebooks_);
  book_ptrs_.resize(n_codebooks_);
  for (int b = 0; b < n_codebooks_; b++) book_ptrs_[b] = codebooks_.data() + b * per;
}

VqBooks Container::books(int64_t base, int kind) const {
  const ExpertQuant& q = manifest_.quant;
  int64_t first = base + kind * q.stages;
  if (first < 0 || first + q.stages > n_codebooks_)
    fail("codebooks {}..{} do not exist", first, first + q.stages - 1);
  return VqBooks{book_ptrs_.data() + first, q.stages, q.entries};
}

void Container::open_banks() {
  bool warned = false;
  for (auto& [layer, entry] : manifest_.banks) {
    RecordGeometry g = record_geometry(manifest_, entry);
    auto bank =
        std::make_unique<ExpertBank>(dir_ / entry.file, entry, g, opt_.direct_io, opt_.verify_crc);
    if (opt_.direct_io && !bank->direct_io() && !warned) {
      spdlog::warn("{}: the file system refuses direct I/O; expert reads go through the page cache",
                   dir_.string());
      warned = true;
    }
    banks_[layer] = std::move(bank);
  }
}

const ExpertBank& Container::bank(int layer) const {
  auto it = banks_.find(layer);
  if (it == banks_.end()) fail<UsageError>("layer {} has no expert bank", layer);
  return *it->second;
}

void Container::load_side_files() {
  fs::path sp = dir_ / "specials.json";
  if (fs::exists(sp))
    specials_ = parse_specials(read_small_file(sp, kMaxSideFileBytes), sp.string(), config().vocab);
  if (fs::exists(dir_ / "vision.json"))
    vision_json_ = read_small_file(dir_ / "vision.json", kMaxSideFileBytes);
}

std::optional<fs::path> Container::tokenizer_path() const {
  fs::path p = dir_ / "tokenizer.model";
  if (fs::exists(p)) return p;
  return std::nullopt;
}

}  // namespace waste
