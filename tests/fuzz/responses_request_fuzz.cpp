// Fuzzes the Responses API body parser (protocol/openai/responses_request.h) and what K3 does with
// what it accepts: rendering and compiling the reply grammar (tools' parameters, tool_choice
// required or named, text.format). Input is refused (ApiError, UsageError, SchemaError) or handled,
// never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/base/error.h"
#include "protocol/api_error.h"
#include "protocol/openai/responses_request.h"
#include "tests/fuzz/k3_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  waste::Conversation c;
  const std::string_view body((const char*)data, size);
  try {
    c = waste::parse_responses_request(body, {1000, 0, 8}).conversation;
  } catch (const waste::ApiError&) {
    return 0;
  }
  const bool thinking = c.thinking.value_or(size % 2 == 1);
  waste::fuzz::exercise_k3(c, thinking);
  return 0;
}
