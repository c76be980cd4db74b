// The trunk tensors a text model of a given config needs, with their shapes (docs/FORMAT.md §3).
// The container validates against this list and `waste synth` writes exactly it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/format/model_config.h"

namespace waste {

struct TensorSpec {
  std::string name;  // without the tensor prefix
  std::vector<int64_t> shape;
  // Some release tensors are stored padded or with extra unit dims (A_log [1,1,H,1], conv
  // kernels [C,1,K]): for those only the element count is checked, as at least `min_elements`.
  bool count_only = false;
  int64_t min_elements = 0;
  bool optional = false;
};

std::vector<TensorSpec> text_tensor_specs(const ModelConfig& c);

// "model.layers.{layer}." — the per-layer name prefix.
std::string layer_prefix(int layer);

}  // namespace waste
