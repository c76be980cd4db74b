#include "prompt_templates/chat_format.h"

#include <algorithm>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "prompt_templates/k3/k3_markup.h"
#include "prompt_templates/k3/k3_reply_grammar.h"
#include "prompt_templates/k3/k3_reply_parser.h"
#include "prompt_templates/k3/k3_template.h"
#include "prompt_templates/kimi_k2/k2_markup.h"
#include "prompt_templates/kimi_k2/k2_reply_grammar.h"
#include "prompt_templates/kimi_k2/k2_reply_parser.h"
#include "prompt_templates/kimi_k2/k2_template.h"
#include "prompt_templates/raw_template.h"
#include "prompt_templates/reply_grammar.h"
#include "prompt_templates/segments.h"

namespace waste {

ChatFormat::ChatFormat(const Tokenizer& tok, std::optional<int32_t> eos, ChatDefaults defaults)
    : tok_(tok), defaults_(std::move(defaults)) {
  bool k3_markers = tok.find_special(k3::kOpen) && tok.find_special(k3::kSep);
  auto all_special = [&](const std::vector<std::string_view>& markers) {
    return std::all_of(markers.begin(), markers.end(),
                       [&](std::string_view m) { return tok.find_special(m).has_value(); });
  };
  // The K2 family needs its tool-call markers too: without them a tool call would be prose.
  const bool k2_markers = all_special(k2_turn_markers()) && all_special(k2_tool_markers());
  family_ = k3_markers ? ChatFamily::kK3 : k2_markers ? ChatFamily::kK2 : ChatFamily::kRaw;
  think_tokens_ = family_ == ChatFamily::kK2 && all_special({k2::kThinkOpen, k2::kThinkClose});
  for (std::string_view end : {k3::kEndOfMsg, k2::kEnd})
    if (auto id = tok.find_special(end)) end_ids_.push_back(*id);
  if (eos && *eos > 0 && std::find(end_ids_.begin(), end_ids_.end(), *eos) == end_ids_.end())
    end_ids_.push_back(*eos);
}

const char* ChatFormat::family_name() const {
  switch (family_) {
    case ChatFamily::kK3:
      return "k3";
    case ChatFamily::kK2:
      return "k2";
    case ChatFamily::kRaw:
      return "raw";
  }
  return "?";
}

std::vector<Segment> ChatFormat::family_segments(const Conversation& c, bool generation_prompt,
                                                 const ImagePrompts& image_prompts) const {
  if (family_ == ChatFamily::kK3) {
    K3RenderOptions o;
    o.default_thinking = defaults_.thinking;
    o.thinking_allowed = defaults_.thinking_allowed;
    o.default_effort = defaults_.effort;
    o.add_generation_prompt = generation_prompt;
    if (image_prompts) {
      o.image_prompts = *image_prompts;
      o.text_placeholders_take_images = false;  // only image parts get media blocks
    }
    return render_k3(c, o);
  }
  if (image_prompts && !image_prompts->empty())
    fail<UsageError>("messages: this model's chat format does not take images");
  if (family_ == ChatFamily::kK2) {
    K2RenderOptions o;
    o.add_generation_prompt = generation_prompt;
    o.think_tokens = think_tokens_;
    return render_k2(c, o);
  }
  return render_raw(c);
}

// The conversation cut after its leading system messages, tools kept: what an agent sends
// unchanged on every request, whatever its user message says. None when there are no leading
// system messages and no tools, when nothing follows them, or when they hold an image.
std::optional<Conversation> ChatFormat::preamble(const Conversation& c) {
  size_t n = 0;
  while (n < c.messages.size() && c.messages[n].role == Role::kSystem) n++;
  if ((n == 0 && c.tools.empty()) || n == c.messages.size()) return std::nullopt;
  for (size_t i = 0; i < n; i++)
    if (const auto* parts = std::get_if<std::vector<ContentPart>>(&c.messages[i].content))
      for (const ContentPart& part : *parts)
        if (part.kind == ContentPart::Kind::kImage) return std::nullopt;
  Conversation pre = c;
  pre.messages.resize(n);
  return pre;
}

std::vector<Segment> ChatFormat::segments(const Conversation& c,
                                          const ImagePrompts& image_prompts) const {
  return family_segments(c, defaults_.generation_prompt, image_prompts);
}

RenderedPrompt ChatFormat::render(const Conversation& c, const ImagePrompts& image_prompts) const {
  RenderedPrompt p;
  for (int id : tokenize_segments(tok_, family_segments(c, true, image_prompts)))
    p.ids.push_back(id);
  if (family_ != ChatFamily::kRaw) {
    // A point counts only where its rendering is exactly the prompt's start.
    auto add_point = [&](const std::vector<int>& head) {
      const size_t last = p.snapshots.empty() ? 0 : p.snapshots.back();
      if (head.size() > last && head.size() < p.ids.size() &&
          std::equal(head.begin(), head.end(), p.ids.begin()))
        p.snapshots.push_back(head.size());
    };
    if (std::optional<Conversation> pre = preamble(c))
      add_point(tokenize_segments(tok_, family_segments(*pre, false, {})));
    add_point(tokenize_segments(tok_, family_segments(c, false, image_prompts)));
  }
  p.thinking = thinking(c);
  return p;
}

bool ChatFormat::thinking(const Conversation& c) const {
  const bool channel = family_ == ChatFamily::kK3 || think_tokens_;
  return channel && thinking_on(c, defaults_.thinking, defaults_.thinking_allowed);
}

std::unique_ptr<ReplyParser> ChatFormat::parser(bool thinking, uint64_t seed) const {
  if (family_ == ChatFamily::kK3) {
    K3ReplyOptions o;
    o.thinking = thinking;
    return std::make_unique<K3ReplyParser>(tok_, o, Rng(seed));
  }
  if (family_ == ChatFamily::kK2) return std::make_unique<K2ReplyParser>(tok_, end_ids_);
  return std::make_unique<TextReplyParser>(tok_, end_ids_);
}

std::shared_ptr<const Grammar> ChatFormat::reply_grammar(const Conversation& c,
                                                         bool thinking) const {
  if (family_ == ChatFamily::kK3) return k3_reply_grammar(c, thinking);
  if (family_ == ChatFamily::kK2)
    return k2_reply_grammar(c, {.think_tokens = think_tokens_, .thinking = thinking});
  if (c.response_format.kind == ResponseFormat::Kind::kText) return nullptr;
  // Raw text has no end token of its own, so the reply ends when the value is complete.
  auto g = std::make_shared<Grammar>();
  g->root = response_value(*g, c.response_format);
  return g;
}

std::optional<int32_t> ChatFormat::media_pad() const {
  if (family_ != ChatFamily::kK3) return std::nullopt;
  return tok_.find_special(k3::kMediaPad);
}

std::string ChatFormat::image_block(int width, int height) const {
  if (family_ != ChatFamily::kK3)
    fail<UsageError>("this model's chat format ({}) has no image blocks", family_name());
  return k3_image_prompt(width, height);
}

std::vector<int32_t> ChatFormat::forced_opening(const Conversation& c, bool thinking) const {
  std::string markup;
  if (family_ == ChatFamily::kK3) markup = k3_forced_opening(c, thinking);
  if (family_ == ChatFamily::kK2)
    markup = k2_forced_opening(c, {.think_tokens = think_tokens_, .thinking = thinking});
  std::vector<int32_t> ids;
  if (!markup.empty())
    for (int id : tok_.encode_markup(markup)) ids.push_back(id);
  return ids;
}

std::vector<int32_t> ChatFormat::call_opening_rest(const Conversation& c, bool thinking,
                                                   std::span<const int32_t> reply) const {
  if (family_ == ChatFamily::kRaw) return {};
  std::string written;
  for (int32_t id : reply) written += tok_.token_bytes(id);
  std::optional<std::string> rest =
      family_ == ChatFamily::kK3
          ? k3_call_opening_rest(c, thinking, written)
          : k2_call_opening_rest(c, {.think_tokens = think_tokens_, .thinking = thinking}, written);
  std::vector<int32_t> ids;
  if (rest)
    for (int id : tok_.encode_markup(*rest)) ids.push_back(id);
  return ids;
}

}  // namespace waste
