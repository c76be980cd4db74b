// Encodes replies in the Responses API's wire format: the response object and the typed stream
// events, each with its `type` and `sequence_number`. Field names follow the official SDK's types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace waste {

struct OutputItem {
  enum class Kind { kReasoning, kMessage, kFunctionCall };
  Kind kind = Kind::kMessage;
  std::string id;                        // rs_..., msg_..., fc_...
  std::string text;                      // kReasoning: the think channel; kMessage: the output_text
  std::string call_id, name, arguments;  // kFunctionCall
  bool done = false;                     // status "completed", else "in_progress"
  bool cut = false;                      // done by the reply's cut: status "incomplete"
};

// The request's settings the response object repeats, each as JSON text: what the request sent
// (as it sent it), or what OpenAI answers when it sent nothing.
struct ResponseEcho {
  std::string tools = "[]";
  std::string tool_choice = "\"auto\"";
  std::string parallel_tool_calls = "true";
  std::string metadata = "{}";
  std::string temperature = "1";
  std::string top_p = "1";
  std::string max_output_tokens = "null";
  std::string top_logprobs = "0";
  std::string text = R"({"format":{"type":"text"}})";
  std::string reasoning = R"({"effort":null,"summary":null})";
  std::string truncation = "\"disabled\"";
  std::string store = "false";  // OpenAI's default is true; this server keeps nothing
  std::string user = "null";
  std::string prompt_cache_key = "null";
  std::string safety_identifier = "null";
};

struct ResponseObject {
  std::string id;  // resp_...
  int64_t created_at = 0;
  std::string model;
  std::string status = "in_progress";  // completed, incomplete, failed
  std::string incomplete_reason;       // "max_output_tokens" when incomplete
  std::optional<std::string> error;    // failed: the message
  std::string instructions;
  ResponseEcho echo;
  std::vector<OutputItem> output;
  bool usage = false;  // write usage (once the reply is over)
  int64_t input_tokens = 0, cached_tokens = 0, output_tokens = 0, reasoning_tokens = 0;
};

std::string response_json(const ResponseObject& r);

// One stream event's JSON. Events that carry the response (response.created, .in_progress,
// .completed, .incomplete, .failed) use response_event; the rest name an output item.
std::string response_event(const char* type, int64_t seq, const ResponseObject& r);
std::string item_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item);
// The item's content part or reasoning summary part (added/done), with its text so far.
std::string part_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item);
// A text delta or done: output_text, function_call_arguments or reasoning_summary_text.
std::string text_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item,
                       const std::string& key, const std::string& text);
std::string error_event(int64_t seq, const std::string& message, const std::string& code);

}  // namespace waste
