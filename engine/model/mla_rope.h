// MLA's rotary position embedding for the DeepSeek-V3 family (docs/MODEL.md §5.0): per-pair
// frequencies with YaRN's ramp, and the attention-scale correction YaRN asks for.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/format/model_config.h"

namespace waste {

struct MlaRotation {
  std::vector<float> inv_freq;  // one per pair; empty = no rotation
  float att_mul = 1.0f;         // multiplies 1/sqrt(qk head dim)

  bool on() const { return !inv_freq.empty(); }
  // cos and sin of each pair's angle at position `pos` (inv_freq.size() each): one table serves
  // every head of a token.
  void angles(int64_t pos, float* cs, float* sn) const;
  // Rotates the interleaved pairs (x[2j], x[2j+1]) of one qk_rope-wide slice by those angles.
  void rotate(const float* cs, const float* sn, float* x) const;
};

MlaRotation mla_rotation(const ModelConfig& c);

}  // namespace waste
