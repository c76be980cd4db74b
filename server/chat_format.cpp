#include "server/chat_format.h"

#include <algorithm>

#include "engine/error.h"
#include "prompt_templates/k3_template.h"
#include "prompt_templates/kimi_linear_template.h"

namespace waste {

ChatFormat::ChatFormat(const Container& c, const Tokenizer& tok, ChatDefaults defaults)
    : tok_(tok), defaults_(std::move(defaults)) {
  bool k3_markers = tok.find_special("<|open|>") && tok.find_special("<|sep|>");
  bool im_markers =
      std::all_of(kimi_linear_markers().begin(), kimi_linear_markers().end(),
                  [&](std::string_view m) { return tok.find_special(m).has_value(); });
  family_ = k3_markers ? ChatFamily::kK3 : im_markers ? ChatFamily::kKimiLinear : ChatFamily::kRaw;
  for (const char* end : {"<|end_of_msg|>", "<|im_end|>"})
    if (auto id = tok.find_special(end)) end_ids_.push_back(*id);
  int64_t eos = c.config().eos_token_id;
  if (eos > 0 && std::find(end_ids_.begin(), end_ids_.end(), eos) == end_ids_.end())
    end_ids_.push_back((int32_t)eos);
}

const char* ChatFormat::family_name() const {
  switch (family_) {
    case ChatFamily::kK3:
      return "k3";
    case ChatFamily::kKimiLinear:
      return "kimi-linear";
    case ChatFamily::kRaw:
      return "raw";
  }
  return "?";
}

std::vector<Segment> ChatFormat::segments(const ChatRequest& r, bool generation_prompt,
                                          const std::vector<std::string>* image_prompts) const {
  if (family_ == ChatFamily::kK3) {
    K3RenderOptions o;
    o.default_thinking = defaults_.thinking;
    o.default_effort = defaults_.effort;
    o.add_generation_prompt = generation_prompt;
    if (image_prompts) {
      o.image_prompts = *image_prompts;
      o.text_placeholders_take_images = false;  // only image parts get media blocks
    }
    return render_k3(r, o);
  }
  if (image_prompts && !image_prompts->empty())
    fail<UsageError>("messages: this model's chat format does not take images");
  if (family_ == ChatFamily::kKimiLinear) {
    KimiLinearRenderOptions o;
    o.add_generation_prompt = generation_prompt;
    return render_kimi_linear(r, o);
  }
  return render_raw(r);
}

RenderedPrompt ChatFormat::render(const ChatRequest& r) const {
  return render_with(r, nullptr);
}

RenderedPrompt ChatFormat::render(const ChatRequest& r,
                                  const std::vector<std::string>& image_prompts) const {
  return render_with(r, &image_prompts);
}

RenderedPrompt ChatFormat::render_with(const ChatRequest& r,
                                       const std::vector<std::string>* image_prompts) const {
  RenderedPrompt p;
  for (int id : tokenize_segments(tok_, segments(r, true, image_prompts))) p.ids.push_back(id);
  if (family_ != ChatFamily::kRaw) {
    std::vector<int> history = tokenize_segments(tok_, segments(r, false, image_prompts));
    if (history.size() < p.ids.size() && std::equal(history.begin(), history.end(), p.ids.begin()))
      p.boundary = history.size();
  }
  if (family_ == ChatFamily::kK3) {
    K3RenderOptions o;
    o.default_thinking = defaults_.thinking;
    o.default_effort = defaults_.effort;
    p.thinking = k3_thinking(r, o);
  }
  return p;
}

void ChatFormat::check_function_name(const std::string& name, const std::string& where) {
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789_-.") != std::string::npos)
    fail<UsageError>("{}: '{}' is not a valid function name", where, name);
}

std::vector<int32_t> ChatFormat::forced_tool_call(const ChatRequest& r, bool thinking) const {
  if (family_ != ChatFamily::kK3 || r.tool_choice.kind != ToolChoice::Kind::kNamed) return {};
  const std::string& name = r.tool_choice.name;
  check_function_name(name, "tool_choice.function.name");
  // Leave the think channel (if the prompt opened it) and the response channel, open the call.
  std::string markup = thinking ? "<|close|>think<|sep|><|open|>response<|sep|>" : "";
  markup += "<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"" + name +
            "\" index=\"1\"<|sep|>";
  std::vector<int32_t> ids;
  for (int id : tok_.encode_markup(markup)) ids.push_back(id);
  return ids;
}

std::unique_ptr<ReplyParser> ChatFormat::parser(bool thinking, uint64_t seed) const {
  if (family_ == ChatFamily::kK3) {
    K3ReplyOptions o;
    o.thinking = thinking;
    return std::make_unique<K3ReplyParser>(tok_, o, Rng(seed));
  }
  std::optional<TokenId> end;
  if (!end_ids_.empty()) end = end_ids_[0];
  return std::make_unique<KimiLinearReplyParser>(tok_, end);
}

}  // namespace waste
