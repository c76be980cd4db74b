// Fuzzes image decoding and the release's preprocessing: any input must either come out as
// patches or be refused with a FormatError; nothing may crash, leak or read uninitialised bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/base/error.h"
#include "engine/vision/image_decode.h"
#include "engine/vision/image_preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  waste::DecodeLimits limits;
  limits.allow_tga_psd = true;  // the riskiest decoders are the ones worth fuzzing
  limits.max_encoded_bytes = 1 << 20;
  limits.max_side = 256;
  limits.max_pixels = 1 << 14;  // small pictures: the decoders' code is the same, runs are faster
  limits.max_decode_memory = 64u << 20;
  try {
    waste::DecodedImage img = waste::decode_image(std::span(data, size), limits);
    waste::PreprocessConfig cfg;
    cfg.size.max_patches = 64;
    cfg.size.hard_cap = (size & 1) != 0;
    waste::PreprocessedImage p = waste::preprocess_image(img, cfg);
    // The layout invariants the tower relies on.
    if (p.patches.size() != (size_t)p.grid_w * p.grid_h * 588 || p.grid_w % 2 || p.grid_h % 2 ||
        p.resized_rgb.size() != (size_t)p.resized_w * p.resized_h * 3)
      __builtin_trap();
  } catch (const waste::FormatError&) {
  }
  return 0;
}
