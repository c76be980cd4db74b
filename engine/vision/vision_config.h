// The image side of a K3 container: `vision.json` (docs/VISION.md §6), the tower geometry and the
// preprocessing constants. Absent file = the container cannot take images.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "engine/format/model_config.h"

namespace waste {

class Container;

struct VisionConfig {
  int hidden = 1024;                // vt_hidden_size
  int heads = 12;                   // vt_num_attention_heads
  int qkv_hidden = 1536;            // qkv_hidden_size: heads x head_dim, may differ from hidden
  int intermediate = 4096;          // vt_intermediate_size
  int layers = 27;                  // vt_num_hidden_layers
  int pos_h = 64;                   // init_pos_emb_height: rows of the learned position table
  int pos_w = 64;                   // init_pos_emb_width
  int text_hidden = 0;              // text_hidden_size: the projector's output, = the LM hidden
  int patch = 14;                   // patch_size (only 14 exists)
  int64_t placeholder_id = 163605;  // media_placeholder_token_id (<|media_pad|>)
  int64_t max_patches = 1024;       // the engine's patch budget per image
  int64_t in_patch_limit = 65536;   // the release's soft budget (preprocessing)
  int64_t patch_limit_on_one_side = 512;
  std::array<float, 3> image_mean = {0.5f, 0.5f, 0.5f};  // RGB
  std::array<float, 3> image_std = {0.5f, 0.5f, 0.5f};   // RGB

  int head_dim() const { return qkv_hidden / heads; }
  // Floats per patch: 3 channels x patch x patch.
  int patch_values() const { return 3 * patch * patch; }
  // Width of one 2x2-merged token, the projector's input.
  int merged() const { return 4 * hidden; }
};

// The merge is 2x2 in every release; the engine supports nothing else.
constexpr int kVisionMerge = 2;
// RoPE tables in the release cover 512 positions per side; larger grids are refused.
constexpr int kVisionMaxSide = 512;
// The most patches an image may be given (vision.json's max_patches, --max-image-patches): the
// release's own soft budget.
constexpr int64_t kMaxImagePatches = 65536;

// Parses and checks vision.json text against the language model it feeds. `where` names the
// file in errors. Throws FormatError naming the key.
VisionConfig parse_vision_config(std::string_view text, const std::string& where,
                                 const ModelConfig& lm);

// The container's vision.json, parsed; UsageError "images are not supported ..." without one.
VisionConfig vision_config_of(const Container& c);

}  // namespace waste
