// Synthetic containers: random weights with the real wiring of an architecture, for tests, the
// built-in demo model and benchmarks (`waste synth`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/format/model_config.h"

namespace waste {

struct SynthOptions {
  Arch arch = Arch::kKimiLinear;
  // tiny | small | 48b-shape (Kimi-Linear) | k3-shape (K3); tiny | k2-shape (DeepSeek-V3)
  std::string preset = "tiny";
  uint64_t seed = 1;
  // k3-shape: the first `layers` of K3's 93 (0: 2); k2-shape: of Kimi K2's 61 (0: 2);
  // deepseek-v3 tiny: 1..4 (0: 4)
  int layers = 0;
};

// The model config the container `write_synthetic` writes with these options carries, without
// writing one (a k2-shape or k3-shape container is gigabytes).
ModelConfig synthetic_config(const SynthOptions& opt);

// Writes a complete v0 container to `out` (which must not exist) atomically: everything is
// written into a sibling temporary folder that is renamed at the end. K3 containers also get a
// small vision tower (vision.json, `vision_tower.*` and `mm_projector.*` after the text tensors
// in trunk.bin, from a random stream of their own so the text weights are the same without it).
void write_synthetic(const std::filesystem::path& out, const SynthOptions& opt);

}  // namespace waste
