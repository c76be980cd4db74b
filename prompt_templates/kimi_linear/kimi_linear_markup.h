// Kimi-Linear's K2-style turn markers, named once (docs/PROMPT_FORMAT.md §4.2):
// <|im_ROLE|>ROLE<|im_middle|>CONTENT<|im_end|>.
#pragma once

#include <string_view>

namespace waste::kimi_linear {

inline constexpr std::string_view kSystem = "<|im_system|>";
inline constexpr std::string_view kUser = "<|im_user|>";
inline constexpr std::string_view kAssistant = "<|im_assistant|>";
inline constexpr std::string_view kMiddle = "<|im_middle|>";
inline constexpr std::string_view kEnd = "<|im_end|>";

}  // namespace waste::kimi_linear
