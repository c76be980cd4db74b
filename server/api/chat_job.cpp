#include "server/api/chat_job.h"

#include <algorithm>

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/model/sampler.h"
#include "protocol/api_error.h"
#include "protocol/constraint/json_schema.h"
#include "server/api/request_images.h"

namespace waste {

namespace {

ImageRequestLimits image_limits(const ServeOptions& o) {
  ImageRequestLimits l;
  l.decode.max_encoded_bytes = o.max_image_bytes;
  l.decode.max_pixels = o.max_image_pixels;
  l.decode.allow_tga_psd = o.allow_tga_psd;
  l.max_images = o.max_images;
  l.allow_remote = o.allow_remote_images;
  l.allow_private_hosts = o.allow_private_image_hosts;
  return l;
}

// The reply's length: what the request asks (or the server's default), within the context.
// Refusals use OpenAI's sentences: clients (opencode among them) match on them to compact and
// retry. `what` is where the prompt came from: "messages" or "prompt".
int64_t reply_budget(const ServeOptions& o, int64_t ctx, size_t prompt, const GenerationParams& p,
                     const char* what) {
  const int64_t n = (int64_t)prompt;
  const int64_t room = ctx - n;
  if (room < 1)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, your "
                               "{} resulted in {} tokens. Please reduce the length of the {}.",
                               ctx, what, n, what),
                   what, "context_length_exceeded");
  if (p.max_tokens && *p.max_tokens > room)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens. However, you "
                               "requested {} tokens ({} in the {}, {} in the completion). Please "
                               "reduce the length of the {} or completion.",
                               ctx, n + *p.max_tokens, n, what, *p.max_tokens, what),
                   what, "context_length_exceeded");
  return std::min(p.max_tokens.value_or(o.default_max_tokens), room);
}

// The request's images, decoded and preprocessed; null when it has none.
std::shared_ptr<PromptImages> prompt_images(const ServingModel& m, const ServeOptions& o,
                                            const Conversation& c) {
  if (!has_images(c)) return nullptr;
  try {
    std::vector<PromptImage> list = request_images(c, m.vision.get(), image_limits(o));
    return std::make_shared<PromptImages>(*m.vision, std::move(list));
  } catch (const ApiError& e) {
    if (m.vision || m.vision_error.empty()) throw;
    throw ApiError(e.status, fmt::format("{} ({})", e.message, m.vision_error), e.param, e.code);
  }
}

RenderedPrompt render(const ServingModel& m, const ServeOptions& o, const Conversation& c,
                      PromptImages* images) {
  try {
    RenderedPrompt p = render_with_images(m.format, c, images);
    if (images) check_image_room(images->images(), m.host.ctx());
    return p;
  } catch (const UsageError& e) {
    throw ApiError(400, e.what(), "messages");
  }
}

// Whether the reply must call a tool: the family enforces tool_choice named or required.
bool call_required(const ServingModel& m, const Conversation& c) {
  return m.format.family() != ChatFamily::kRaw &&
         (c.tool_choice.kind == ToolChoice::Kind::kNamed ||
          c.tool_choice.kind == ToolChoice::Kind::kRequired);
}

// The constraint that holds the reply to response_format or the forced tool call.
std::unique_ptr<TokenConstraint> reply_constraint(const ServingModel& m, const Conversation& c,
                                                  bool thinking) {
  const bool tools = call_required(m, c);
  try {
    std::shared_ptr<const Grammar> g = m.format.reply_grammar(c, thinking);
    if (!g) return nullptr;
    return std::make_unique<TokenConstraint>(g, *m.token_index);
  } catch (const SchemaError& e) {
    throw ApiError(400, e.what(), tools ? "tools" : "response_format");
  } catch (const UsageError& e) {
    throw ApiError(400, e.what(), tools ? "tool_choice" : "response_format");
  }
}

}  // namespace

std::string reply_model(const ServingModel& m, const std::string& model) {
  if (model.empty()) return m.id;
  const auto aliased = [&](std::string_view name) {
    return std::find(m.aliases.begin(), m.aliases.end(), name) != m.aliases.end();
  };
  if (model == m.id || aliased(model) || aliased(kAnyModel)) return model;
  throw ApiError(
      404,
      fmt::format("the model '{}' does not exist; this server serves '{}' (--model-alias "
                  "adds other names for it, --model-alias '*' answers any name)",
                  model, m.id),
      "model", "model_not_found");
}

int64_t prompt_tokens(const ServingModel& m, const ServeOptions& opt, const Conversation& c) {
  std::shared_ptr<PromptImages> images = prompt_images(m, opt, c);
  return (int64_t)render(m, opt, c, images.get()).ids.size();
}

Job chat_job(const ServingModel& m, const ServeOptions& opt, const Conversation& c,
             const GenerationParams& p) {
  Job job;
  DecodeInput& in = job.input;
  in.images = prompt_images(m, opt, c);
  RenderedPrompt rp = render(m, opt, c, in.images.get());
  in.prompt = std::move(rp.ids);
  in.snapshots = rp.snapshots;
  try {
    in.forced = m.format.forced_opening(c, rp.thinking);
  } catch (const UsageError& e) {
    throw ApiError(400, e.what(), "tool_choice");
  }
  in.constraint = reply_constraint(m, c, rp.thinking);
  if (call_required(m, c)) {
    // What the opening depends on, kept for the job's lifetime: the tools, the choice and the
    // earlier calls (K2 numbers the next call after them).
    Conversation calls;
    calls.tools = c.tools;
    calls.tool_choice = c.tool_choice;
    for (const ChatMessage& msg : c.messages) {
      if (msg.tool_calls.empty()) continue;
      ChatMessage& made = calls.messages.emplace_back();
      made.role = msg.role;
      made.tool_calls = msg.tool_calls;
    }
    in.call_opening_rest = [&format = m.format, calls = std::move(calls),
                            thinking = rp.thinking](std::span<const int32_t> reply) {
      return format.call_opening_rest(calls, thinking, reply);
    };
  }
  in.end_ids = m.format.end_ids();
  in.stop = p.stop;
  in.sampler = p.sampler;
  // One seed for the sampler and the call ids the parser draws, reported alike.
  in.sampler.seed = reply_seed(in.sampler.seed, opt.seed);
  in.max_new = reply_budget(opt, m.host.ctx(), in.prompt.size(), p, "messages");
  for (int i = 0; i < p.n; i++)
    job.parsers.push_back(m.format.parser(rp.thinking, *in.sampler.seed + i));
  return job;
}

Job completion_job(const ServingModel& m, const ServeOptions& opt, std::vector<int32_t> prompt,
                   const GenerationParams& p) {
  if (prompt.empty()) throw ApiError(400, "the prompt is empty", "prompt");
  Job job;
  DecodeInput& in = job.input;
  in.prompt = std::move(prompt);
  in.end_ids = m.format.end_ids();
  in.stop = p.stop;
  in.sampler = p.sampler;
  in.sampler.seed = reply_seed(in.sampler.seed, opt.seed);
  in.max_new = reply_budget(opt, m.host.ctx(), in.prompt.size(), p, "prompt");
  // A completion shows what the model wrote, special tokens included, up to an end token.
  for (int i = 0; i < p.n; i++)
    job.parsers.push_back(
        std::make_unique<TextReplyParser>(m.format.tokenizer(), in.end_ids, true));
  return job;
}

}  // namespace waste
