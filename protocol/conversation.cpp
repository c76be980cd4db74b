#include "protocol/conversation.h"

namespace waste {

bool is_function_name(std::string_view name) {
  return !name.empty() && name.find_first_not_of(
                              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
                              "WXYZ0123456789_-.") == std::string_view::npos;
}

bool has_images(const Conversation& c) {
  for (const ChatMessage& m : c.messages)
    if (const auto* parts = std::get_if<std::vector<ContentPart>>(&m.content))
      for (const ContentPart& p : *parts)
        if (p.kind == ContentPart::Kind::kImage) return true;
  return false;
}

}  // namespace waste
