// Synthetic release checkpoints: real tensor names at scaled-down shapes (Kimi-Linear with BF16
// experts, K3 with MXFP4 experts and the vision tower, Kimi K2 in DeepSeek-V3's layout with fp8
// block-scaled weights as K2-Instruct or int4 pack-quantized experts as K2-Thinking), shards laid
// out like the releases (a trunk-only shard, a shard spanning layers, non-numeric order, metadata),
// with config and tokenizer files. convert_test converts them; the synth_checkpoint tool writes one
// for scripts/check_convert_identity, which converts it on two architectures.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/base/rng.h"

namespace waste::test {

// How a DeepSeek-V3-layout checkpoint stores its weights.
enum class K2Weights { kNone, kFp8, kInt4 };

struct CheckpointShape {
  bool k3 = false;
  K2Weights k2 = K2Weights::kNone;  // not kNone: DeepSeek-V3's layout and config (K2's spellings)
  int fp8_tile_rows = 32, fp8_tile_cols = 48;  // weight_block_size: partial tiles at these shapes
  bool int4_shape_i32 = false;  // weight_shape as I32 (compressed-tensors writes I64)
  int hidden = 128, layers = 4, experts = 12, moe_inter = 40, dense_inter = 512, latent = 0;
  int vocab = 1024;
};
CheckpointShape kimi_linear_shape();
CheckpointShape k3_shape();
CheckpointShape k2_shape(K2Weights w);

// Writes a checkpoint folder: config.json, three shards + index, tokenizer files. The same
// shape and seed give the same bytes.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointShape& s,
                      uint64_t seed = 7);

// A standard normal draw (Box-Muller), as the expert weights are made.
float gauss(Rng& r);

}  // namespace waste::test
