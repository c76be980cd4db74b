#include "protocol/generation_params.h"

#include <cmath>

#include <fmt/format.h>
#include <simdjson.h>

#include "protocol/api_error.h"

namespace waste {

namespace {

using simdjson::dom::element;

[[noreturn]] void bad(const std::string& param, const std::string& what) {
  throw ApiError(400, fmt::format("'{}': {}", param, what), param);
}

element parse_body(simdjson::dom::parser& p, const simdjson::padded_string& s) {
  element root;
  if (auto err = p.parse(s).get(root))
    throw ApiError(400,
                   fmt::format("the body is not valid JSON ({})", simdjson::error_message(err)));
  if (!root.is_object()) throw ApiError(400, "the body must be a JSON object");
  return root;
}

std::optional<element> field(const element& root, const char* key) {
  element e;
  if (root[key].get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

double number(const element& root, const char* key, double def, double lo, double hi) {
  auto e = field(root, key);
  if (!e) return def;
  double v;
  if (e->is_int64())
    v = (double)int64_t(e->get_int64());
  else if (e->is_uint64())
    v = (double)uint64_t(e->get_uint64());
  else if (e->is_double())
    v = double(e->get_double());
  else
    bad(key, "must be a number");
  if (!(v >= lo && v <= hi)) bad(key, fmt::format("{} is out of range ({} to {})", v, lo, hi));
  return v;
}

std::optional<int64_t> integer(const element& root, const char* key, int64_t lo, int64_t hi) {
  auto e = field(root, key);
  if (!e) return std::nullopt;
  if (!e->is_int64()) bad(key, "must be an integer");
  int64_t v = int64_t(e->get_int64());
  if (v < lo || v > hi) bad(key, fmt::format("{} is out of range ({} to {})", v, lo, hi));
  return v;
}

bool boolean(const element& root, const char* key, bool def) {
  auto e = field(root, key);
  if (!e) return def;
  if (!e->is_bool()) bad(key, "must be true or false");
  return bool(e->get_bool());
}

std::vector<std::string> stops(const element& root) {
  auto e = field(root, "stop");
  if (!e) return {};
  std::vector<std::string> out;
  if (e->is_string()) {
    out.emplace_back(std::string_view(e->get_string()));
  } else if (e->is_array()) {
    simdjson::dom::array a = e->get_array();
    for (element s : a) {
      if (!s.is_string()) bad("stop", "must be a string or a list of strings");
      out.emplace_back(std::string_view(s.get_string()));
    }
  } else {
    bad("stop", "must be a string or a list of strings");
  }
  if (out.size() > 4) bad("stop", "at most 4 stop sequences");
  for (const std::string& s : out)
    if (s.empty()) bad("stop", "stop sequences must not be empty");
  return out;
}

std::vector<std::pair<int, float>> logit_bias(const element& root, int vocab) {
  auto e = field(root, "logit_bias");
  if (!e) return {};
  if (!e->is_object()) bad("logit_bias", "must be an object of token id to bias");
  std::vector<std::pair<int, float>> out;
  simdjson::dom::object o = e->get_object();
  for (auto [k, v] : o) {
    std::string key(k);
    size_t used = 0;
    long id = -1;
    try {
      id = std::stol(key, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != key.size() || id < 0 || id >= vocab)
      bad("logit_bias", fmt::format("'{}' is not a token id of this model", key));
    if (!v.is_number()) bad("logit_bias", fmt::format("the bias of {} must be a number", key));
    double b = v.is_double() ? double(v.get_double()) : (double)int64_t(v.get_int64());
    if (!(b >= -100 && b <= 100)) bad("logit_bias", "biases must lie between -100 and 100");
    out.push_back({(int)id, (float)b});
  }
  return out;
}

}  // namespace

GenerationParams parse_generation_params(std::string_view body, const LimitsForParams& limits) {
  simdjson::dom::parser p;
  simdjson::padded_string s(body);
  element root = parse_body(p, s);
  GenerationParams g;
  if (auto m = field(root, "model")) {
    if (!m->is_string()) bad("model", "must be a string");
    g.model = std::string(std::string_view(m->get_string()));
  }
  SamplerParams& sp = g.sampler;
  sp.temperature = (float)number(root, "temperature", 1.0, 0, 2);
  sp.top_p = (float)number(root, "top_p", 1.0, 0, 1);
  if (!(sp.top_p > 0)) bad("top_p", "must be greater than 0");
  sp.top_k = (int)integer(root, "top_k", 0, 1 << 24).value_or(0);
  sp.min_p = (float)number(root, "min_p", 0.0, 0, 1);
  sp.presence_penalty = (float)number(root, "presence_penalty", 0, -2, 2);
  sp.frequency_penalty = (float)number(root, "frequency_penalty", 0, -2, 2);
  sp.repetition_penalty = (float)number(root, "repetition_penalty", 1, 0.01, 100);
  if (auto seed = integer(root, "seed", INT64_MIN, INT64_MAX)) sp.seed = (uint64_t)*seed;
  sp.logit_bias = logit_bias(root, limits.vocab);
  int64_t cap = limits.max_tokens_cap > 0 ? limits.max_tokens_cap : INT64_MAX;
  g.max_tokens = integer(root, "max_completion_tokens", 1, cap);
  if (!g.max_tokens) g.max_tokens = integer(root, "max_tokens", 1, cap);
  if (auto n = integer(root, "n", INT64_MIN, INT64_MAX); n && *n != 1)
    bad("n", "only n = 1 is supported");
  g.stop = stops(root);
  g.stream = boolean(root, "stream", false);
  if (auto so = field(root, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    g.include_usage = boolean(*so, "include_usage", false);
  }
  g.parallel_tool_calls = boolean(root, "parallel_tool_calls", true);
  g.logprobs = boolean(root, "logprobs", false);
  if (g.logprobs) bad("logprobs", "log probabilities are not supported");
  return g;
}

CompletionPrompt parse_completion_prompt(std::string_view body, int vocab) {
  simdjson::dom::parser p;
  simdjson::padded_string s(body);
  element root = parse_body(p, s);
  auto e = field(root, "prompt");
  if (!e) bad("prompt", "is required");
  CompletionPrompt out;
  if (e->is_string()) {
    out.text = std::string(std::string_view(e->get_string()));
    return out;
  }
  if (!e->is_array())
    bad("prompt", "must be a string, a list of one string, or a list of token ids");
  simdjson::dom::array a = e->get_array();
  if (a.size() == 1 && a.at(0).is_string()) {
    out.text = std::string(std::string_view(a.at(0).get_string()));
    return out;
  }
  for (element id : a) {
    if (!id.is_int64()) bad("prompt", "a list prompt must hold token ids (one prompt per request)");
    int64_t v = int64_t(id.get_int64());
    if (v < 0 || v >= vocab) bad("prompt", fmt::format("token id {} is out of range", v));
    out.ids.push_back((int32_t)v);
  }
  if (out.ids.empty()) bad("prompt", "must not be empty");
  return out;
}

}  // namespace waste
