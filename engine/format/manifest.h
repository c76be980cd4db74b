// manifest.json of a WASTE v0 container (docs/FORMAT.md §2), parsed as untrusted input.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/format/model_config.h"
#include "engine/kernels/matrix.h"

namespace waste {

struct TrunkEntry {
  std::string name;  // full name as stored, prefix included
  TensorFormat fmt = TensorFormat::kF32;
  std::vector<int64_t> shape;
  uint64_t off = 0;
  uint64_t bytes = 0;
  uint64_t scale_off = 0;  // quantized only
  int64_t group = 0;       // quantized only

  int64_t elements() const;
  int64_t cols() const { return shape.back(); }
  int64_t rows() const { return elements() / cols(); }
  // Bytes of payload and of scales this entry must cover in trunk.bin.
  uint64_t payload_bytes() const;
  uint64_t scale_bytes() const;
};

struct ExpertQuant {
  std::string fmt;  // informational: VQ3R, VQ2R, VQ4P
  int stages = 0;
  int vec_dim = 0;
  int entries = 0;
  int index_block = 64;
  int index_bits = 8;
  double bits_per_weight = 0;
};

struct BankEntry {
  int layer = 0;
  std::string file;
  int64_t experts = 0;
  uint64_t bytes = 0;
  int64_t codebook_base = 0;
  uint64_t stride() const { return bytes / (uint64_t)experts; }
};

struct Manifest {
  int format_version = 0;
  std::string arch;
  std::string tensor_prefix;
  ModelConfig config;
  std::string config_json;  // the `config` object as written, for `waste info --json`
  ExpertQuant quant;
  std::map<int, BankEntry> banks;  // by layer
  std::vector<TrunkEntry> trunk;

  // Entry by name without the prefix; nullptr if absent.
  const TrunkEntry* find(std::string_view name) const;
};

// Parses the manifest text. `where` names the file in messages. Checks everything that can be
// checked without other files; the container checks offsets against file sizes.
Manifest parse_manifest(std::string_view text, const std::string& where);

}  // namespace waste
