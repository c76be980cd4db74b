// Synthetic release checkpoints: real tensor names at scaled-down shapes (Kimi-Linear with BF16
// experts, K3 with MXFP4 experts and the vision tower), shards laid out like the releases (a
// trunk-only shard, a shard spanning layers, non-numeric order, metadata), with config and
// tokenizer files. convert_test converts them; the synth_checkpoint tool writes one for
// scripts/check_convert_identity, which converts it on two architectures.
#pragma once

#include <cstdint>
#include <filesystem>

#include "engine/base/rng.h"

namespace waste::test {

struct CheckpointShape {
  bool k3 = false;
  int hidden = 128, layers = 4, experts = 12, moe_inter = 40, dense_inter = 512, latent = 0;
  int vocab = 1024;
};
CheckpointShape kimi_linear_shape();
CheckpointShape k3_shape();

// Writes a checkpoint folder: config.json, three shards + index, tokenizer files. The same
// shape and seed give the same bytes.
void write_checkpoint(const std::filesystem::path& dir, const CheckpointShape& s,
                      uint64_t seed = 7);

// A standard normal draw (Box-Muller), as the expert weights are made.
float gauss(Rng& r);

}  // namespace waste::test
