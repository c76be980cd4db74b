// Everything one conversation adds to an immutable model: KDA recurrent states and conv tails,
// the MLA latent cache, the position and the token history. Sessions are plain values: copy one
// to snapshot it, save() and load() to keep it on disk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/format/model_config.h"

namespace waste {

struct KdaState {
  std::vector<float> S;     // [H][D][D], S[h][i][j] with i the key dimension
  std::vector<float> conv;  // [3 (q,k,v)][C][K-1], oldest first
};

struct MlaCache {
  std::vector<float> latents;  // [pos][kv_lora + rope]
};

class Session {
 public:
  Session() = default;
  // A fresh session for a model of this config, holding at most `ctx` positions.
  Session(const ModelConfig& c, uint64_t model_fingerprint, int64_t ctx);

  int64_t pos() const { return (int64_t)tokens.size(); }
  int64_t ctx() const { return ctx_; }
  uint64_t model_fingerprint() const { return fingerprint_; }
  // Positions still free (MLA caches bound them; pure-KDA models are unbounded).
  int64_t room() const { return ctx_ - pos(); }
  // RAM this state holds (what a snapshot of it costs).
  uint64_t bytes() const;
  // Floats per position in an MLA layer's latent cache, and the vocabulary the history is from.
  int64_t latent_width() const { return shape_.size() > 10 ? shape_[6] + shape_[8] : 0; }
  int64_t vocab() const { return shape_.size() > 10 ? shape_[10] : 0; }

  // Atomic (temporary file, fsync, rename). load() refuses a file written for another model or
  // another format version and leaves *this untouched on any error.
  void save(const std::filesystem::path& path) const;
  void load(const std::filesystem::path& path);
  // The same as bytes: what save() writes, and load() from bytes read elsewhere (`where` names
  // them in errors). restore() checks everything as load() does.
  std::string serialize() const;
  void restore(std::string_view bytes, const std::string& where);

  std::vector<int32_t> tokens;  // history; its length is the position
  std::vector<KdaState> kda;    // per layer; empty for MLA layers
  std::vector<MlaCache> mla;    // per layer; empty for KDA layers
  // Set when a forward pass failed part-way: the state is then unusable until restored.
  bool broken = false;

 private:
  int64_t ctx_ = 0;
  uint64_t fingerprint_ = 0;
  std::vector<int32_t> shape_;  // the config dimensions the state was sized from
  friend std::vector<int32_t> session_shape(const ModelConfig& c);
};

std::vector<int32_t> session_shape(const ModelConfig& c);

}  // namespace waste
