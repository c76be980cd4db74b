#include "protocol/openai/responses_response.h"

#include "protocol/json/json_writer.h"

namespace waste {

namespace {

// A message's output_text part, or a reasoning item's summary_text part.
void part(JsonWriter& w, const OutputItem& item) {
  if (item.kind == OutputItem::Kind::kReasoning) {
    w.begin_object().key("type").value("summary_text").key("text").value(item.text).end_object();
    return;
  }
  w.begin_object().key("type").value("output_text").key("text").value(item.text);
  w.key("annotations").begin_array().end_array().end_object();
}

void item_json(JsonWriter& w, const OutputItem& item) {
  w.begin_object().key("id").value(item.id);
  switch (item.kind) {
    case OutputItem::Kind::kReasoning:
      w.key("type").value("reasoning").key("summary").begin_array();
      if (!item.text.empty() || item.done) part(w, item);
      w.end_array();
      break;
    case OutputItem::Kind::kMessage:
      w.key("type").value("message").key("role").value("assistant").key("content").begin_array();
      if (item.done) part(w, item);
      w.end_array();
      break;
    case OutputItem::Kind::kFunctionCall:
      w.key("type").value("function_call").key("call_id").value(item.call_id);
      w.key("name").value(item.name).key("arguments").value(item.arguments);
      break;
  }
  w.key("status").value(item.cut ? "incomplete" : item.done ? "completed" : "in_progress");
  w.end_object();
}

void usage(JsonWriter& w, const ResponseObject& r) {
  w.key("usage").begin_object().key("input_tokens").value(r.input_tokens);
  w.key("input_tokens_details").begin_object().key("cached_tokens").value(r.cached_tokens);
  w.end_object().key("output_tokens").value(r.output_tokens);
  w.key("output_tokens_details").begin_object().key("reasoning_tokens").value(r.reasoning_tokens);
  w.end_object().key("total_tokens").value(r.input_tokens + r.output_tokens).end_object();
}

// The request's settings, as ResponseEcho holds them.
void echo(JsonWriter& w, const ResponseEcho& e) {
  w.key("parallel_tool_calls").raw(e.parallel_tool_calls).key("previous_response_id").null();
  w.key("store").raw(e.store).key("tools").raw(e.tools).key("tool_choice").raw(e.tool_choice);
  w.key("truncation").raw(e.truncation).key("metadata").raw(e.metadata);
  w.key("temperature").raw(e.temperature).key("top_p").raw(e.top_p);
  w.key("max_output_tokens").raw(e.max_output_tokens);
  w.key("top_logprobs").raw(e.top_logprobs).key("text").raw(e.text);
  w.key("reasoning").raw(e.reasoning).key("user").raw(e.user);
  w.key("prompt_cache_key").raw(e.prompt_cache_key);
  w.key("safety_identifier").raw(e.safety_identifier);
}

void response(JsonWriter& w, const ResponseObject& r) {
  w.begin_object().key("id").value(r.id).key("object").value("response");
  w.key("created_at").value(r.created_at).key("status").value(r.status);
  w.key("error");
  if (r.error)
    w.begin_object().key("code").value("server_error").key("message").value(*r.error).end_object();
  else
    w.null();
  w.key("incomplete_details");
  if (r.incomplete_reason.empty())
    w.null();
  else
    w.begin_object().key("reason").value(r.incomplete_reason).end_object();
  w.key("instructions");
  r.instructions.empty() ? w.null() : w.value(r.instructions);
  w.key("model").value(r.model).key("output").begin_array();
  for (const OutputItem& item : r.output) item_json(w, item);
  w.end_array();
  echo(w, r.echo);
  if (r.usage)
    usage(w, r);
  else
    w.key("usage").null();
  w.end_object();
}

JsonWriter& event_head(JsonWriter& w, const char* type, int64_t seq) {
  return w.begin_object().key("type").value(type).key("sequence_number").value(seq);
}

}  // namespace

std::string response_json(const ResponseObject& r) {
  JsonWriter w;
  response(w, r);
  return w.str();
}

std::string response_event(const char* type, int64_t seq, const ResponseObject& r) {
  JsonWriter w;
  event_head(w, type, seq).key("response");
  response(w, r);
  return w.end_object().str();
}

std::string item_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item) {
  JsonWriter w;
  event_head(w, type, seq).key("output_index").value((int64_t)output_index).key("item");
  item_json(w, item);
  return w.end_object().str();
}

std::string part_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item) {
  JsonWriter w;
  event_head(w, type, seq).key("item_id").value(item.id);
  w.key("output_index").value((int64_t)output_index);
  w.key(item.kind == OutputItem::Kind::kReasoning ? "summary_index" : "content_index").value(0);
  w.key("part");
  part(w, item);
  return w.end_object().str();
}

std::string text_event(const char* type, int64_t seq, size_t output_index, const OutputItem& item,
                       const std::string& key, const std::string& text) {
  JsonWriter w;
  event_head(w, type, seq).key("item_id").value(item.id);
  w.key("output_index").value((int64_t)output_index);
  if (item.kind == OutputItem::Kind::kMessage) w.key("content_index").value(0);
  if (item.kind == OutputItem::Kind::kReasoning) w.key("summary_index").value(0);
  w.key(key).value(text);
  return w.end_object().str();
}

std::string error_event(int64_t seq, const std::string& message, const std::string& code) {
  JsonWriter w;
  event_head(w, "error", seq).key("code").value(code).key("message").value(message);
  return w.key("param").null().end_object().str();
}

}  // namespace waste
