#include "protocol/anthropic/messages_response.h"

#include "protocol/json/json_writer.h"

namespace waste {

namespace {

const char* block_type(ContentBlockOut::Kind k) {
  switch (k) {
    case ContentBlockOut::Kind::kThinking:
      return "thinking";
    case ContentBlockOut::Kind::kText:
      return "text";
    case ContentBlockOut::Kind::kToolUse:
      return "tool_use";
  }
  return "text";
}

// `input` is the parser's JSON object text, written as JSON.
void block(JsonWriter& w, const ContentBlockOut& b) {
  w.begin_object().key("type").value(block_type(b.kind));
  switch (b.kind) {
    case ContentBlockOut::Kind::kThinking:
      w.key("thinking").value(b.text).key("signature").value("");
      break;
    case ContentBlockOut::Kind::kText:
      w.key("text").value(b.text);
      break;
    case ContentBlockOut::Kind::kToolUse:
      w.key("id").value(b.id).key("name").value(b.name).key("input").raw(b.input_json);
      break;
  }
  w.end_object();
}

void usage(JsonWriter& w, const AnthropicUsage& u) {
  w.key("usage").begin_object();
  w.key("input_tokens").value(u.input_tokens);
  w.key("cache_creation_input_tokens").value(0);
  w.key("cache_read_input_tokens").value(u.cache_read_input_tokens);
  w.key("output_tokens").value(u.output_tokens).end_object();
}

void stop(JsonWriter& w, const StopOut& s) {
  s.reason.empty() ? w.key("stop_reason").null() : w.key("stop_reason").value(s.reason);
  s.sequence ? w.key("stop_sequence").value(*s.sequence) : w.key("stop_sequence").null();
}

void message(JsonWriter& w, const AnthropicHeader& h, const std::vector<ContentBlockOut>& blocks,
             const StopOut& s, const AnthropicUsage& u) {
  w.begin_object().key("id").value(h.id).key("type").value("message");
  w.key("role").value("assistant").key("model").value(h.model);
  w.key("content").begin_array();
  for (const ContentBlockOut& b : blocks) block(w, b);
  w.end_array();
  stop(w, s);
  usage(w, u);
  w.end_object();
}

std::string typed(const char* type) {
  JsonWriter w;
  return w.begin_object().key("type").value(type).end_object().str();
}

}  // namespace

std::string anthropic_message_json(const AnthropicHeader& h,
                                   const std::vector<ContentBlockOut>& blocks, const StopOut& stop,
                                   const AnthropicUsage& u) {
  JsonWriter w;
  message(w, h, blocks, stop, u);
  return w.str();
}

std::string message_start_json(const AnthropicHeader& h, const AnthropicUsage& u) {
  JsonWriter w;
  w.begin_object().key("type").value("message_start").key("message");
  message(w, h, {}, StopOut{}, u);
  return w.end_object().str();
}

std::string block_start_json(size_t index, const ContentBlockOut& b) {
  ContentBlockOut empty = b;
  empty.text.clear();
  empty.input_json = "{}";
  JsonWriter w;
  w.begin_object().key("type").value("content_block_start").key("index").value((int64_t)index);
  w.key("content_block");
  block(w, empty);
  return w.end_object().str();
}

std::string block_delta_json(size_t index, ContentBlockOut::Kind kind, const std::string& text) {
  JsonWriter w;
  w.begin_object().key("type").value("content_block_delta").key("index").value((int64_t)index);
  w.key("delta").begin_object();
  switch (kind) {
    case ContentBlockOut::Kind::kThinking:
      w.key("type").value("thinking_delta").key("thinking").value(text);
      break;
    case ContentBlockOut::Kind::kText:
      w.key("type").value("text_delta").key("text").value(text);
      break;
    case ContentBlockOut::Kind::kToolUse:
      w.key("type").value("input_json_delta").key("partial_json").value(text);
      break;
  }
  return w.end_object().end_object().str();
}

std::string block_stop_json(size_t index) {
  JsonWriter w;
  w.begin_object().key("type").value("content_block_stop").key("index").value((int64_t)index);
  return w.end_object().str();
}

std::string message_delta_json(const StopOut& s, const AnthropicUsage& u) {
  JsonWriter w;
  w.begin_object().key("type").value("message_delta").key("delta").begin_object();
  stop(w, s);
  w.end_object();
  usage(w, u);
  return w.end_object().str();
}

std::string message_stop_json() {
  return typed("message_stop");
}

std::string ping_json() {
  return typed("ping");
}

std::string count_tokens_json(int64_t input_tokens) {
  JsonWriter w;
  return w.begin_object().key("input_tokens").value(input_tokens).end_object().str();
}

std::string anthropic_error_body(int status, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 403 ? "permission_error"
                     : status == 404 ? "not_found_error"
                     : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error"
                     : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error"
                                     : "invalid_request_error";
  JsonWriter w;
  w.begin_object().key("type").value("error").key("error").begin_object();
  w.key("type").value(type).key("message").value(message);
  return w.end_object().end_object().str();
}

}  // namespace waste
