#include "protocol/openai/response.h"

#include "protocol/json/json_writer.h"

namespace waste {

namespace {

void header(JsonWriter& w, const ResponseHeader& h, const char* object) {
  w.key("id").value(h.id).key("object").value(object);
  w.key("created").value(h.created).key("model").value(h.model);
  if (!h.system_fingerprint.empty()) w.key("system_fingerprint").value(h.system_fingerprint);
}

void usage(JsonWriter& w, const Usage& u) {
  w.key("usage").begin_object();
  w.key("prompt_tokens").value(u.prompt_tokens);
  w.key("completion_tokens").value(u.completion_tokens);
  w.key("total_tokens").value(u.prompt_tokens + u.completion_tokens);
  w.key("prompt_tokens_details").begin_object().key("cached_tokens").value(u.cached_tokens);
  w.end_object().end_object();
}

void tool_calls(JsonWriter& w, const std::vector<ToolCallOut>& calls) {
  w.key("tool_calls").begin_array();
  for (const ToolCallOut& c : calls) {
    w.begin_object().key("id").value(c.id).key("type").value("function");
    w.key("function").begin_object().key("name").value(c.name);
    w.key("arguments").value(c.arguments).end_object().end_object();
  }
  w.end_array();
}

}  // namespace

std::string chat_completion_json(const ResponseHeader& h, const ChatMessageOut& m,
                                 const std::string& finish_reason, const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "chat.completion");
  w.key("choices").begin_array().begin_object().key("index").value(0);
  w.key("message").begin_object().key("role").value("assistant");
  if (m.content.empty() && !m.tool_calls.empty())
    w.key("content").null();
  else
    w.key("content").value(m.content);
  if (!m.reasoning.empty()) w.key("reasoning_content").value(m.reasoning);
  if (!m.tool_calls.empty() && m.legacy_function_call) {
    w.key("function_call").begin_object().key("name").value(m.tool_calls[0].name);
    w.key("arguments").value(m.tool_calls[0].arguments).end_object();
  } else if (!m.tool_calls.empty()) {
    tool_calls(w, m.tool_calls);
  }
  w.end_object();
  w.key("logprobs").null().key("finish_reason").value(finish_reason);
  w.end_object().end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string chat_chunk_json(const ResponseHeader& h, const ChatDelta& d) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "chat.completion.chunk");
  w.key("choices").begin_array().begin_object().key("index").value(0);
  w.key("delta").begin_object();
  if (d.role) w.key("role").value("assistant").key("content").value("");
  if (d.content) w.key("content").value(*d.content);
  if (d.reasoning) w.key("reasoning_content").value(*d.reasoning);
  if (d.tool && d.legacy_function_call) {
    w.key("function_call").begin_object();
    if (d.tool->name) w.key("name").value(*d.tool->name);
    w.key("arguments").value(d.tool->arguments).end_object();
  } else if (d.tool) {
    w.key("tool_calls").begin_array().begin_object().key("index").value(d.tool->index);
    if (d.tool->id) w.key("id").value(*d.tool->id).key("type").value("function");
    w.key("function").begin_object();
    if (d.tool->name) w.key("name").value(*d.tool->name);
    w.key("arguments").value(d.tool->arguments).end_object();
    w.end_object().end_array();
  }
  w.end_object();
  w.key("logprobs").null();
  if (d.finish_reason)
    w.key("finish_reason").value(*d.finish_reason);
  else
    w.key("finish_reason").null();
  w.end_object().end_array();
  return w.end_object().str();
}

std::string chat_usage_chunk_json(const ResponseHeader& h, const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "chat.completion.chunk");
  w.key("choices").begin_array().end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string completion_json(const ResponseHeader& h, const std::string& text,
                            const std::string& finish_reason, const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "text_completion");
  w.key("choices").begin_array().begin_object().key("index").value(0).key("text").value(text);
  w.key("logprobs").null().key("finish_reason").value(finish_reason).end_object().end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string completion_chunk_json(const ResponseHeader& h, const std::string& text,
                                  const std::optional<std::string>& finish_reason) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "text_completion");
  w.key("choices").begin_array().begin_object().key("index").value(0).key("text").value(text);
  w.key("logprobs").null();
  if (finish_reason)
    w.key("finish_reason").value(*finish_reason);
  else
    w.key("finish_reason").null();
  w.end_object().end_array();
  return w.end_object().str();
}

std::string completion_usage_chunk_json(const ResponseHeader& h, const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "text_completion");
  w.key("choices").begin_array().end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string models_json(const std::string& id, int64_t created, int64_t context_length) {
  JsonWriter w;
  w.begin_object().key("object").value("list").key("data").begin_array();
  w.begin_object().key("id").value(id).key("object").value("model").key("created").value(created);
  w.key("owned_by").value("waste").key("context_length").value(context_length);
  w.key("max_model_len").value(context_length);
  w.end_object().end_array();
  return w.end_object().str();
}

}  // namespace waste
