// The model family's chat conventions, chosen from the container: how a ChatRequest becomes
// prompt tokens (and where its last complete message ends, for snapshots), which reply parser
// reads the answer, and which tokens end a turn.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/container.h"
#include "engine/rng.h"
#include "engine/tokenizer.h"
#include "prompt_templates/reply_parser.h"
#include "prompt_templates/segments.h"

namespace waste {

enum class ChatFamily { kK3, kKimiLinear, kRaw };

struct RenderedPrompt {
  std::vector<int32_t> ids;
  size_t boundary = 0;  // tokens up to the end of the last complete message (a snapshot point)
  bool thinking = false;
};

struct ChatDefaults {
  bool thinking = true;
  std::string effort = "max";
};

class ChatFormat {
 public:
  ChatFormat(const Container& c, const Tokenizer& tok, ChatDefaults defaults);

  ChatFamily family() const { return family_; }
  const char* family_name() const;
  // Throws UsageError naming the field the format cannot carry.
  RenderedPrompt render(const ChatRequest& r) const;
  // With one media block (k3_image_prompt) per image part, in order (K3 only): each block's
  // <|media_pad|> is one id here, for the caller to widen to the image's positions.
  RenderedPrompt render(const ChatRequest& r, const std::vector<std::string>& image_prompts) const;
  std::unique_ptr<ReplyParser> parser(bool thinking, uint64_t seed) const;
  // Function names go verbatim into K3's call markup, so only plain identifier characters are
  // allowed (a '"' or a "<|...|>" inside one would change the markup). Throws UsageError naming
  // `where`.
  static void check_function_name(const std::string& name, const std::string& where);

  // For tool_choice naming a function (K3): the tokens that open that call, which the server
  // writes in the model's place so the reply is that call; the model writes the arguments.
  // Empty when the request names no function or the format has no tool calls.
  std::vector<int32_t> forced_tool_call(const ChatRequest& r, bool thinking) const;
  // Ids that end the assistant's turn.
  const std::vector<int32_t>& end_ids() const { return end_ids_; }

 private:
  std::vector<Segment> segments(const ChatRequest& r, bool generation_prompt,
                                const std::vector<std::string>* image_prompts = nullptr) const;
  RenderedPrompt render_with(const ChatRequest& r,
                             const std::vector<std::string>* image_prompts) const;

  const Tokenizer& tok_;
  ChatFamily family_;
  ChatDefaults defaults_;
  std::vector<int32_t> end_ids_;
};

}  // namespace waste
