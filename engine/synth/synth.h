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
  std::string preset = "tiny";  // tiny | small | 48b-shape (Kimi-Linear) | k3-shape (K3); tiny only
                                // for DeepSeek-V3
  uint64_t seed = 1;
  int layers = 0;  // k3-shape: the first `layers` of K3's 93 (0: 2); deepseek-v3 tiny: 1..4 (0: 4)
};

// Writes a complete v0 container to `out` (which must not exist) atomically: everything is
// written into a sibling temporary folder that is renamed at the end. K3 containers also get a
// small vision tower (vision.json, `vision_tower.*` and `mm_projector.*` after the text tensors
// in trunk.bin, from a random stream of their own so the text weights are the same without it).
void write_synthetic(const std::filesystem::path& out, const SynthOptions& opt);

}  // namespace waste
