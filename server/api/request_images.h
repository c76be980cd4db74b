// The image parts of a conversation, checked, decoded and preprocessed before the request is
// queued, off the HTTP threads (docs/VISION.md §8): only user messages, a capped number per
// request, data: URLs (size capped before base64 decoding) and, only when the operator allows
// them, http(s) URLs fetched with the same cap; formats sniffed from their bytes, TGA only when
// enabled and declared. Every refusal is a 400 naming the part.
#pragma once

#include <cstddef>
#include <vector>

#include "engine/vision/image_decode.h"
#include "engine/vision/image_encoder.h"
#include "protocol/conversation.h"
#include "server/runtime/prompt_images.h"

namespace waste {

struct ImageRequestLimits {
  DecodeLimits decode;    // max_encoded_bytes caps each data URL's decoded payload
  size_t max_images = 8;  // per request
  bool allow_remote = false;
  bool allow_private_hosts = false;  // remote hosts on loopback, link-local or private networks
};

// The request's images in prompt order. `enc` is null for a model without vision.json. Throws
// ApiError (400) naming `messages[i].content[j]` and the problem.
std::vector<PromptImage> request_images(const Conversation& r, const ImageEncoder* enc,
                                        const ImageRequestLimits& limits);

// Refuses (400, naming the part) an image whose positions run past `ctx` - 1 (one position is
// kept for the answer).
void check_image_room(const std::vector<PromptImage>& images, int64_t ctx);

}  // namespace waste
