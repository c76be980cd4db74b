#include "protocol/openai/response.h"

#include <fmt/format.h>
#include <simdjson.h>

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

std::string token_text(const std::string& bytes) {
  if (simdjson::validate_utf8(bytes.data(), bytes.size())) return bytes;
  std::string out = "bytes:";
  for (unsigned char b : bytes) out += fmt::format("\\x{:02x}", b);
  return out;
}

void token_entry(JsonWriter& w, const std::string& bytes, double logprob) {
  w.key("token").value(token_text(bytes)).key("logprob").value(logprob);
  w.key("bytes").begin_array();
  for (unsigned char b : bytes) w.value((int64_t)b);
  w.end_array();
}

// Chat's shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}.
void chat_logprobs(JsonWriter& w, const std::optional<std::vector<TokenLogprobOut>>& lp) {
  w.key("logprobs");
  if (!lp) {
    w.null();
    return;
  }
  w.begin_object().key("content").begin_array();
  for (const TokenLogprobOut& t : *lp) {
    w.begin_object();
    token_entry(w, t.bytes, t.logprob.value_or(0));
    w.key("top_logprobs").begin_array();
    for (const auto& [bytes, logprob] : t.top) {
      w.begin_object();
      token_entry(w, bytes, logprob);
      w.end_object();
    }
    w.end_array().end_object();
  }
  w.end_array().key("refusal").null().end_object();
}

int64_t code_points(const std::string& bytes) {
  int64_t n = 0;
  for (unsigned char b : bytes) n += (b & 0xC0) != 0x80;
  return n;
}

// The legacy shape: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
void legacy_logprobs(JsonWriter& w, const std::optional<std::vector<TokenLogprobOut>>& lp,
                     int64_t offset) {
  w.key("logprobs");
  if (!lp) {
    w.null();
    return;
  }
  w.begin_object().key("tokens").begin_array();
  for (const TokenLogprobOut& t : *lp) w.value(token_text(t.bytes));
  w.end_array().key("token_logprobs").begin_array();
  for (const TokenLogprobOut& t : *lp) t.logprob ? w.value(*t.logprob) : w.null();
  w.end_array().key("top_logprobs").begin_array();
  for (const TokenLogprobOut& t : *lp) {
    if (!t.logprob) {
      w.null();
      continue;
    }
    w.begin_object();
    for (const auto& [bytes, logprob] : t.top) w.key(token_text(bytes)).value(logprob);
    w.end_object();
  }
  w.end_array().key("text_offset").begin_array();
  for (const TokenLogprobOut& t : *lp) {
    w.value(offset);
    offset += code_points(t.bytes);
  }
  w.end_array().end_object();
}

void message(JsonWriter& w, const ChatMessageOut& m) {
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
}

}  // namespace

std::string chat_completion_json(const ResponseHeader& h, std::span<const ChatChoiceOut> choices,
                                 const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "chat.completion");
  w.key("choices").begin_array();
  for (size_t i = 0; i < choices.size(); i++) {
    w.begin_object().key("index").value((int64_t)i);
    message(w, choices[i].message);
    chat_logprobs(w, choices[i].logprobs);
    w.key("finish_reason").value(choices[i].finish_reason).end_object();
  }
  w.end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string chat_chunk_json(const ResponseHeader& h, const ChatDelta& d) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "chat.completion.chunk");
  w.key("choices").begin_array().begin_object().key("index").value(d.index);
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
  chat_logprobs(w, d.logprobs);
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

std::string completion_json(const ResponseHeader& h, std::span<const CompletionChoiceOut> choices,
                            const Usage& u) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "text_completion");
  w.key("choices").begin_array();
  for (size_t i = 0; i < choices.size(); i++) {
    const CompletionChoiceOut& c = choices[i];
    w.begin_object().key("index").value((int64_t)i).key("text").value(c.text);
    legacy_logprobs(w, c.logprobs, c.text_offset);
    w.key("finish_reason").value(c.finish_reason).end_object();
  }
  w.end_array();
  usage(w, u);
  return w.end_object().str();
}

std::string completion_chunk_json(const ResponseHeader& h, int index,
                                  const CompletionChoiceOut& c) {
  JsonWriter w;
  w.begin_object();
  header(w, h, "text_completion");
  w.key("choices").begin_array().begin_object().key("index").value(index).key("text").value(c.text);
  legacy_logprobs(w, c.logprobs, c.text_offset);
  if (!c.finish_reason.empty())
    w.key("finish_reason").value(c.finish_reason);
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

void model_object(JsonWriter& w, const std::string& id, int64_t created, int64_t context_length) {
  w.begin_object().key("id").value(id).key("object").value("model").key("created").value(created);
  w.key("owned_by").value("waste").key("context_length").value(context_length);
  w.key("max_model_len").value(context_length);
  w.end_object();
}

std::string models_json(const std::string& id, int64_t created, int64_t context_length) {
  JsonWriter w;
  w.begin_object().key("object").value("list").key("data").begin_array();
  model_object(w, id, created, context_length);
  w.end_array();
  return w.end_object().str();
}

std::string model_json(const std::string& id, int64_t created, int64_t context_length) {
  JsonWriter w;
  model_object(w, id, created, context_length);
  return w.str();
}

}  // namespace waste
