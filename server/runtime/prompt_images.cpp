#include "server/runtime/prompt_images.h"

#include <algorithm>

#include "engine/base/error.h"

namespace waste {

uint64_t image_position_key(uint64_t image_key, int64_t index) {
  uint64_t z = image_key + 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1);  // splitmix64 step
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (z ^ (z >> 31)) | (1ull << 63);
}

PromptImage prepare_image(std::span<const uint8_t> bytes, const ImageEncoder& enc,
                          const DecodeLimits& limits, std::string where) {
  PromptImage p;
  p.where = std::move(where);
  p.key = enc.key_of(bytes);
  DecodedImage img = decode_image(bytes, limits);
  p.pixels = std::make_shared<const PreprocessedImage>(enc.prepare(img));
  return p;
}

PromptImages::PromptImages(ImageEncoder& enc, std::vector<PromptImage> images)
    : enc_(enc), images_(std::move(images)), rows_(images_.size()) {}

std::vector<std::string> PromptImages::media_prompts(const ChatFormat& format) const {
  std::vector<std::string> out;
  for (const PromptImage& im : images_)
    out.push_back(format.image_block(im.pixels->orig_w, im.pixels->orig_h));
  return out;
}

int64_t PromptImages::positions() const {
  int64_t n = 0;
  for (const PromptImage& im : images_) n += im.pixels->tokens;
  return n;
}

void PromptImages::place(std::vector<int32_t>& ids, std::vector<size_t>& points, int32_t pad_id) {
  size_t pads = (size_t)std::count(ids.begin(), ids.end(), pad_id);
  if (pads != images_.size())
    fail<UsageError>("the prompt holds {} image slots (<|media_pad|>, id {}) for {} images", pads,
                     pad_id, images_.size());
  std::vector<int32_t> out;
  out.reserve(ids.size() + (size_t)positions());
  keys_.clear();
  keys_.reserve(out.capacity());
  size_t next = 0;
  std::vector<size_t> moved = points;
  for (size_t i = 0; i < ids.size(); i++) {
    if (ids[i] != pad_id) {
      out.push_back(ids[i]);
      keys_.push_back((uint64_t)(uint32_t)ids[i]);
      continue;
    }
    PromptImage& im = images_[next++];
    im.offset = out.size();
    for (int64_t j = 0; j < im.pixels->tokens; j++) {
      out.push_back(pad_id);
      keys_.push_back(image_position_key(im.key, j));
    }
    for (size_t k = 0; k < points.size(); k++)
      if (i < points[k]) moved[k] += (size_t)im.pixels->tokens - 1;
  }
  ids = std::move(out);
  points = std::move(moved);
}

RenderedPrompt render_with_images(const ChatFormat& format, PromptImages* images,
                                  const MediaRender& render) {
  if (!images) return render(std::nullopt);
  RenderedPrompt p = render(images->media_prompts(format));
  images->place(p.ids, p.snapshots, images->pad_id());
  return p;
}

RenderedPrompt render_with_images(const ChatFormat& format, const Conversation& c,
                                  PromptImages* images) {
  return render_with_images(format, images, [&](const ChatFormat::ImagePrompts& blocks) {
    return format.render(c, blocks);
  });
}

std::vector<EmbeddingOverride> PromptImages::overrides(size_t from, size_t n, ThreadPool& pool) {
  std::vector<EmbeddingOverride> out;
  for (size_t k = 0; k < images_.size(); k++) {
    const PromptImage& im = images_[k];
    const size_t begin = std::max(from, im.offset);
    const size_t end = std::min(from + n, im.offset + (size_t)im.pixels->tokens);
    if (begin >= end) continue;  // this image lies outside the range: never encoded for it
    if (!rows_[k]) rows_[k] = enc_.encode(*im.pixels, im.key, pool);
    const int64_t width = enc_.config().text_hidden;
    for (size_t p = begin; p < end; p++)
      out.push_back({(int64_t)(p - from), rows_[k]->data() + (int64_t)(p - im.offset) * width});
  }
  return out;
}

}  // namespace waste
