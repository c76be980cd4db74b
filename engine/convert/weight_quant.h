// What config.json's quantization_config says about the release's stored weights
// (docs/CONVERTER.md §2.3, §2.4): the fp8 tile of weight_block_size, and compressed-tensors'
// pack-quantized int4 group. The tile is taken from here only; the shapes of a weight and its
// scales admit more than one tile when a dimension is not a multiple of it.
#pragma once

#include <filesystem>
#include <string>

#include "engine/convert/fp8_block.h"

namespace waste {

struct WeightQuant {
  Fp8Tile fp8;         // zero when weight_block_size is not given
  int int4_group = 0;  // pack-quantized int4's group size; 0 when the config has none
  std::string where;   // "<dir>/config.json: quantization_config", for messages
};

// Reads the quantization_config of `config` (top level, else text_config); a folder without
// config.json or a config without the field gives an empty WeightQuant. Refuses, naming the
// field, a pack-quantized or fp8 description this reader would misread.
WeightQuant read_weight_quant(const std::filesystem::path& config);

}  // namespace waste
