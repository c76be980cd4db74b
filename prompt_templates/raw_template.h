// The raw family, for models without a chat format: the text of every message, concatenated in
// order, as one text segment, so no special token can arise from it.
#pragma once

#include <vector>

#include "prompt_templates/segments.h"
#include "protocol/conversation.h"

namespace waste {

// Throws UsageError naming the part for an image.
std::vector<Segment> render_raw(const Conversation& request);

}  // namespace waste
