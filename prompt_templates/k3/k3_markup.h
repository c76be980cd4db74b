// K3's XTML markup, named once (docs/PROMPT_FORMAT.md §2.2). An element is
// <|open|>NAME ATTRS<|sep|> ... <|close|>NAME<|sep|>; a message ends with <|end_of_msg|>. The
// renderer, the reply parser, the reply grammar and the forced tool-call opening all spell the
// markup from these, so a change of spelling has one place to go.
#pragma once

#include <string>
#include <string_view>

namespace waste::k3 {

// The four structural special tokens.
inline constexpr std::string_view kOpen = "<|open|>";
inline constexpr std::string_view kClose = "<|close|>";
inline constexpr std::string_view kSep = "<|sep|>";
inline constexpr std::string_view kEndOfMsg = "<|end_of_msg|>";

// The assistant's two channels and the elements of a tool call.
inline constexpr std::string_view kThink = "think";
inline constexpr std::string_view kResponse = "response";
inline constexpr std::string_view kMessage = "message";
inline constexpr std::string_view kTools = "tools";
inline constexpr std::string_view kCall = "call";
inline constexpr std::string_view kArgument = "argument";
inline constexpr std::string_view kJson = "json";

// Images: the block the server builds per image, and the needle the release's encoder replaces.
inline constexpr std::string_view kMediaBegin = "<|media_begin|>";
inline constexpr std::string_view kMediaContent = "<|media_content|>";
inline constexpr std::string_view kMediaPad = "<|media_pad|>";
inline constexpr std::string_view kMediaEnd = "<|media_end|>";
inline constexpr std::string_view kImageNeedle = "<|kimi_image_placeholder|>";

// `<|open|>NAME<|sep|>` and `<|close|>NAME<|sep|>` for an element without attributes.
inline std::string open_tag(std::string_view name) {
  return std::string(kOpen).append(name).append(kSep);
}
inline std::string close_tag(std::string_view name) {
  return std::string(kClose).append(name).append(kSep);
}

// Closes the think channel and opens the response channel.
inline std::string think_to_response() {
  return close_tag(kThink) + open_tag(kResponse);
}
// The end of an assistant message.
inline std::string message_end() {
  return close_tag(kMessage) + std::string(kEndOfMsg);
}

}  // namespace waste::k3
