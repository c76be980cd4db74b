// An open WASTE v0 container directory: the parsed manifest, the resident trunk tensors, the
// codebooks, the expert banks and the side files (docs/FORMAT.md §1–§7). Immutable once open; many
// sessions may share it.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/format/expert_bank.h"
#include "engine/format/manifest.h"
#include "engine/kernels/kernels.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste {

struct OpenOptions {
  bool load_trunk = true;   // false: manifest, files and geometry only (info, plan)
  bool verify_crc = false;  // CRC of every record read
  bool direct_io = true;    // bypass the page cache for expert reads
};

class Container {
 public:
  static std::unique_ptr<Container> open(const std::filesystem::path& dir,
                                         const OpenOptions& opt = {});
  ~Container();

  const std::filesystem::path& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }
  const ModelConfig& config() const { return manifest_.config; }
  const OpenOptions& options() const { return opt_; }

  // Resident text tensors by name without the prefix. matrix() views it as rows x last dim.
  bool has(std::string_view name) const;
  Matrix matrix(std::string_view name) const;
  // An F32 tensor with at least n values.
  const float* f32(std::string_view name, int64_t n) const;
  // Row `token` of the embedding, as f32 (read from disk when the table is not resident).
  void embedding_row(int64_t token, float* out) const;

  // The codebooks are f32, subnormals flushed, entry-major as in the file ([entries][vec_dim]).
  int n_codebooks() const { return n_codebooks_; }
  VqBooks books(int64_t base, int kind) const;  // kind: 0 gate, 1 up, 2 down

  const ExpertBank& bank(int layer) const;

  const std::vector<SpecialToken>& specials() const { return specials_; }
  std::optional<std::filesystem::path> tokenizer_path() const;
  const std::optional<std::string>& vision_json() const { return vision_json_; }

  uint64_t trunk_file_bytes() const { return trunk_file_bytes_; }
  // FNV-1a of manifest.json: names the exact container a session was computed with.
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  Container() = default;
  void check_trunk_index();
  void check_required_tensors() const;
  void load_trunk();
  void load_codebooks();
  void open_banks();
  void load_side_files();

  struct Resident {
    const TrunkEntry* entry = nullptr;
    std::unique_ptr<uint8_t[]> data;  // payload then scales
  };

  std::filesystem::path dir_;
  OpenOptions opt_;
  Manifest manifest_;
  uint64_t trunk_file_bytes_ = 0;
  uint64_t fingerprint_ = 0;
  std::map<std::string, Resident, std::less<>> resident_;  // by name without prefix
  const TrunkEntry* embed_on_disk_ = nullptr;
  int embed_fd_ = -1;
  int n_codebooks_ = 0;
  std::vector<float> codebooks_;
  std::vector<const float*> book_ptrs_;
  std::map<int, std::unique_ptr<ExpertBank>> banks_;
  std::vector<SpecialToken> specials_;
  std::optional<std::string> vision_json_;
};

}  // namespace waste
