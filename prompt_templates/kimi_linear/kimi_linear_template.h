// Kimi-Linear's chat format and the raw mode.
//
// Kimi-Linear-48B-A3B-Instruct uses the K2-style turns
// <|im_ROLE|>ROLE<|im_middle|>CONTENT<|im_end|> (docs/PROMPT_FORMAT.md §4); the markers are markup
// segments, so their ids come from the container's specials by text. Only what that note documents
// is rendered: system, user and assistant text turns and the generation prompt. Its template and
// tool-call format were not recovered, so requests with tools, tool calls, tool results or images
// are refused rather than rendered in a guessed format; thinking, reasoning history and
// response_format are ignored (the model has no think channel).
#pragma once

#include <string_view>
#include <vector>

#include "prompt_templates/segments.h"
#include "protocol/conversation.h"

namespace waste {

struct KimiLinearRenderOptions {
  bool add_generation_prompt = true;
};

// Throws UsageError naming the field for what the format cannot carry.
std::vector<Segment> render_kimi_linear(const Conversation& request,
                                        const KimiLinearRenderOptions& options = {});

// The special tokens render_kimi_linear emits; a container must define each one.
const std::vector<std::string_view>& kimi_linear_markers();

}  // namespace waste
