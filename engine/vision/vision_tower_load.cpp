// Reading the tower from a container: vision.json for the geometry, then the `vision_tower.*` and
// `mm_projector.*` trunk entries (outside the text prefix, so the container never loads them)
// read from trunk.bin here, with their shapes and formats checked (docs/VISION.md §5.1, §6).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/format/container.h"
#include "engine/vision/vision_tower.h"

namespace waste {

namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Reads named trunk entries into memory the tower will own. Container::open has already checked
// that every entry lies inside trunk.bin.
class TensorReader {
 public:
  explicit TensorReader(const Container& c) : path_((c.dir() / "trunk.bin").string()) {
    for (const TrunkEntry& t : c.manifest().trunk) by_name_[t.name] = &t;
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail<IoError>("{}: cannot open: {}", path_, std::strerror(errno));
  }
  ~TensorReader() { ::close(fd_); }
  TensorReader(const TensorReader&) = delete;
  TensorReader& operator=(const TensorReader&) = delete;

  // A rows x cols matrix in any trunk format.
  Matrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const TrunkEntry& t = entry(name);
    bool flat_ok = t.rows() == rows && t.cols() == cols;
    // The checkpoint's conv kernel [D, 3, 14, 14] is the same bytes as [D, 588] when it is F32;
    // quantized, its groups would run along the kernel's last axis, so it must be flattened
    // before quantizing (docs/VISION.md §6).
    bool conv_ok = t.fmt == TensorFormat::kF32 && t.elements() == rows * cols &&
                   t.shape.size() == 4 && t.shape[0] == rows;
    if (!flat_ok && !conv_ok)
      fail("{}: vision tensor {} has shape {}, expected [{}, {}]", path_, name, shape_str(t.shape),
           rows, cols);
    Matrix m{t.fmt, rows, cols, nullptr, nullptr};
    uint8_t* data = read(t);
    m.data = data;
    if (t.fmt != TensorFormat::kF32)
      m.scales = reinterpret_cast<const uint16_t*>(data + t.payload_bytes());
    return m;
  }

  // An F32 vector of exactly n values.
  const float* vector(const std::string& name, int64_t n) {
    const TrunkEntry& t = entry(name);
    if (t.fmt != TensorFormat::kF32)
      fail("{}: vision tensor {} must be F32, not {}", path_, name, format_name(t.fmt));
    if (t.elements() != n)
      fail("{}: vision tensor {} has shape {}, expected [{}]", path_, name, shape_str(t.shape), n);
    return reinterpret_cast<const float*>(read(t));
  }

  std::vector<std::unique_ptr<uint8_t[]>> take() { return std::move(storage_); }

 private:
  const TrunkEntry& entry(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) fail("{}: vision tensor {} is missing", path_, name);
    return *it->second;
  }

  // Payload then scales, as the text trunk keeps them; the slack lets SIMD loads overrun.
  uint8_t* read(const TrunkEntry& t) {
    uint64_t pay = t.payload_bytes(), sc = t.scale_bytes();
    storage_.emplace_back(new uint8_t[pay + sc + 64]());
    uint8_t* p = storage_.back().get();
    read_exact(fd_, p, pay, t.off, path_);
    if (sc) read_exact(fd_, p + pay, sc, t.scale_off, path_);
    return p;
  }

  std::string path_;
  int fd_ = -1;
  std::map<std::string, const TrunkEntry*> by_name_;
  std::vector<std::unique_ptr<uint8_t[]>> storage_;
};

}  // namespace

std::unique_ptr<VisionTower> VisionTower::load(const Container& c, Isa isa) {
  VisionConfig v = vision_config_of(c);
  TensorReader rd(c);
  const int64_t D = v.hidden, Q = v.qkv_hidden, I = v.intermediate, M = v.merged();
  VisionWeights w;
  w.patch_embed = rd.matrix("vision_tower.patch_embed.proj.weight", D, v.patch_values());
  w.pos_emb = rd.matrix("vision_tower.patch_embed.pos_emb.weight", (int64_t)v.pos_h * v.pos_w, D);
  for (int l = 0; l < v.layers; l++) {
    std::string p = fmt::format("vision_tower.encoder.blocks.{}.", l);
    VisionBlockWeights b;
    b.norm0 = rd.vector(p + "norm0.weight", D);
    b.norm1 = rd.vector(p + "norm1.weight", D);
    b.wqkv = rd.matrix(p + "wqkv.weight", 3 * Q, D);
    b.wo = rd.matrix(p + "wo.weight", D, Q);
    b.fc0 = rd.matrix(p + "mlp.fc0.weight", I, D);
    b.fc1 = rd.matrix(p + "mlp.fc1.weight", D, I);
    w.blocks.push_back(b);
  }
  w.final_norm = rd.vector("vision_tower.encoder.final_layernorm.weight", D);
  w.proj0 = rd.matrix("mm_projector.proj.0.weight", M, M);
  w.proj2 = rd.matrix("mm_projector.proj.2.weight", v.text_hidden, M);
  w.post_norm = rd.vector("mm_projector.post_norm.weight", v.text_hidden);
  return std::make_unique<VisionTower>(v, w, isa, rd.take());
}

}  // namespace waste
