// Images inside a prompt (docs/VISION.md §7): each one's K3 media block
// `<|media_begin|>image WxH<|media_content|>` + N positions + `<|media_end|>`, the identity of
// every prompt position for the prefix cache (an image position is keyed by a hash of the image
// bytes, so a different image of the same size never matches a snapshot), and on the engine
// thread the tower rows that replace the embedding-table rows of those positions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/vision/image_decode.h"
#include "engine/vision/image_encoder.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/segments.h"

namespace waste {

// One image of a prompt, decoded and preprocessed (the tower has not run yet).
struct PromptImage {
  std::string where;  // for errors: "messages[0].content[1]", or the file name in the CLI
  uint64_t key = 0;   // ImageEncoder::key_of the encoded bytes
  std::shared_ptr<const PreprocessedImage> pixels;
  size_t offset = 0;  // its first position in the prompt, set by PromptImages::place
};

// Decodes and preprocesses one encoded image (a file or a data URL's payload). Throws
// FormatError or UsageError naming the problem.
PromptImage prepare_image(std::span<const uint8_t> bytes, const ImageEncoder& enc,
                          const DecodeLimits& limits, std::string where);

class PromptImages {
 public:
  PromptImages(ImageEncoder& enc, std::vector<PromptImage> images);

  // One media block per image, in order, in `format`'s words, for ChatFormat::render.
  std::vector<std::string> media_prompts(const ChatFormat& format) const;
  // Widens each <|media_pad|> (`pad_id`) of a rendered prompt to its image's positions, moves
  // each of `points` (snapshot points) past the positions added before it and records the
  // position keys. Throws UsageError when the prompt holds another number of pads than there are
  // images.
  void place(std::vector<int32_t>& ids, std::vector<size_t>& points, int32_t pad_id);
  // The pad id of the encoder's model (vision.json's media_placeholder_token_id).
  int32_t pad_id() const { return (int32_t)enc_.config().placeholder_id; }

  // Per prompt position (after place): the token id, or for an image position a key with the
  // top bit set (never an id) from the image's hash and the position inside the image.
  const std::vector<uint64_t>& keys() const { return keys_; }
  const std::vector<PromptImage>& images() const { return images_; }
  // Positions the images take in all.
  int64_t positions() const;

  // The overrides for prompt positions [from, from + n), running the tower (through the
  // encoder's cache) for images not encoded yet. For the thread that runs the model; the rows
  // stay valid while this object lives.
  std::vector<EmbeddingOverride> overrides(size_t from, size_t n, ThreadPool& pool);

 private:
  ImageEncoder& enc_;
  std::vector<PromptImage> images_;
  std::vector<std::shared_ptr<const std::vector<float>>> rows_;  // per image, once encoded
  std::vector<uint64_t> keys_;
};

// A prompt with images in it, the one way every caller places them: `render` gets one media block
// per image (none when `images` is null) and returns the prompt with each block's pad as one id;
// each pad is then widened to its image's positions, the snapshot points moving past them.
// Throws UsageError when the prompt holds another number of pads than there are images.
using MediaRender = std::function<RenderedPrompt(const ChatFormat::ImagePrompts& blocks)>;
RenderedPrompt render_with_images(const ChatFormat& format, PromptImages* images,
                                  const MediaRender& render);
// `c` rendered by `format` with its image parts' blocks placed.
RenderedPrompt render_with_images(const ChatFormat& format, const Conversation& c,
                                  PromptImages* images);

// The prefix-cache keys of a prompt with these images (none: token ids are the keys).
inline std::span<const uint64_t> media_keys(const PromptImages* p) {
  return p ? std::span<const uint64_t>(p->keys()) : std::span<const uint64_t>();
}

// The prefix-cache identity of an image position: the image's key and the index inside it, with
// the top bit set.
uint64_t image_position_key(uint64_t image_key, int64_t index);

}  // namespace waste
