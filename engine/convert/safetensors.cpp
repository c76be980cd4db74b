#include "engine/convert/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <simdjson.h>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/file_read.h"
#include "engine/base/json_fields.h"
#include "engine/convert/fp8_block.h"
#include "engine/convert/int4_pack.h"
#include "engine/convert/mxfp4.h"
#include "engine/format/container.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the reference reader's limit
constexpr uint64_t kMaxIndexBytes = 256u << 20;
constexpr size_t npos = std::string::npos;

struct DtypeName {
  Dtype d;
  const char* name;
  int size;
};
constexpr DtypeName kDtypes[] = {
    {Dtype::kBool, "BOOL", 1}, {Dtype::kU8, "U8", 1},          {Dtype::kI8, "I8", 1},
    {Dtype::kI16, "I16", 2},   {Dtype::kU16, "U16", 2},        {Dtype::kF16, "F16", 2},
    {Dtype::kBF16, "BF16", 2}, {Dtype::kI32, "I32", 4},        {Dtype::kU32, "U32", 4},
    {Dtype::kF32, "F32", 4},   {Dtype::kF64, "F64", 8},        {Dtype::kI64, "I64", 8},
    {Dtype::kU64, "U64", 8},   {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kF8E5M2, "F8_E5M2", 1},
};

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos;
}

}  // namespace

int dtype_size(Dtype d) {
  for (const DtypeName& x : kDtypes)
    if (x.d == d) return x.size;
  return 0;
}

const char* dtype_name(Dtype d) {
  for (const DtypeName& x : kDtypes)
    if (x.d == d) return x.name;
  return "?";
}

bool parse_dtype(std::string_view s, Dtype* out) {
  for (const DtypeName& x : kDtypes)
    if (s == x.name) {
      *out = x.d;
      return true;
    }
  return false;
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail<IoError>("{}: cannot open: {}", path.string(), std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0) fail<IoError>("{}: cannot stat", path.string());
  size_ = (uint64_t)st.st_size;
  if (size_ < 8)
    fail("{}: {} bytes is too short for a safetensors file (truncated?)", path.string(), size_);
  uint64_t n = 0;
  read_exact(fd_, &n, 8, 0, path.string());
  if (n > size_ - 8)
    fail("{}: header length {} runs past the end of the file ({} bytes; truncated?)", path.string(),
         n, size_);
  if (n > kMaxHeaderBytes)
    fail("{}: header length {} is over the {} byte limit", path.string(), n, kMaxHeaderBytes);
  json_.assign(n, '\0');
  read_exact(fd_, json_.data(), n, 8, path.string());
  data_start_ = 8 + n;
  parse_header(json_);
}

SafetensorsFile::SafetensorsFile(const fs::path& path, uint64_t file_size, const std::string& json)
    : path_(path), json_(json), size_(file_size), data_start_(8 + json.size()) {
  if (data_start_ > size_) fail("{}: saved header does not fit the recorded size", path.string());
  parse_header(json_);
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsFile::parse_header(const std::string& json) {
  const std::string file = path_.string();
  if (json.empty() || json[0] != '{') fail("{}: header does not start with '{{'", file);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  json::element root = json::parse(parser, padded, file + ": header");
  simdjson::dom::object obj;
  if (root.get_object().get(obj)) fail("{}: header must be a JSON object", file);
  for (auto field : obj) {
    std::string name(field.key);
    if (name == "__metadata__") continue;
    std::string what = fmt::format("{}: tensor {}", file, name);
    simdjson::dom::object t;
    if (field.value.get_object().get(t)) fail("{}: header entry must be an object", what);
    TensorInfo info;
    info.name = name;
    int fields = 0;
    for (auto f : t) {
      fields++;
      if (f.key == "dtype") {
        std::string_view s;
        if (f.value.get_string().get(s)) fail("{}: dtype must be a string", what);
        if (!parse_dtype(s, &info.dtype)) fail("{}: unknown dtype '{}'", what, s);
      } else if (f.key == "shape") {
        simdjson::dom::array a;
        if (f.value.get_array().get(a)) fail("{}: shape must be an array", what);
        for (auto d : a) {
          int64_t v;
          if (d.get_int64().get(v) || v < 0 || v > (int64_t{1} << 40))
            fail("{}: shape {} has a bad dimension", what, simdjson::minify(f.value));
          info.shape.push_back(v);
        }
      } else if (f.key == "data_offsets") {
        simdjson::dom::array a;
        if (f.value.get_array().get(a) || a.size() != 2)
          fail("{}: data_offsets must be [begin, end]", what);
        uint64_t v[2];
        int i = 0;
        for (auto d : a)
          if (d.get_uint64().get(v[i++])) fail("{}: data_offsets must be non-negative", what);
        info.begin = v[0];
        info.end = v[1];
      } else {
        fail("{}: unexpected header field '{}'", what, f.key);
      }
    }
    if (fields != 3) fail("{}: header entry needs exactly dtype, shape and data_offsets", what);
    if (info.begin > info.end)
      fail("{}: data_offsets begin {} > end {}", what, info.begin, info.end);
    // Element count x size with overflow checks: shapes come from an untrusted file.
    uint64_t bytes = (uint64_t)dtype_size(info.dtype);
    for (int64_t d : info.shape)
      if (d != 0 && bytes > (uint64_t{1} << 62) / (uint64_t)d)
        fail("{}: shape {} is too large", what, shape_str(info.shape));
      else
        bytes *= (uint64_t)d;
    if (info.end - info.begin != bytes)
      fail("{}: data_offsets span {} bytes but shape {} of {} needs {} (dtype or shape mismatch)",
           what, info.end - info.begin, shape_str(info.shape), dtype_name(info.dtype), bytes);
    if (info.end > size_ - data_start_)
      fail("{}: data ends at byte {} but the file has {} (truncated?)", what,
           data_start_ + info.end, size_);
    if (!tensors_.emplace(name, std::move(info)).second)
      fail("{}: listed twice in the header", what);
  }
  // The tensors must tile the buffer: no overlaps, no holes.
  std::vector<const TensorInfo*> order;
  for (auto& [n, t] : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (const TensorInfo* t : order) {
    if (t->begin < at) fail("{}: tensor {} overlaps the tensor before it", file, t->name);
    if (t->begin > at)
      fail("{}: tensor {} starts at {} leaving a hole after byte {}", file, t->name, t->begin, at);
    at = t->end;
  }
  if (at != size_ - data_start_)
    fail("{}: the tensors cover {} data bytes but the file holds {}", file, at,
         size_ - data_start_);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read(const TensorInfo& t, uint64_t off, uint64_t n, void* dst) const {
  if (fd_ < 0)
    fail<IoError>("{}: tensor {}: the shard was reclaimed (deleted); its data is gone",
                  path_.string(), t.name);
  if (off > t.end - t.begin || n > t.end - t.begin - off)
    fail("{}: tensor {}: read of {} bytes at {} is outside the tensor", path_.string(), t.name, n,
         off);
  read_exact(fd_, dst, n, data_start_ + t.begin + off, path_.string());
}

void widen_to_f32(Dtype d, const void* src, int64_t n, float* out, const std::string& what) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  switch (d) {
    case Dtype::kF32:
      std::memcpy(out, p, (size_t)n * 4);
      return;
    case Dtype::kBF16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = bits_to_f32((uint32_t)h << 16);  // exact, NaN and Inf included
      }
      return;
    case Dtype::kF16:
      for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_f32(h);
        if (((h >> 10) & 31) == 31)  // f16_to_f32 does not special-case Inf/NaN; the source must
          out[i] = (h & 1023) ? bits_to_f32(0x7fc00000) : ((h >> 15) ? -INFINITY : INFINITY);
      }
      return;
    default:
      fail("{}: dtype {} is not supported (BF16, F16, F32 or an MXFP4 pair)", what, dtype_name(d));
  }
}

Checkpoint::Checkpoint(const fs::path& dir, const fs::path& header_cache)
    : dir_(dir), cache_(header_cache) {
  if (!fs::is_directory(dir)) fail<IoError>("{}: not a checkpoint folder", dir.string());
  quant_ = read_weight_quant(dir / "config.json");
  fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(index)) {
    // A single-file checkpoint: its header is the index.
    if (!fs::exists(dir / "model.safetensors"))
      fail<IoError>("{}: neither model.safetensors.index.json nor model.safetensors", dir.string());
    for (auto& [name, t] : shard("model.safetensors").tensors()) map_[name] = "model.safetensors";
    adopt_engine_names();
    return;
  }
  std::string text = read_small_file(index, kMaxIndexBytes);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  json::element root = json::parse(parser, padded, index.string());
  simdjson::dom::object wm;
  if (root["weight_map"].get_object().get(wm))
    fail("{}: weight_map is missing or not an object", index.string());
  for (auto f : wm) {
    std::string_view shard_name;
    if (f.value.get_string().get(shard_name))
      fail("{}: weight_map.{} must be a shard file name", index.string(), f.key);
    if (!plain_file_name(std::string(shard_name)))
      fail("{}: weight_map.{}: '{}' is not a plain file name", index.string(), f.key, shard_name);
    map_[std::string(f.key)] = std::string(shard_name);
  }
  if (map_.empty()) fail("{}: weight_map is empty", index.string());
  adopt_engine_names();
}

// DeepSeek's MoE spellings to the engine's: the router and its bias, the shared experts and the
// routed experts move from `mlp.` to `block_sparse_moe.`; a dense layer's `mlp.gate_proj` stays.
void Checkpoint::adopt_engine_names() {
  bool deepseek = false;
  for (auto& [name, file] : map_) deepseek = deepseek || name.find(".mlp.experts.") != npos;
  if (!deepseek) return;
  auto rename = [](std::string n) {
    static const std::pair<const char*, const char*> kParts[] = {
        {".mlp.gate.", ".block_sparse_moe.gate."},
        {".mlp.shared_experts.", ".block_sparse_moe.shared_experts."},
        {".mlp.experts.", ".block_sparse_moe.experts."}};
    for (auto [from, to] : kParts)
      if (size_t at = n.find(from); at != npos) n.replace(at, std::strlen(from), to);
    if (n.find(".block_sparse_moe.experts.") == npos) return n;
    static const std::pair<const char*, const char*> kKinds[] = {
        {".gate_proj.", ".w1."}, {".up_proj.", ".w3."}, {".down_proj.", ".w2."}};
    for (auto [from, to] : kKinds)
      if (size_t at = n.find(from); at != npos) n.replace(at, std::strlen(from), to);
    return n;
  };
  std::map<std::string, std::string, std::less<>> renamed;
  for (auto& [name, file] : map_) {
    std::string n = rename(name);
    if (n != name) source_[n] = name;
    if (!renamed.emplace(n, file).second)
      fail("{}: tensor {} is listed under both of its spellings",
           (dir_ / "model.safetensors.index.json").string(), name);
  }
  map_ = std::move(renamed);
}

std::string Checkpoint::source_name(std::string_view name) const {
  auto it = source_.find(name);
  if (it != source_.end()) return it->second;
  // A pair's logical name is in the index only through its halves.
  it = source_.find(std::string(name) + "_packed");
  if (it != source_.end()) return it->second.substr(0, it->second.size() - 7);
  return std::string(name);
}

std::vector<std::string> Checkpoint::shards() const {
  std::set<std::string> s;
  for (auto& [n, f] : map_) s.insert(f);
  return {s.begin(), s.end()};
}

const std::string& Checkpoint::shard_of(std::string_view tensor) const {
  auto it = map_.find(tensor);
  if (it == map_.end()) {
    it = map_.find(std::string(tensor) + "_packed");
    if (it == map_.end())
      fail("{}: tensor {} is not in the index", (dir_ / "model.safetensors.index.json").string(),
           source_name(tensor));
  }
  return it->second;
}

bool Checkpoint::is_companion(std::string_view n) {
  return n.ends_with("_packed") || n.ends_with("_scale") || n.ends_with("_scale_inv") ||
         n.ends_with("weight_shape");
}

Stored Checkpoint::stored(std::string_view name) {
  std::string n(name);
  if (map_.count(name)) return map_.count(n + "_scale_inv") ? Stored::kFp8 : Stored::kPlain;
  if (!map_.count(n + "_packed") || !map_.count(n + "_scale")) return Stored::kPlain;
  return info(n + "_packed").dtype == Dtype::kI32 ? Stored::kInt4 : Stored::kMxfp4;
}

std::set<std::string> Checkpoint::shards_of(std::string_view name) {
  std::string n(name);
  switch (stored(name)) {
    case Stored::kPlain:
      return {shard_of(n)};
    case Stored::kFp8:
      return {shard_of(n), shard_of(n + "_scale_inv")};
    case Stored::kMxfp4:
      return {shard_of(n + "_packed"), shard_of(n + "_scale")};
    case Stored::kInt4:
      break;
  }
  std::set<std::string> s = {shard_of(n + "_packed"), shard_of(n + "_scale")};
  if (map_.count(n + "_shape")) s.insert(shard_of(n + "_shape"));
  return s;
}

bool Checkpoint::has(std::string_view name) const {
  return map_.count(name) ||
         (map_.count(std::string(name) + "_packed") && map_.count(std::string(name) + "_scale"));
}

const SafetensorsFile& Checkpoint::shard(const std::string& file) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(file);
  if (it != open_.end()) return *it->second;
  fs::path p = dir_ / file;
  fs::path saved = cache_.empty() ? fs::path() : cache_ / (file + ".header");
  std::unique_ptr<SafetensorsFile> f;
  if (fs::exists(p)) {
    f = std::make_unique<SafetensorsFile>(p);
    if (!saved.empty()) {
      uint64_t size = f->file_size();
      std::string blob(reinterpret_cast<const char*>(&size), 8);
      blob += f->header_json();
      if (!fs::exists(saved) || read_small_file(saved, kMaxHeaderBytes + 8) != blob)
        write_file_atomic(saved, blob);
    }
  } else if (!saved.empty() && fs::exists(saved)) {
    std::string blob = read_small_file(saved, kMaxHeaderBytes + 8);
    uint64_t size = 0;
    if (blob.size() < 8) fail("{}: saved header is damaged", saved.string());
    std::memcpy(&size, blob.data(), 8);
    f = std::make_unique<SafetensorsFile>(p, size, blob.substr(8));
  } else {
    fail<IoError>("{}: shard named by the index is missing (not downloaded, or reclaimed)",
                  p.string());
  }
  return *open_.emplace(file, std::move(f)).first->second;
}

const TensorInfo& Checkpoint::info(std::string_view name) {
  auto it = map_.find(name);
  if (it == map_.end())
    fail("{}: tensor {} is not in the index", (dir_ / "model.safetensors.index.json").string(),
         source_name(name));
  const SafetensorsFile& f = shard(it->second);
  const TensorInfo* t = f.find(source_name(name));
  if (!t)
    fail("{}: tensor {} is listed in the index but missing from the shard header",
         f.path().string(), source_name(name));
  return *t;
}

std::string Checkpoint::where(std::string_view name) {
  return shard(shard_of(name)).path().string() + ": tensor " + source_name(name);
}

std::vector<int64_t> Checkpoint::shape(std::string_view name) {
  std::string n(name);
  switch (stored(name)) {
    case Stored::kPlain: {
      const TensorInfo& t = info(name);
      if (t.dtype == Dtype::kF8E4M3 || t.dtype == Dtype::kF8E5M2)
        fail("{}: {} without {}_scale_inv in the index; fp8 is never read without its scales",
             where(name), dtype_name(t.dtype), source_name(name));
      return t.shape;
    }
    case Stored::kFp8: {
      const TensorInfo& w = info(n);
      const TensorInfo& s = info(n + "_scale_inv");
      if (w.dtype != Dtype::kF8E4M3)
        fail("{}: has a _scale_inv but dtype {}; only F8_E4M3 is read", where(n),
             dtype_name(w.dtype));
      if (s.dtype != Dtype::kF32 && s.dtype != Dtype::kBF16)
        fail("{}_scale_inv: dtype {} (F32 or BF16 expected)", where(n), dtype_name(s.dtype));
      if (quant_.fp8.rows == 0)
        fail(
            "{}.weight_block_size is missing, and tensor {} is F8_E4M3 with per-tile scales; the "
            "tile is never guessed from shapes",
            quant_.where, source_name(n));
      const Fp8Tile b = quant_.fp8;
      if (w.shape.size() != 2)
        fail("{}: F8_E4M3 weight of shape {}; a matrix expected", where(n), shape_str(w.shape));
      std::vector<int64_t> want = {(w.shape[0] + b.rows - 1) / b.rows,
                                   (w.shape[1] + b.cols - 1) / b.cols};
      if (s.shape != want)
        fail(
            "{}_scale_inv: shape {} does not match weight {} at weight_block_size [{}, {}] "
            "(expected {})",
            where(n), shape_str(s.shape), shape_str(w.shape), b.rows, b.cols, shape_str(want));
      return w.shape;
    }
    case Stored::kMxfp4: {
      const TensorInfo& p = info(n + "_packed");
      const TensorInfo& s = info(n + "_scale");
      std::string at = where(n + "_packed");
      if (p.dtype != Dtype::kU8 || s.dtype != Dtype::kU8)
        fail("{}: MXFP4 _packed and _scale must be U8 (got {} and {})", at, dtype_name(p.dtype),
             dtype_name(s.dtype));
      if (p.shape.size() != 2 || s.shape.size() != 2 || p.shape[0] != s.shape[0] ||
          p.shape[1] * 2 != s.shape[1] * kMxfp4Group)
        fail(
            "{}: MXFP4 shapes {} (_packed) and {} (_scale) do not match (2 codes per byte, one "
            "scale per 32)",
            at, shape_str(p.shape), shape_str(s.shape));
      return {p.shape[0], p.shape[1] * 2};
    }
    case Stored::kInt4:
      break;
  }
  const TensorInfo& p = info(n + "_packed");
  const TensorInfo& s = info(n + "_scale");
  std::string at = where(n + "_packed");
  if (quant_.int4_group == 0)
    fail("{}: I32 packed weights, but {} does not describe compressed-tensors pack-quantized int4",
         at, quant_.where);
  if (s.dtype != Dtype::kBF16 && s.dtype != Dtype::kF16 && s.dtype != Dtype::kF32)
    fail("{}_scale: dtype {} (BF16, F16 or F32 expected)", where(n + "_packed"),
         dtype_name(s.dtype));
  const int64_t g = quant_.int4_group;
  if (p.shape.size() != 2 || s.shape.size() != 2 || p.shape[0] != s.shape[0] ||
      p.shape[1] != int4_words(s.shape[1] * g))
    fail(
        "{}: pack-quantized shapes {} (_packed) and {} (_scale) do not match (8 values per I32, "
        "one scale per {})",
        at, shape_str(p.shape), shape_str(s.shape), g);
  return {p.shape[0], s.shape[1] * g};
}

void Checkpoint::read_elements(std::string_view name, int64_t first, int64_t n, float* out) {
  if (stored(name) != Stored::kPlain) {
    int64_t cols = shape(name).back();
    if (cols == 0 || first % cols || n % cols)
      fail("{}: a quantized tensor is read in whole rows", where(name));
    read_rows(name, first / cols, (first + n) / cols, out);
    return;
  }
  const TensorInfo& t = info(name);
  const SafetensorsFile& f = shard(shard_of(name));
  std::string what = where(name);
  shape(name);  // refuses fp8 without its scales
  if (first < 0 || n < 0 || first + n > t.elements())
    fail("{}: elements {}..{} out of range", what, first, first + n);
  if (t.dtype != Dtype::kBF16 && t.dtype != Dtype::kF16 && t.dtype != Dtype::kF32)
    fail("{}: dtype {} is not supported (BF16, F16, F32, or a quantized pair)", what,
         dtype_name(t.dtype));
  int64_t es = dtype_size(t.dtype);
  std::vector<uint8_t> raw((size_t)(n * es));
  f.read(t, (uint64_t)(first * es), raw.size(), raw.data());
  widen_to_f32(t.dtype, raw.data(), n, out, what);
}

void Checkpoint::read_fp8_rows(const std::string& n, int64_t r0, int64_t r1, float* out) {
  std::vector<int64_t> s = shape(n);
  const Fp8Tile b = quant_.fp8;
  const int64_t cols = s[1], scols = (cols + b.cols - 1) / b.cols;
  const int64_t t0 = r0 / b.rows, t1 = r1 == r0 ? t0 : (r1 - 1) / b.rows + 1;
  std::vector<uint8_t> codes((size_t)((r1 - r0) * cols));
  shard(shard_of(n)).read(info(n), (uint64_t)(r0 * cols), codes.size(), codes.data());
  const TensorInfo& si = info(n + "_scale_inv");
  int64_t es = dtype_size(si.dtype);
  std::vector<uint8_t> raw((size_t)((t1 - t0) * scols * es));
  shard(shard_of(n + "_scale_inv")).read(si, (uint64_t)(t0 * scols * es), raw.size(), raw.data());
  std::vector<float> scales((size_t)((t1 - t0) * scols));
  widen_to_f32(si.dtype, raw.data(), (int64_t)scales.size(), scales.data(),
               where(n) + "_scale_inv");
  fp8_block_decode(codes.data(), scales.data(), r0, r1, cols, b, out, where(n));
}

// The release's record of the unpacked shape must agree. compressed-tensors writes it from
// torch.tensor(weight.shape), I64; I32 is accepted too.
void Checkpoint::check_int4_shape(const std::string& name, const std::vector<int64_t>& s) {
  const TensorInfo& st = info(name);
  if ((st.dtype != Dtype::kI32 && st.dtype != Dtype::kI64) || st.elements() != 2)
    fail("{}: must be I64 or I32 [2], is {} {}", where(name), dtype_name(st.dtype),
         shape_str(st.shape));
  int64_t v[2] = {0, 0};
  if (st.dtype == Dtype::kI64) {
    shard(shard_of(name)).read(st, 0, 16, v);
  } else {
    int32_t w[2];
    shard(shard_of(name)).read(st, 0, 8, w);
    v[0] = w[0], v[1] = w[1];
  }
  if (v[0] < 0 || v[1] < 0) fail("{}: records [{}, {}], a negative size", where(name), v[0], v[1]);
  if (v[0] != s[0] || v[1] != s[1])
    fail("{}: records [{}, {}] but _packed and _scale describe {}", where(name), v[0], v[1],
         shape_str(s));
}

void Checkpoint::read_int4_rows(const std::string& n, int64_t r0, int64_t r1, float* out) {
  std::vector<int64_t> s = shape(n);
  const int64_t cols = s[1], words = int4_words(cols), groups = cols / quant_.int4_group;
  if (map_.count(n + "_shape")) check_int4_shape(n + "_shape", s);
  std::vector<int32_t> packed((size_t)((r1 - r0) * words));
  shard(shard_of(n + "_packed"))
      .read(info(n + "_packed"), (uint64_t)(r0 * words * 4), packed.size() * 4, packed.data());
  const TensorInfo& si = info(n + "_scale");
  int64_t es = dtype_size(si.dtype);
  std::vector<uint8_t> raw((size_t)((r1 - r0) * groups * es));
  shard(shard_of(n + "_scale")).read(si, (uint64_t)(r0 * groups * es), raw.size(), raw.data());
  std::vector<float> scales((size_t)((r1 - r0) * groups));
  widen_to_f32(si.dtype, raw.data(), (int64_t)scales.size(), scales.data(), where(n + "_scale"));
  for (int64_t r = r0; r < r1; r++)
    int4_decode_row(packed.data() + (r - r0) * words, scales.data() + (r - r0) * groups, cols,
                    quant_.int4_group, out + (r - r0) * cols);
}

void Checkpoint::read_rows(std::string_view name, int64_t r0, int64_t r1, float* out) {
  std::string n(name);
  Stored kind = stored(name);
  std::vector<int64_t> s = shape(name);
  int64_t cols = s.empty() ? 1 : s.back(), rows = 1;
  for (int64_t d : s) rows *= d;
  rows = cols ? rows / cols : 0;
  if (r0 < 0 || r1 > rows || r0 > r1) fail("tensor {}: rows {}..{} out of range", n, r0, r1);
  switch (kind) {
    case Stored::kPlain:
      read_elements(name, r0 * cols, (r1 - r0) * cols, out);
      return;
    case Stored::kFp8:
      read_fp8_rows(n, r0, r1, out);
      return;
    case Stored::kInt4:
      read_int4_rows(n, r0, r1, out);
      return;
    case Stored::kMxfp4:
      break;
  }
  int64_t pb = cols / 2, sb = cols / kMxfp4Group;
  const TensorInfo& p = info(n + "_packed");
  const TensorInfo& sc = info(n + "_scale");
  std::vector<uint8_t> packed((size_t)((r1 - r0) * pb)), scales((size_t)((r1 - r0) * sb));
  shard(shard_of(n + "_packed")).read(p, (uint64_t)(r0 * pb), packed.size(), packed.data());
  shard(shard_of(n + "_scale")).read(sc, (uint64_t)(r0 * sb), scales.size(), scales.data());
  std::string what = where(n + "_scale");
  for (int64_t r = r0; r < r1; r++)
    mxfp4_decode_row(packed.data() + (r - r0) * pb, scales.data() + (r - r0) * sb, cols,
                     out + (r - r0) * cols, what, r);
}

void Checkpoint::read_all(std::string_view name, std::vector<float>* out, int64_t* rows,
                          int64_t* cols) {
  std::vector<int64_t> s = shape(name);
  int64_t c = s.empty() ? 1 : s.back(), n = 1;
  for (int64_t d : s) n *= d;
  int64_t r = c ? n / c : 0;
  out->resize((size_t)n);
  read_rows(name, 0, r, out->data());
  if (rows) *rows = r;
  if (cols) *cols = c;
}

}  // namespace waste
