#include "prompt_templates/kimi_linear/kimi_linear_template.h"

#include <fmt/format.h>

#include "engine/base/error.h"
#include "prompt_templates/kimi_linear/kimi_linear_markup.h"

namespace waste {
namespace {

using kimi_linear::kAssistant;
using kimi_linear::kEnd;
using kimi_linear::kMiddle;
using kimi_linear::kSystem;
using kimi_linear::kUser;

void push_text(std::vector<Segment>& out, std::string_view s) {
  if (!s.empty()) out.push_back({std::string(s), false});
}

// Text parts stay separate segments, as in K3's rendering; images have no place here.
void push_content(std::vector<Segment>& out, const MessageContent& c, std::size_t at) {
  if (const std::string* s = std::get_if<std::string>(&c)) {
    push_text(out, *s);
    return;
  }
  if (const auto* parts = std::get_if<std::vector<ContentPart>>(&c)) {
    for (std::size_t j = 0; j < parts->size(); j++) {
      if ((*parts)[j].kind == ContentPart::Kind::kImage) {
        fail<UsageError>("messages[{}].content[{}]: this model does not take images", at, j);
      }
      push_text(out, (*parts)[j].text);
    }
  }
}

void push_header(std::vector<Segment>& out, std::string_view marker, std::string_view role) {
  out.push_back({std::string(marker), true});
  push_text(out, role);
  out.push_back({std::string(kMiddle), true});
}

void check_message(const ChatMessage& m, std::size_t at) {
  if (m.role == Role::kTool) {
    fail<UsageError>(
        "messages[{}].role: tool results are not supported for Kimi-Linear (its tool-call format "
        "is not documented)",
        at);
  }
  if (!m.tool_calls.empty()) {
    fail<UsageError>("messages[{}].tool_calls: tool calls are not supported for Kimi-Linear", at);
  }
  if (!m.tools.empty()) {
    fail<UsageError>("messages[{}].tools: tools are not supported for Kimi-Linear", at);
  }
}

void check_request(const Conversation& req) {
  if (!req.tools.empty()) {
    fail<UsageError>(
        "tools: tool calling is not supported for Kimi-Linear (its tool-call format is not "
        "documented)");
  }
  if (req.tool_choice.kind == ToolChoice::Kind::kRequired ||
      req.tool_choice.kind == ToolChoice::Kind::kNamed) {
    fail<UsageError>("tool_choice: tool calling is not supported for Kimi-Linear");
  }
}

}  // namespace

const std::vector<std::string_view>& kimi_linear_markers() {
  static const std::vector<std::string_view> markers{kSystem, kUser, kAssistant, kMiddle, kEnd};
  return markers;
}

std::vector<Segment> render_kimi_linear(const Conversation& request,
                                        const KimiLinearRenderOptions& options) {
  check_request(request);
  std::vector<Segment> out;
  for (std::size_t i = 0; i < request.messages.size(); i++) {
    const ChatMessage& m = request.messages[i];
    check_message(m, i);
    if (m.role == Role::kSystem)
      push_header(out, kSystem, "system");
    else if (m.role == Role::kUser)
      push_header(out, kUser, "user");
    else
      push_header(out, kAssistant, "assistant");
    push_content(out, m.content, i);
    out.push_back({std::string(kEnd), true});
  }
  if (options.add_generation_prompt) push_header(out, kAssistant, "assistant");
  return out;
}

}  // namespace waste
