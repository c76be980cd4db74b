// The body of POST /v1/responses (OpenAI's Responses API), parsed into the same Conversation and
// GenerationParams as chat completions. Stateless: `store` is accepted and nothing is kept, so a
// `previous_response_id` is refused (send the whole input). Every bad field is an ApiError (400)
// naming its path ("input[2].content[0].type"), answered in OpenAI's error shape.
//
// Translation: `instructions` becomes the first system message; `input` is a string (one user
// message) or items: messages (input_text, input_image and, for history, output_text parts),
// function_call items (the assistant's calls, consecutive ones one turn), function_call_output
// items (tool results) and reasoning items (the next assistant turn's reasoning); tools are
// declared to the model in chat's nested function shape; text.format is response_format.
#pragma once

#include <string>
#include <string_view>

#include "protocol/conversation.h"
#include "protocol/generation_params.h"
#include "protocol/openai/responses_response.h"

namespace waste {

struct ResponsesRequest {
  Conversation conversation;
  GenerationParams params;
  std::string instructions;  // echoed in the response object
  ResponseEcho echo;         // the settings the response object repeats
};

ResponsesRequest parse_responses_request(std::string_view body, const RequestLimits& limits);

}  // namespace waste
