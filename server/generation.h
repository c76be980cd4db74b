// One request on the engine thread: prefill from the best snapshot, the decode loop, the reply
// parser's events turned into OpenAI output (SSE deltas or one JSON body), stop conditions.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "engine/model.h"
#include "engine/sampler.h"
#include "server/engine_worker.h"
#include "server/stop_matcher.h"

namespace waste {

struct GenerationResult {
  Usage usage;
  std::string finish_reason;  // stop, length, tool_calls; empty when cancelled
  double prefill_seconds = 0, decode_seconds = 0;
  bool cancelled = false;
};

class Generation {
 public:
  Generation(Model& m, const Tokenizer& tok, const ChatFormat* chat, PrefixCache& cache,
             const WorkerOptions& opt, Job& job);
  // Prefill and decode; the answer is not sent yet, so the caller can count it first.
  GenerationResult run();
  // Sends the answer (the final chunks or the whole body) unless the client went away.
  void deliver();

 private:
  bool prefill(Session& s, std::vector<float>& logits);
  bool feed(Session& s, size_t from, size_t to, float* logits);
  bool keep_alive();
  void on_events(const std::vector<ReplyEvent>& events);
  void on_text(const std::string& text);
  void on_reasoning(const std::string& text);
  bool write_chunk(const ChatDelta& d);
  // The next token: from the sampler, within the constraint's mask when there is one.
  int32_t sample(const std::vector<float>& logits, const std::vector<int32_t>& generated);
  void finish(const std::string& reason);

  Model& model_;
  const Tokenizer& tok_;
  const ChatFormat* chat_;
  PrefixCache& cache_;
  const WorkerOptions& opt_;
  Job& job_;
  Sampler sampler_;
  std::unique_ptr<ReplyParser> parser_;
  std::unique_ptr<StreamDecoder> text_decoder_;  // completions: plain text
  StopMatcher stops_;
  ChatMessageOut message_;
  std::string completion_text_;
  bool role_sent_ = false;
  int open_tool_ = -1;
  std::chrono::steady_clock::time_point last_write_;
  GenerationResult result_;
  std::string reason_;
  std::vector<uint8_t> mask_;  // the constraint's allowed ids, one bit each
};

}  // namespace waste
