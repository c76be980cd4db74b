#include "engine/model/session.h"

#include <cstring>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/format/container.h"

namespace waste {

namespace {

constexpr uint32_t kSessionMagic = 0x53455357;  // "WSES"
// 2: states from the expert arithmetic of docs/FORMAT.md §8.2 (summed weights); a version 1
// state came from lookup tables. 3: trunk rows with one accumulator per output (kernels_body.h).
// An older state would not match a recomputation bit for bit.
constexpr uint32_t kSessionVersion = 3;

struct Header {
  uint32_t magic;
  uint32_t version;
  uint64_t fingerprint;
  int64_t ctx;
  int64_t n_tokens;
  uint32_t n_shape;
  uint32_t reserved;
};

template <typename T>
void put(std::string* out, const T* p, size_t n) {
  if (n == 0) return;  // empty vectors may hand out a null pointer
  out->append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

class Reader {
 public:
  Reader(std::string_view b, const std::string& where) : b_(b), where_(where) {}
  template <typename T>
  void get(T* p, size_t n, const char* what) {
    if (n == 0) return;
    if (n > (b_.size() - at_) / sizeof(T))
      fail("{}: truncated while reading {} (file is {} bytes)", where_, what, b_.size());
    std::memcpy(p, b_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  bool at_end() const { return at_ == b_.size(); }

 private:
  std::string_view b_;
  std::string where_;
  size_t at_ = 0;
};

}  // namespace

std::vector<int32_t> session_shape(const ModelConfig& c) {
  std::vector<int32_t> s = {c.n_layers, c.hidden,  c.kda_heads, c.kda_dim, c.conv_k, c.n_heads,
                            c.kv_lora,  c.qk_nope, c.qk_rope,   c.v_head,  c.vocab};
  for (int l = 0; l < c.n_layers; l++) s.push_back(c.is_kda[l] ? 1 : 0);
  return s;
}

Session::Session(const ModelConfig& c, uint64_t model_fingerprint, int64_t ctx)
    : ctx_(ctx), fingerprint_(model_fingerprint), shape_(session_shape(c)) {
  size_t C = (size_t)c.kda_channels(), D = (size_t)c.kda_dim;
  kda.resize(c.n_layers);
  mla.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; l++) {
    if (!c.is_kda[l]) continue;
    kda[l].S.assign((size_t)c.kda_heads * D * D, 0.0f);
    kda[l].conv.assign(3 * C * (size_t)(c.conv_k - 1), 0.0f);
  }
}

uint64_t Session::bytes() const {
  uint64_t n = tokens.size() * sizeof(int32_t);
  for (size_t l = 0; l < kda.size(); l++)
    n += (kda[l].S.size() + kda[l].conv.size() + mla[l].latents.size()) * sizeof(float);
  return n;
}

void Session::save(const std::filesystem::path& path) const {
  write_file_atomic(path, serialize());
}

std::string Session::serialize() const {
  if (broken) fail<UsageError>("session is unusable after a failed step and cannot be saved");
  std::string out;
  Header h{kSessionMagic, kSessionVersion, fingerprint_, ctx_, pos(), (uint32_t)shape_.size(), 0};
  put(&out, &h, 1);
  put(&out, shape_.data(), shape_.size());
  put(&out, tokens.data(), tokens.size());
  for (size_t l = 0; l < kda.size(); l++) {
    put(&out, kda[l].S.data(), kda[l].S.size());
    put(&out, kda[l].conv.data(), kda[l].conv.size());
    put(&out, mla[l].latents.data(), mla[l].latents.size());
  }
  return out;
}

void Session::load(const std::filesystem::path& path) {
  restore(read_small_file(path, uint64_t{1} << 40), path.string());
}

void Session::restore(std::string_view b, const std::string& where) {
  Reader r(b, where);
  Header h;
  r.get(&h, 1, "the header");
  if (h.magic != kSessionMagic) fail("{}: not a waste session file", where);
  if (h.version != kSessionVersion)
    fail("{}: session format version {} is not supported (this build reads {})", where, h.version,
         kSessionVersion);
  if (h.fingerprint != fingerprint_)
    fail(
        "{}: the session was saved from a different model (fingerprint {:016x}, this model "
        "{:016x})",
        where, h.fingerprint, fingerprint_);
  std::vector<int32_t> shape(h.n_shape <= 4096 ? h.n_shape : 0);
  r.get(shape.data(), shape.size(), "the model shape");
  if (shape != shape_) fail("{}: the session's layer shapes do not match this model", where);
  if (h.n_tokens < 0 || h.n_tokens > ctx_)
    fail("{}: the session holds {} positions but this session allows {}", where, h.n_tokens, ctx_);
  Session s = *this;
  s.broken = false;
  s.tokens.resize((size_t)h.n_tokens);
  r.get(s.tokens.data(), s.tokens.size(), "the token history");
  for (int32_t t : s.tokens)
    if (t < 0 || t >= shape_[10]) fail("{}: token id {} in the history is out of range", where, t);
  size_t latent = (size_t)(shape_[6] + shape_[8]);
  for (size_t l = 0; l < s.kda.size(); l++) {
    r.get(s.kda[l].S.data(), s.kda[l].S.size(), "a KDA state");
    r.get(s.kda[l].conv.data(), s.kda[l].conv.size(), "a KDA conv tail");
    s.mla[l].latents.resize(s.kda[l].S.empty() ? (size_t)h.n_tokens * latent : 0);
    r.get(s.mla[l].latents.data(), s.mla[l].latents.size(), "an MLA latent cache");
  }
  if (!r.at_end()) fail("{}: unexpected bytes after the session state", where);
  *this = std::move(s);
}

}  // namespace waste
