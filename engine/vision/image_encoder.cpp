#include "engine/vision/image_encoder.h"

#include <algorithm>
#include <cstring>
#include <random>

#include "engine/base/error.h"
#include "engine/format/container.h"

namespace waste {

namespace {

// 64x64 -> 128 multiply, folded: the mixing step of wyhash-style hashes.
uint64_t mum(uint64_t a, uint64_t b) {
  unsigned __int128 r = (unsigned __int128)a * b;
  return (uint64_t)r ^ (uint64_t)(r >> 64);
}

uint64_t keyed_hash(std::span<const uint8_t> bytes, uint64_t salt) {
  constexpr uint64_t k0 = 0xa0761d6478bd642full, k1 = 0xe7037ed1a0b428dbull;
  uint64_t h = mum(salt ^ k0, bytes.size() ^ k1);
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes.data() + i, 8);
    h = mum(h ^ w ^ k0, salt ^ k1);
  }
  uint64_t tail = 0;
  if (i < bytes.size()) std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return mum(h ^ tail ^ k1, salt ^ k0 ^ bytes.size());
}

}  // namespace

ImageEncoder::ImageEncoder(const Container& c, ImageEncoderOptions opt)
    : c_(c), cfg_(vision_config_of(c)), cache_bytes_(opt.cache_bytes) {
  int64_t budget = opt.max_patches > 0 ? opt.max_patches : cfg_.max_patches;
  if (budget < kVisionMerge * kVisionMerge || budget > kMaxImagePatches)
    fail<UsageError>("image patch budget {} is out of range ({}..{})", budget,
                     kVisionMerge * kVisionMerge, kMaxImagePatches);
  pre_.size.patch_size = cfg_.patch;
  pre_.size.merge = kVisionMerge;
  pre_.size.max_patches = (int)budget;
  pre_.size.max_patches_per_side =
      (int)std::min<int64_t>(cfg_.patch_limit_on_one_side, kVisionMaxSide);
  // The release's rule, then shrunk until the grid fits the budget (docs/VISION.md §3.3).
  pre_.size.hard_cap = true;
  pre_.mean = cfg_.image_mean;
  pre_.std = cfg_.image_std;
  salt_ = ((uint64_t)std::random_device{}() << 32) ^ std::random_device{}();
}

ImageEncoder::~ImageEncoder() = default;

PreprocessedImage ImageEncoder::prepare(const DecodedImage& img) const {
  return preprocess_image(img, pre_);
}

uint64_t ImageEncoder::key_of(std::span<const uint8_t> encoded) const {
  return keyed_hash(encoded, salt_ ^ (uint64_t)pre_.size.max_patches);
}

std::shared_ptr<const std::vector<float>> ImageEncoder::encode(const PreprocessedImage& img,
                                                               uint64_t key, ThreadPool& pool) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (it->key == key) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().rows;
    }
  if (!tower_) tower_ = VisionTower::load(c_);
  auto rows = std::make_shared<const std::vector<float>>(
      tower_->encode(img.patches.data(), img.grid_h, img.grid_w, pool));
  runs_++;
  if ((int64_t)rows->size() != (int64_t)img.tokens * cfg_.text_hidden)
    fail("vision tower returned {} floats for {} tokens of width {}", rows->size(), img.tokens,
         cfg_.text_hidden);
  uint64_t bytes = rows->size() * sizeof(float);
  if (bytes <= cache_bytes_) {
    while (!cache_.empty() && cached_bytes_ + bytes > cache_bytes_) {
      cached_bytes_ -= cache_.back().rows->size() * sizeof(float);
      cache_.pop_back();
    }
    cache_.push_front({key, rows});
    cached_bytes_ += bytes;
  }
  return rows;
}

uint64_t ImageEncoder::tower_runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

}  // namespace waste
