// The K3 release's image preprocessing (docs/VISION.md §3–§4), reproduced bit for bit for
// 8-bit images: the NaViT size rule, Pillow's antialiased BICUBIC resize (nearest for palette
// and bilevel images, premultiplied for LA and RGBA), the chessboard fill of transparent pixels,
// zero padding to multiples of 28, normalisation and the patch layout the tower consumes.
//
// Patch layout of PreprocessedImage::patches (docs/VISION.md §4.8), with p = patch_size (14):
//   - the padded image is cut into grid_h rows × grid_w columns of p×p patches;
//   - patches are stored row-major over that grid: patch (r, c) starts at float index
//     (r * grid_w + c) * 3 * p * p;
//   - inside a patch the 3·p·p floats are channel-major, then row, then column:
//     patch[ch * p * p + y * p + x] is channel ch (0 R, 1 G, 2 B) of pixel (c * p + x, r * p + y)
//     of the padded image (x to the right, y down);
//   - so one patch is one row of the conv kernel [hidden, 3, p, p] flattened to [hidden, 3·p·p].
// Padding (right and bottom) is black before normalisation, so it is -1 with the release's
// mean = std = 0.5. The merge groups 2×2 patches later, in the tower; nothing here reorders them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "engine/vision/image_decode.h"

namespace waste {

// The size rule's inputs (media_proc_cfg of preprocessor_config.json).
struct SizeRule {
  int patch_size = 14;
  int merge = 2;
  // The release's in_patch_limit: a soft budget of patches (the grid can exceed it a little,
  // because patch counts floor and padding rounds up; docs/VISION.md §3.2–§3.4).
  int max_patches = 65536;
  int max_patches_per_side = 512;  // patch_limit_on_one_side
  // When true, the grid is shrunk further until grid_w * grid_h <= max_patches (docs/VISION.md
  // §3.3), bounding tower cost; it changes nothing for images the soft rule already fits.
  bool hard_cap = false;
};

struct TargetSize {
  int resized_w = 0, resized_h = 0;  // the image after resizing (never larger than the original)
  int pad_w = 0, pad_h = 0;          // zero columns at the right, rows at the bottom
  int grid_w = 0, grid_h = 0;        // patches per row and per column of the padded image
  int tokens = 0;                    // (grid_h / merge) * (grid_w / merge): LLM positions
};

// The NaViT rule for a w×h image, in double precision and the release's order of operations.
// Throws UsageError for a rule that cannot be met (non-positive sizes or budgets, a hard cap
// smaller than merge² patches).
TargetSize target_size(int w, int h, const SizeRule& rule = {});

struct PreprocessConfig {
  SizeRule size;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  // The transparency fill: an 8-px chessboard, white at the top-left (transparent_bg_config).
  int chessboard_square = 8;
  uint8_t chessboard_white = 255;
  uint8_t chessboard_gray = 180;
};

struct PreprocessedImage {
  int orig_w = 0, orig_h = 0;  // the stored size; the prompt names it ("image WxH")
  int resized_w = 0, resized_h = 0;
  int padded_w = 0, padded_h = 0;  // multiples of patch_size * merge
  int grid_w = 0, grid_h = 0;      // padded / patch_size
  int tokens = 0;                  // (grid_h / merge) * (grid_w / merge)
  // resized_w × resized_h × 3 bytes, RGB, after the transparency fill and before padding: the
  // release's 8-bit pixels, for byte-exact comparison with Pillow.
  std::vector<uint8_t> resized_rgb;
  // grid_h * grid_w patches of 3 * patch_size² floats, laid out as described at the top.
  std::vector<float> patches;
};

PreprocessedImage preprocess_image(const DecodedImage& img, const PreprocessConfig& cfg = {});

// The steps, exposed for tests. All work on interleaved 8-bit pixels with `channels` bytes each.
// Pillow's BICUBIC (a = -0.5, antialiased, 22-bit fixed point, 8-bit intermediate between the
// horizontal and the vertical pass; an axis whose size is unchanged is not resampled).
std::vector<uint8_t> resize_bicubic(const std::vector<uint8_t>& src, int w, int h, int channels,
                                    int new_w, int new_h);
// Pillow's NEAREST: source index from a running accumulator of in/out, truncated.
std::vector<uint8_t> resize_nearest(const std::vector<uint8_t>& src, int w, int h, int channels,
                                    int new_w, int new_h);

}  // namespace waste
