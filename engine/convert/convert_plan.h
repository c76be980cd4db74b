// Where every tensor of a release checkpoint goes in a v0 container (docs/CONVERTER.md §1.4, §1.5):
// routed experts to per-layer VQ banks, everything else to trunk.bin in sorted name order at
// F32, Q8G or Q4G by the original converter's rule, vision tower and projector in the corrected
// layout (Q8G, flattened to 2-D). The plan is computed from the index and headers alone.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/convert/safetensors.h"
#include "engine/convert/vq_encode.h"
#include "engine/format/expert_record.h"
#include "engine/format/model_config.h"
#include "engine/kernels/matrix.h"

namespace waste {

// Tensors with fewer elements (or one dimension) stay F32.
constexpr int64_t kTrunkF32Below = 65536;

struct TrunkTensor {
  std::string name;  // as in the checkpoint (prefix included)
  TensorFormat fmt = TensorFormat::kF32;
  std::vector<int64_t> shape;  // as written to the manifest (vision: flattened to 2-D)
  int64_t rows = 0, cols = 0;  // the quantizer's view
  uint64_t off = 0, scale_off = 0, bytes = 0;  // position in trunk.bin
  std::string shard;
};

struct ExpertLayer {
  int layer = 0;
  int64_t codebook_base = 0;
  std::set<std::string> shards;
};

struct ConvertPlan {
  bool nested = false;      // K3 layout: config.json has text_config, names under the prefix
  std::string arch;         // manifest arch: kimi-k3, kimi-linear or the HF name
  std::string prefix;       // tensor prefix of the text model
  std::string config_json;  // the manifest's `config` object
  std::string outer_json;   // the release's whole config.json
  ModelConfig config;
  int predict_layers = 0;  // num_nextn_predict_layers: DeepSeek's layers past the last, never run
  VqRecipe recipe;
  RecordGeometry geometry;
  std::vector<TrunkTensor> trunk;
  uint64_t trunk_bytes = 0;
  std::string trunk_index;  // the manifest's `trunk` array
  std::vector<ExpertLayer> layers;
  std::set<std::string> trunk_shards;

  // kind: 0 gate (w1), 1 up (w3), 2 down (w2).
  std::string expert_tensor(int layer, int expert, int kind) const;
  int64_t n_books() const { return (int64_t)layers.size() * 3 * recipe.stages; }
};

// The format the original converter gives a trunk tensor of this source shape.
TensorFormat trunk_format(std::string_view name, const std::vector<int64_t>& shape, bool vision);
bool is_vision_tensor(std::string_view name);
// True for routed experts' names (never in the trunk; nor are Checkpoint::is_companion's).
bool is_expert_tensor(std::string_view name);
// The release's name of routed expert `expert`'s matrix `kind` (0 gate w1, 1 up w3, 2 down w2);
// `prefix` is "language_model." for K3's nested checkpoints, else empty.
std::string expert_tensor_name(std::string_view prefix, int layer, int expert, int kind);

// `arch`: auto, k3, kimi-linear or deepseek-v3. Reads config.json from the checkpoint folder and
// every shard header the plan needs; throws FormatError naming the tensor or file that is wrong or
// missing.
ConvertPlan make_plan(Checkpoint& ck, const std::string& arch, const VqRecipe& recipe);

// JSON string literal of s.
std::string json_quote(std::string_view s);

}  // namespace waste
