// The K3 image encoder (MoonViT, docs/VISION.md §5): patch embedding, the learned position table
// resized bilinearly to the grid, blocks of bidirectional attention with 2D rotary embedding and
// tanh-GELU MLPs, a final norm, the 2x2 merge and the projector into the LM width. Float32
// arithmetic on the weights as stored (Q8G or F32), like the text trunk.
//
// Loaded from the container only by an explicit VisionTower::load: opening a container or
// building a Model never touches the `vision_tower.*` / `mm_projector.*` tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/kernels/kernels.h"
#include "engine/vision/vision_config.h"

namespace waste {

class Container;

struct VisionBlockWeights {
  const float* norm0 = nullptr;  // [hidden]
  const float* norm1 = nullptr;  // [hidden]
  Matrix wqkv;                   // [3 * qkv_hidden, hidden]: q, k, v, each [heads][head_dim]
  Matrix wo;                     // [hidden, qkv_hidden]
  Matrix fc0;                    // [intermediate, hidden]
  Matrix fc1;                    // [hidden, intermediate]
};

struct VisionWeights {
  Matrix patch_embed;  // [hidden, 3 * 14 * 14]: the conv kernel flattened (channel, row, column)
  Matrix pos_emb;      // [pos_h * pos_w, hidden]: (row, column) major
  std::vector<VisionBlockWeights> blocks;
  const float* final_norm = nullptr;  // [hidden]
  Matrix proj0;                       // [4 * hidden, 4 * hidden]
  Matrix proj2;                       // [text_hidden, 4 * hidden]
  const float* post_norm = nullptr;   // [text_hidden]
};

class VisionTower {
 public:
  // Reads vision.json and the tower's tensors from trunk.bin. Throws UsageError when the
  // container has no vision.json (images unsupported), FormatError for a bad config, a missing
  // tensor or a wrong shape or format.
  static std::unique_ptr<VisionTower> load(const Container& c, Isa isa = detect_isa());

  // Weights the caller keeps alive (benchmarks and tests build them in memory). `storage` is
  // kept with the tower.
  VisionTower(const VisionConfig& cfg, const VisionWeights& w, Isa isa,
              std::vector<std::unique_ptr<uint8_t[]>> storage = {});

  const VisionConfig& config() const { return cfg_; }
  // RAM the tower holds: its weights as stored plus the f32 position table.
  int64_t resident_bytes() const;

  // Embeddings of one image. `patches` holds grid_h x grid_w patches in row-major grid order
  // (patch index r * grid_w + c); each patch is 588 floats, normalised pixels ordered channel,
  // then row, then column: value (ch, y, x) at ch * 196 + y * 14 + x (docs/VISION.md §4.8; the
  // order of the conv kernel [hidden, 3, 14, 14] flattened). Both sides must be even and at
  // most 512; the patch budget (max_patches) is the preprocessor's to apply. Returns
  // (grid_h / 2) * (grid_w / 2) rows of text_hidden floats, row-major over the 2x2 tiles. The
  // result does not depend on the pool's thread count; concurrent calls are safe.
  std::vector<float> encode(const float* patches, int grid_h, int grid_w, ThreadPool& pool) const;

  // Output rows for a grid: one per 2x2 tile.
  static int64_t tokens_for(int grid_h, int grid_w) {
    return (int64_t)(grid_h / kVisionMerge) * (grid_w / kVisionMerge);
  }

 private:
  struct Run;
  void check_shapes() const;
  void embed(Run& r, const float* patches) const;
  void block(Run& r, const VisionBlockWeights& b) const;
  void attention(Run& r) const;
  std::vector<float> project(Run& r) const;

  VisionConfig cfg_;
  VisionWeights w_;
  std::vector<float> pos_table_;  // pos_emb as f32, resized per grid
  const Kernels* k_ = nullptr;
  std::vector<std::unique_ptr<uint8_t[]>> storage_;
};

// Position table resized to grid_h x grid_w ([grid_h * grid_w][hidden], row-major), bilinear with
// half-pixel centres and edge clamping (align_corners = false, no antialias; docs/VISION.md §5.3).
// A grid the size of the table is returned unchanged. `table` is [pos_h * pos_w][hidden] f32.
std::vector<float> resize_pos_table(const float* table, int pos_h, int pos_w, int hidden,
                                    int grid_h, int grid_w);

// The 2D rotary angles of a grid (docs/VISION.md §5.4–§5.5): pair j of a head vector (elements 2j,
// 2j+1) turns by col * theta_{j/2} for even j and by row * theta_{j/2} for odd j, with theta_i =
// 10000^(-4i / head_dim), the angle formed in float32 as the release does.
struct RopeTable {
  int pairs = 0;                // head_dim / 2
  std::vector<float> cos, sin;  // [grid_h * grid_w][pairs]
};
RopeTable rope_table(int grid_h, int grid_w, int head_dim);

// Rotates one head vector in place by the angles of one position (a row of a RopeTable).
void apply_rope(float* v, const float* cos, const float* sin, int pairs);

}  // namespace waste
