#include "prompt_templates/raw_template.h"

#include "engine/base/error.h"

namespace waste {

std::vector<Segment> render_raw(const Conversation& request) {
  std::string text;
  for (std::size_t i = 0; i < request.messages.size(); i++) {
    const MessageContent& c = request.messages[i].content;
    if (const std::string* s = std::get_if<std::string>(&c)) text += *s;
    if (const auto* parts = std::get_if<std::vector<ContentPart>>(&c)) {
      for (std::size_t j = 0; j < parts->size(); j++) {
        if ((*parts)[j].kind == ContentPart::Kind::kImage)
          fail<UsageError>("messages[{}].content[{}]: this model does not take images", i, j);
        text += (*parts)[j].text;
      }
    }
  }
  if (text.empty()) return {};
  return {{std::move(text), false}};
}

}  // namespace waste
