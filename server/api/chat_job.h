// The edge where every API's request becomes the one kind of generation job. A parsed
// Conversation (chat completions, the Messages API, later the Responses API) is rendered in the
// model's family with its images decoded and placed, its forced tool-call opening and reply
// grammar compiled, and its reply budget checked against the context; a raw prompt
// (/v1/completions) only the last. Every refusal is an ApiError naming the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/conversation.h"
#include "protocol/generation_params.h"
#include "server/api/serving_model.h"
#include "server/runtime/engine_worker.h"

namespace waste {

// The job for a chat reply to `c`; its sink is the caller's to set.
Job chat_job(const ServingModel& m, const ServeOptions& opt, const Conversation& c,
             const GenerationParams& p);

// The job for a continuation of `prompt` (token ids), its reply plain text.
Job completion_job(const ServingModel& m, const ServeOptions& opt, std::vector<int32_t> prompt,
                   const GenerationParams& p);

// The model name a reply to a request for `model` carries: the name the client sent when it is
// the served model's id or one of its aliases (any name, with the alias "*"), the served id when
// it sent none; a 404 for any other name.
std::string reply_model(const ServingModel& m, const std::string& model);

// The prompt's length as chat_job() would render it (images included), for count_tokens.
int64_t prompt_tokens(const ServingModel& m, const ServeOptions& opt, const Conversation& c);

}  // namespace waste
