// Kimi K2's chat markup, named once (docs/PROMPT_FORMAT.md §4). A turn is
// <|im_ROLE|>NAME<|im_middle|>CONTENT<|im_end|>; tool calls sit in a section of
// <|tool_call_begin|>ID<|tool_call_argument_begin|>JSON<|tool_call_end|> entries. The renderer, the
// reply parser, the reply grammar and the forced tool-call opening all spell the markup from
// these.
#pragma once

#include <string>
#include <string_view>

namespace waste::k2 {

// The turn markers: every K2-family vocabulary has them as special tokens.
inline constexpr std::string_view kSystem = "<|im_system|>";
inline constexpr std::string_view kUser = "<|im_user|>";
inline constexpr std::string_view kAssistant = "<|im_assistant|>";
inline constexpr std::string_view kMiddle = "<|im_middle|>";
inline constexpr std::string_view kEnd = "<|im_end|>";

// The tool-call markers: single tokens in the release vocabularies.
inline constexpr std::string_view kSectionBegin = "<|tool_calls_section_begin|>";
inline constexpr std::string_view kSectionEnd = "<|tool_calls_section_end|>";
inline constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
inline constexpr std::string_view kArgumentBegin = "<|tool_call_argument_begin|>";
inline constexpr std::string_view kCallEnd = "<|tool_call_end|>";

// The think channel, written as these two strings by the template; single tokens only in a
// vocabulary that defines them (K2-Thinking's), plain text elsewhere.
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// A call's id as the model writes it: `functions.NAME:INDEX`.
inline constexpr std::string_view kIdPrefix = "functions.";
inline std::string call_id(std::string_view name, std::size_t index) {
  return std::string(kIdPrefix).append(name).append(":").append(std::to_string(index));
}

}  // namespace waste::k2
