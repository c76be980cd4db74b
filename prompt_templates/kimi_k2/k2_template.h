// Kimi K2's chat rendering, a native port of the release's Jinja chat template (K2-Thinking's
// chat_template.jinja, kept in tests/fixtures/k2 with its provenance; docs/PROMPT_FORMAT.md §4):
// the tool declaration turn, the default system turn, user / assistant / tool turns with the
// think channel kept only after the last plain assistant reply, tool calls and `## Return of`
// results, and the generation prompt. Kimi-Linear containers use it too: their release ships the
// K2 vocabulary and no template of its own.
//
// The template's output is one string that the release tokenizes whole, so the segments are cut
// only at special tokens: each special token is one markup segment and each stretch of text
// between two of them is one text segment (client text included, which is tokenized with
// specials disabled, so it can never forge a marker).
#pragma once

#include <vector>

#include "prompt_templates/segments.h"
#include "protocol/conversation.h"

namespace waste {

struct K2RenderOptions {
  bool add_generation_prompt = true;
  // Whether <think> and </think> are special tokens of the vocabulary (K2-Thinking's); else they
  // are text, joined to the text around them.
  bool think_tokens = false;
};

// Throws UsageError naming the field for what the format cannot carry: an image part (the family
// serves no vision tower) or tool-call arguments that are not JSON.
std::vector<Segment> render_k2(const Conversation& request, const K2RenderOptions& options = {});

// The special tokens render_k2 emits in every prompt; a container must define each one.
const std::vector<std::string_view>& k2_turn_markers();
// The tool-call markers; a container must define each one as a single token to carry tools.
const std::vector<std::string_view>& k2_tool_markers();

// How many tool calls the conversation's assistant messages hold: the index the model gives its
// next call (K2 numbers calls across the whole conversation, `functions.NAME:INDEX`).
std::size_t k2_calls_so_far(const Conversation& request);

}  // namespace waste
