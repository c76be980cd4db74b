// Kimi K3's chat rendering (XTML), a native port of the release's encoding_k3.build_chat_segments
// at revision a590ce09 (docs/PROMPT_FORMAT.md §2): tool declarations, the thinking-effort note, the
// conversation with tool results put back in call order, the tool-choice and response-format
// notes, and the generation prompt, as segments that are tokenized one by one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "prompt_templates/segments.h"
#include "protocol/conversation.h"

namespace waste {

struct K3RenderOptions {
  // Used when the request leaves thinking unset.
  bool default_thinking = true;
  // False: thinking is off whatever the request says (the operator forbids it).
  bool thinking_allowed = true;
  // Used when thinking is on and the request names no effort. "max" because the release's
  // apply_chat_template passes max when the caller gives none, so every prompt the model saw in
  // the default path starts with the max note; "" renders no note (build_chat_segments' own
  // default).
  std::string default_effort = "max";
  bool add_generation_prompt = true;
  // One media block (k3_image_prompt) per image part, and per <|kimi_image_placeholder|> found
  // in text, in render order; all must be used. Unset: each image part renders as the markup
  // segment <|kimi_image_placeholder|>, for a later step to expand.
  std::optional<std::vector<std::string>> image_prompts;
  // Whether a literal <|kimi_image_placeholder|> in client text takes an image prompt, as the
  // release's encoder does. A server sets false (docs/VISION.md §7.2): only image parts get
  // media blocks, and the needle stays plain text.
  bool text_placeholders_take_images = true;
};

// Throws UsageError naming the field for what the encoder refuses: an effort other than low,
// high or max; a tool message whose function cannot be resolved; too few or too many image
// prompts.
std::vector<Segment> render_k3(const Conversation& request, const K3RenderOptions& options = {});

// Whether the prompt render_k3 builds ends inside the think channel (else inside response);
// the reply parser starts there.
bool k3_thinking(const Conversation& request, const K3RenderOptions& options = {});

// `<|media_begin|>image {W}x{H}<|media_content|><|media_pad|><|media_end|>`, with the image's
// original pixel size.
std::string k3_image_prompt(int width, int height);

// Each run of consecutive tool messages whose every tool_call_id names a call of the latest
// assistant message is stably sorted into call order, and its messages take the call's
// function name (`tool`, and `name` if set); any other run stays as it is. Idempotent.
// `origin`, when given, receives each output message's index in the input.
std::vector<ChatMessage> k3_reorder_tool_results(const std::vector<ChatMessage>& messages,
                                                 std::vector<std::size_t>* origin = nullptr);

}  // namespace waste
