// One generation on the thread that owns the model, the same for the daemon and the CLI:
// prefill (continuing the caller's session or restoring the longest cached prefix, image
// positions taking tower rows, a snapshot at the last complete message; a prefill cut short leaves
// a partial snapshot at its last finished window), then token by token:
// forced tokens first, then sampling within the constraint's mask, each id read by the reply
// parser, until one of the end rules:
//   - an end-of-turn id (the family's end-of-message token or eos)     -> Finish::kEnd
//   - a stop string in the content                                       -> Finish::kStop
//   - the constraint complete (a grammar with no end token of its own)  -> Finish::kEnd
//   - max_new tokens generated, or prompt + reply filling the context   -> Finish::kLength
//   - the sink reports the client gone                                  -> Finish::kCancelled
// Events reach the sink as they happen; content never includes any part of a stop string. A reply
// cut by its budget while a promised tool call was still opening is read on to that call
// (DecodeInput::call_opening_rest), so every API reports the call a cut left.
// Several replies to one prompt (OpenAI's `n`) prefill it once: each reply after the first starts
// from a copy of the prompt's state and logits, with a fresh copy of the constraint, its own
// parser and the seed plus its index. To a sink that interleaves() they are decoded at once, each
// on its own thread as a member of the gate, so their tokens share steps; the replies are the
// same either way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "engine/model/sampler.h"
#include "engine/model/session.h"
#include "prompt_templates/reply_parser.h"
#include "protocol/constraint/token_constraint.h"
#include "server/prompt_cache/prefix_cache.h"
#include "server/runtime/prompt_images.h"
#include "server/runtime/step_gate.h"

namespace waste {

// What to generate from.
struct DecodeInput {
  std::vector<int32_t> prompt;
  std::vector<size_t> snapshots;         // prompt positions to snapshot at (RenderedPrompt's)
  std::shared_ptr<PromptImages> images;  // the prompt's images; null for text only
  std::vector<int32_t> forced;           // reply tokens written in the model's place first
  // The reply's required shape after `forced`; null when the reply is free.
  std::unique_ptr<TokenConstraint> constraint;
  // When the reply must call a tool (tool_choice named or required): given the reply so far,
  // the ids that finish opening its first call (none when that call is open already, or when
  // the reply has not yet said which of several tools it calls). A reply cut before its call
  // opened is read on with them, so it keeps the call as one cut later does. Unset: no call is
  // promised.
  std::function<std::vector<int32_t>(std::span<const int32_t> reply)> call_opening_rest;
  std::vector<int32_t> end_ids;  // ids that end the turn
  std::vector<std::string> stop;
  SamplerParams sampler;
  int64_t max_new = 0;  // tokens to generate at most
  // Report each prompt token's log-probability (sampler.logprobs alternatives) to the sink. The
  // prompt is then computed position by position, every position's logits, with no snapshot
  // restored: slow, for scoring text (completions' echo).
  bool score_prompt = false;
};

enum class Finish { kEnd, kStop, kLength, kCancelled };
const char* finish_name(Finish f);

struct DecodeResult {
  Finish finish = Finish::kEnd;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;    // prompt positions restored instead of computed
  std::vector<int32_t> tokens;  // the reply's ids, forced ones included
  std::string stop;             // Finish::kStop: the stop string that ended the reply
  uint64_t seed = 0;            // the sampler's seed, for reports
  double prefill_seconds = 0, decode_seconds = 0;  // prefill: 0 for the replies after the first
};

// Where a generation's output goes. Called on the model's thread.
class ReplySink {
 public:
  virtual ~ReplySink() = default;
  // Asked before each prefill chunk and each token: true once nobody waits for the reply.
  virtual bool cancelled() { return false; }
  // After each prefill chunk: `done` of `total` prompt positions are in the session.
  virtual void prefill_progress(size_t done, size_t total) {}
  // One event of the reply, in order.
  virtual void on_event(const ReplyEvent& e) = 0;
  // Each reply id as it is chosen (before its events), with the sampler's report when it was
  // drawn and SamplerParams::logprobs asked for one (null for forced ids).
  virtual void on_token(int32_t id, const TokenLogprobs* logprobs) {}
  // With DecodeInput::score_prompt: each prompt id in order, the first with no report (nothing
  // predicts it), the others with the distribution after the ids before them.
  virtual void on_prompt_token(int32_t id, const TokenLogprobs* logprobs) {}
  // The events that follow are reply `index`'s (0, 1, ...; the first reply's need no call). In
  // order, each index once, unless the sink interleaves().
  virtual void begin_choice(size_t index) {}
  // Whether replies may take turns: begin_choice() with an index seen before makes it current
  // again. Several replies to one prompt are then decoded at once, in parallel slots of the
  // gate; otherwise one after another.
  virtual bool interleaves() const { return false; }
};

class Decoder {
 public:
  // `cache` (may be null) supplies prefix snapshots and keeps the new ones. Alone, the decoder
  // has the model to itself; with a gate it shares each step with the gate's other members.
  Decoder(Model& model, PrefixCache* cache);
  Decoder(StepGate& gate, PrefixCache* cache);

  // Generates the reply to `in.prompt` into `s`: a session that holds an earlier turn of the
  // same conversation is continued, any other is started afresh (with s.ctx() positions).
  // `parser` reads the reply (the family's, or plain text; null when only ids are wanted). Engine
  // errors propagate; the session is then marked broken.
  DecodeResult run(Session& s, DecodeInput& in, ReplyParser* parser, ReplySink& sink);
  // parsers.size() replies (at least one; an entry may be null), in order; the result stops at
  // the first cancelled one.
  std::vector<DecodeResult> run(Session& s, DecodeInput& in, std::span<ReplyParser* const> parsers,
                                ReplySink& sink);
  Model& model() const { return model_; }
  // The logits after the last position run() computed for its first reply (vocab floats).
  const std::vector<float>& logits() const { return main_.logits; }

 private:
  // What one reply being decoded holds of its own.
  struct Lane {
    StepGate::Member* member = nullptr;  // its seat at the gate, during run()
    std::vector<float> logits;           // after its last position
    std::vector<uint8_t> mask;           // the constraint's allowed ids, one bit each
  };

  bool prefill(Session& s, const DecodeInput& in, ReplySink& sink, DecodeResult& r);
  bool keep_partial(const Session& s, std::span<const uint64_t> media, size_t kept);
  bool score(Session& s, const DecodeInput& in, ReplySink& sink);
  bool feed(Session& s, const DecodeInput& in, size_t from, size_t to, float* logits,
            ReplySink& sink);
  void more_replies(const Session& prompt, DecodeInput& in, std::span<ReplyParser* const> parsers,
                    ReplySink& sink, std::vector<DecodeResult>& out);
  void decode(Lane& lane, Session& s, DecodeInput& in, ReplyParser* parser, ReplySink& sink,
              DecodeResult& r);
  int32_t next_token(Lane& lane, DecodeInput& in, Sampler& sampler,
                     const std::vector<int32_t>& generated);

  std::unique_ptr<StepGate> own_gate_;  // alone: a gate of one
  StepGate& gate_;
  Model& model_;
  PrefixCache* cache_;
  Lane main_;  // the prompt's and the first reply's
};

}  // namespace waste
