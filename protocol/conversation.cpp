#include "protocol/conversation.h"

#include <fmt/format.h>

namespace waste {

bool is_function_name(std::string_view name) {
  return !name.empty() && name.find_first_not_of(
                              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV"
                              "WXYZ0123456789_-.") == std::string_view::npos;
}

std::vector<ImagePart> image_parts(const Conversation& c) {
  std::vector<ImagePart> out;
  for (size_t i = 0; i < c.messages.size(); i++) {
    const auto* parts = std::get_if<std::vector<ContentPart>>(&c.messages[i].content);
    if (!parts) continue;
    for (size_t j = 0; j < parts->size(); j++)
      if ((*parts)[j].kind == ContentPart::Kind::kImage)
        out.push_back({fmt::format("messages[{}].content[{}]", i, j), (*parts)[j].image_ref,
                       c.messages[i].role});
  }
  return out;
}

bool thinking_on(const Conversation& c, bool by_default, bool allowed) {
  return allowed && c.thinking.value_or(by_default);
}

bool has_images(const Conversation& c) {
  return !image_parts(c).empty();
}

}  // namespace waste
