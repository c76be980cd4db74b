// Fuzzes the chat body parser and what a family does with what it accepts: rendering in each
// family and compiling the K3 reply grammar (tools' schemas, forced calls, response_format).
// Input is refused (ApiError, UsageError, SchemaError) or handled, never a crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/base/error.h"
#include "prompt_templates/kimi_k2/k2_template.h"
#include "prompt_templates/raw_template.h"
#include "protocol/api_error.h"
#include "protocol/openai/request.h"
#include "tests/fuzz/k3_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  waste::Conversation c;
  try {
    c = waste::parse_chat_completion(std::string_view((const char*)data, size), {1000, 0})
            .conversation;
  } catch (const waste::ApiError&) {
    return 0;
  }
  const bool thinking = size % 2 == 1;  // one of each per input keeps the runs fast
  waste::fuzz::exercise_k3(c, thinking);
  try {
    waste::render_k2(c);
  } catch (const waste::UsageError&) {
  }
  try {
    waste::render_raw(c);
  } catch (const waste::UsageError&) {
  }
  return 0;
}
