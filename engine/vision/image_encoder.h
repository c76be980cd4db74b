// What a model needs to take images: vision.json, read when the encoder is built (cheap, and it
// tells at once whether the model accepts images at all); the MoonViT tower, read from the
// container only when the first image is encoded, so text-only use never pays for it; and the
// tower outputs of recent images kept by key, so an image sent again is not encoded again.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "engine/base/thread_pool.h"
#include "engine/vision/image_preprocess.h"
#include "engine/vision/vision_config.h"
#include "engine/vision/vision_tower.h"

namespace waste {

class Container;

struct ImageEncoderOptions {
  // Patches per image, applied as a hard cap under the release's size rule. 0: vision.json's
  // max_patches (1024 by default: at K3's prefill speed every image position costs seconds).
  int64_t max_patches = 0;
  uint64_t cache_bytes = 64ull << 20;  // tower outputs kept for reuse
};

class ImageEncoder {
 public:
  // Reads vision.json: UsageError "... images are not supported ..." without one, FormatError
  // for a bad one, UsageError for a max_patches outside 4..65536.
  explicit ImageEncoder(const Container& c, ImageEncoderOptions opt = {});
  ~ImageEncoder();

  const VisionConfig& config() const { return cfg_; }
  const PreprocessConfig& preprocess_config() const { return pre_; }
  int64_t max_patches() const { return pre_.size.max_patches; }

  // The release's preprocessing under this encoder's budget. Safe from any thread.
  PreprocessedImage prepare(const DecodedImage& img) const;

  // A 64-bit identity for an image's encoded bytes under this encoder's preprocessing, keyed
  // with a per-encoder random salt so that clients cannot aim collisions at each other.
  uint64_t key_of(std::span<const uint8_t> encoded) const;

  // The tower's output for a prepared image: img.tokens rows of text_hidden floats. Loads the
  // tower on the first call (FormatError if its tensors are bad); results are cached by `key`.
  // Serialised internally; meant for the thread that runs the model, with the model's pool.
  std::shared_ptr<const std::vector<float>> encode(const PreprocessedImage& img, uint64_t key,
                                                   ThreadPool& pool);

  uint64_t tower_runs() const;  // encodes that ran the tower (not served from the cache)

 private:
  struct Cached {
    uint64_t key;
    std::shared_ptr<const std::vector<float>> rows;
  };

  const Container& c_;
  VisionConfig cfg_;
  PreprocessConfig pre_;
  uint64_t salt_ = 0;
  uint64_t cache_bytes_ = 0;
  mutable std::mutex mu_;
  std::unique_ptr<VisionTower> tower_;
  std::list<Cached> cache_;  // front = most recently used
  uint64_t cached_bytes_ = 0;
  uint64_t runs_ = 0;
};

}  // namespace waste
