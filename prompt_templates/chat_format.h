// The one place a model family is chosen and dispatched to. A ChatFormat is made from the
// tokenizer (the family is whichever markers its specials hold: K3's XTML, Kimi K2's turns (also
// Kimi-Linear's), else raw text) and answers every family question: how a Conversation becomes
// prompt tokens (and where its last complete message ends, for snapshots), which parser reads the
// reply, which grammar a structured reply follows, which tokens open a forced tool call, and
// which tokens end a turn. The daemon and every CLI command go through it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "prompt_templates/reply_parser.h"
#include "prompt_templates/segments.h"
#include "protocol/constraint/grammar.h"
#include "protocol/conversation.h"

namespace waste {

enum class ChatFamily { kK3, kK2, kRaw };

struct RenderedPrompt {
  std::vector<int32_t> ids;
  // Snapshot points, ascending, each inside the prompt: the end of the preamble (the leading
  // system messages and the tools, which an agent sends unchanged with every request) and the
  // end of the last complete message (where the next turn goes on).
  std::vector<size_t> snapshots;
  bool thinking = false;
};

struct ChatDefaults {
  bool thinking = true;           // when the request does not say (a family with a think channel)
  std::string effort = "max";     // K3: when thinking and the request names no effort
  bool generation_prompt = true;  // end the prompt with the assistant's opening
  bool thinking_allowed = true;   // false keeps thinking off whatever the request says
};

class ChatFormat {
 public:
  // `eos` is the model's end-of-sequence id (none: the config names none).
  ChatFormat(const Tokenizer& tok, std::optional<int32_t> eos, ChatDefaults defaults);

  ChatFamily family() const { return family_; }
  const char* family_name() const;
  const Tokenizer& tokenizer() const { return tok_; }

  // The prompt for `c`. `image_prompts` holds one media block (image_block) per image part,
  // in order: each block's <|media_pad|> is one id here, for the caller to widen to the image's
  // positions; without them an image part renders as K3's placeholder token, and a family
  // without images refuses image parts. Throws UsageError naming the field the format cannot
  // carry.
  using ImagePrompts = std::optional<std::vector<std::string>>;
  RenderedPrompt render(const Conversation& c, const ImagePrompts& image_prompts = {}) const;
  // The segments of the prompt (with the generation prompt unless the defaults say otherwise),
  // for `waste render`.
  std::vector<Segment> segments(const Conversation& c,
                                const ImagePrompts& image_prompts = {}) const;

  // Whether the reply to `c` reasons: the request's switch, else the server's default, and never
  // where the server forbids it (ChatDefaults::thinking_allowed) or the family has no think
  // channel (K3 has one; K2 where the vocabulary has <think> and </think>). render() reports it.
  bool thinking(const Conversation& c) const;

  // The parser of the reply to a prompt render() made (`thinking` from it); call ids come from
  // `seed`.
  std::unique_ptr<ReplyParser> parser(bool thinking, uint64_t seed) const;
  // The grammar the reply must follow (response_format, a forced or required tool call), or
  // null when it is free. Throws SchemaError for a schema that cannot be enforced and UsageError
  // for a tool choice the format cannot carry.
  std::shared_ptr<const Grammar> reply_grammar(const Conversation& c, bool thinking) const;
  // The tokens the caller writes in the model's place before it generates (the reply grammar
  // then covers the rest): for tool_choice naming a function, the tokens that open that call, so
  // the reply is that call; on K2 with a think channel (K2-Thinking) and thinking off, that
  // channel left empty first, since such a model always opens its reply with it. Empty when
  // neither applies.
  std::vector<int32_t> forced_opening(const Conversation& c, bool thinking) const;
  // For tool_choice named or required: the ids that finish opening the reply's first call after
  // `reply` (the reply's ids so far), for a reply cut before that call opened. Empty when the
  // call is open already, the reply went elsewhere, it has not yet said which of several tools it
  // calls, or the format has no tool calls.
  std::vector<int32_t> call_opening_rest(const Conversation& c, bool thinking,
                                         std::span<const int32_t> reply) const;
  // Ids that end the assistant's turn: the family's end-of-message token and eos.
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  // The id each image's media block holds once, for the caller to widen to the image's
  // positions (K3's <|media_pad|>); none for a family without images.
  std::optional<int32_t> media_pad() const;
  // One image's media block for render()'s `image_prompts` (K3's `<|media_begin|>image WxH…`).
  // Throws UsageError for a family without images.
  std::string image_block(int width, int height) const;

 private:
  static std::optional<Conversation> preamble(const Conversation& c);
  std::vector<Segment> family_segments(const Conversation& c, bool generation_prompt,
                                       const ImagePrompts& image_prompts) const;

  const Tokenizer& tok_;
  ChatFamily family_;
  ChatDefaults defaults_;
  std::vector<int32_t> end_ids_;
  bool think_tokens_ = false;  // K2: the vocabulary has <think> and </think>
};

}  // namespace waste
