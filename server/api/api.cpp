#include "server/api/api.h"

#include <chrono>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/base/human_bytes.h"
#include "protocol/anthropic/messages_request.h"
#include "protocol/anthropic/messages_response.h"
#include "protocol/json/json_writer.h"
#include "protocol/openai/error.h"
#include "protocol/openai/request.h"
#include "protocol/openai/response.h"
#include "protocol/openai/responses_request.h"
#include "server/api/anthropic_sink.h"
#include "server/api/chat_job.h"
#include "server/api/metrics.h"
#include "server/api/openai_sink.h"
#include "server/api/responses_sink.h"

namespace waste {

namespace {

constexpr const char* kJson = "application/json";
// Request bodies are parsed, their images decoded and their prompts tokenized here; two threads
// keep one large request from delaying every other.
constexpr int kRequestThreads = 2;
// Engine failures in a row after which /health says "degraded".
constexpr uint64_t kDegradedAfter = 3;

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, gen(), (uint32_t)gen());
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

void send_api_error(http::ResponseWriter& w, const ApiError& e, ErrorShape shape) {
  std::map<std::string, std::string> extra;
  if (e.status == 429) extra.emplace("Retry-After", "2");
  if (e.status == 503) extra.emplace("Retry-After", "5");
  w.send(e.status, kJson,
         shape == ErrorShape::kAnthropic ? anthropic_error_body(e.status, e.message)
                                         : openai_error_body(e),
         extra);
}

ErrorShape error_shape(std::string_view path) {
  return path.starts_with("/v1/messages") ? ErrorShape::kAnthropic : ErrorShape::kOpenAi;
}

std::string api_error_body(const std::string& path, const http::Refusal& r) {
  if (error_shape(path) == ErrorShape::kAnthropic) return anthropic_error_body(r.status, r.message);
  return openai_refusal_body(r.status, r.message, r.code);
}

Api::Api(ServeOptions opt)
    : opt_(std::move(opt)),
      created_(unix_now()),
      pool_(std::make_unique<RequestPool>(kRequestThreads)) {}

Api::~Api() {
  shutdown();
  if (loader_.joinable()) loader_.join();
}

void Api::start_loading(std::function<void()> on_ready,
                        std::function<void(const std::string&)> on_failure) {
  loader_ = std::thread([this, on_ready, on_failure] {
    try {
      load();
      on_ready();
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(load_mu_);
        load_error_ = e.what();
      }
      spdlog::error("could not load the model: {}", e.what());
      on_failure(e.what());
    }
  });
}

void Api::load() {
  spdlog::info("loading {}", opt_.model.empty() ? "the built-in demo model" : opt_.model);
  model_ = std::make_unique<ServingModel>(opt_);
  ready_ = true;
  const ModelHost& h = model_->host;
  spdlog::info(
      "ready: {} ({} chat format, context {}, {} threads, budget {}, expert cache {}, prefill "
      "window {} tokens, {} parallel conversations)",
      model_->id, model_->format.family_name(), h.ctx(), h.model().threads(),
      human_bytes(h.budget().budget), human_bytes(h.budget().cache_bytes),
      h.model().options().chunk, model_->worker.slots());
}

size_t Api::shutdown(std::chrono::milliseconds grace) {
  draining_ = true;
  return ready_ ? model_->worker.drain(grace) : 0;
}

void Api::register_routes(http::Server& s) {
  auto bind = [this](void (Api::*f)(const http::Request&, Writer)) {
    return [this, f](const http::Request& r, Writer w) { (this->*f)(r, std::move(w)); };
  };
  // A POST whose body is prepared on the pool, its errors in the shape of the API `path` is in.
  auto post = [this, &s](const char* path, void (Api::*f)(const std::string&, const Writer&)) {
    const ErrorShape shape = error_shape(path);
    s.route("POST", path, [this, f, shape](const http::Request& r, Writer w) {
      prepare(
          r, w, [this, f](const std::string& body, const Writer& out) { (this->*f)(body, out); },
          shape);
    });
  };
  s.route("GET", "/health", bind(&Api::health));
  s.route("GET", "/v1/models", bind(&Api::models));
  s.route("GET", "/v1/models/", bind(&Api::model));
  // The server outlives every call of its routes.
  s.route("GET", "/metrics", [this, &s](const http::Request&, Writer w) { metrics(s.stats(), w); });
  post("/v1/chat/completions", &Api::chat);
  post("/v1/completions", &Api::completions);
  post("/v1/responses", &Api::responses);
  post("/v1/messages", &Api::messages);
  post("/v1/messages/count_tokens", &Api::count_tokens);
}

bool Api::not_ready(const Writer& w, ErrorShape shape) const {
  if (ready_) return false;
  send_api_error(*w, ApiError(503, "the model is still loading", "", "model_loading"), shape);
  return true;
}

void Api::prepare(const http::Request& r, const Writer& w, Work work, ErrorShape shape) {
  if (not_ready(w, shape)) return;
  if (draining_)
    return send_api_error(*w, ApiError(503, "the server is shutting down", "", "shutting_down"),
                          shape);
  pool_->post([w, work = std::move(work), body = r.body, shape] {
    if (w->closed()) return;  // the client left while the request waited
    try {
      work(body, w);
    } catch (const ApiError& e) {
      send_api_error(*w, e, shape);
    } catch (const std::exception& e) {
      spdlog::error("preparing a request failed: {}", e.what());
      send_api_error(*w, ApiError(500, fmt::format("internal error: {}", e.what())), shape);
    }
  });
}

void Api::submit(Job job) {
  if (!model_->worker.submit(std::move(job))) {
    if (model_->worker.stopping())
      throw ApiError(503, "the server is shutting down", "", "shutting_down");
    rejected_++;
    throw ApiError(429, "the server is busy: too many requests are waiting; retry shortly", "",
                   "queue_full");
  }
}

// 200 "ok" while requests can be served; 503 while loading, after a failed load, while shutting
// down, and "degraded" once several engine failures came in a row (a bad bank, a failing disk):
// a balancer should then send requests elsewhere.
void Api::health(const http::Request&, Writer w) {
  JsonWriter j;
  j.begin_object();
  if (!ready_) {
    std::lock_guard<std::mutex> lock(load_mu_);
    j.key("status").value(load_error_.empty() ? "loading" : "error");
    if (!load_error_.empty()) j.key("error").value(load_error_);
    w->send(503, kJson, j.end_object().str(), {{"Retry-After", "5"}});
    return;
  }
  const EngineWorker& worker = model_->worker;
  const bool degraded = worker.counters().failed_in_a_row >= kDegradedAfter;
  const char* status = draining_ ? "shutting_down" : degraded ? "degraded" : "ok";
  j.key("status").value(status).key("model").value(model_->id);
  j.key("queue_depth").value((int64_t)worker.queue_depth()).key("busy").value(worker.busy());
  j.key("slots_busy").value((int64_t)worker.busy_slots());
  j.key("slots_free").value((int64_t)(worker.slots() - worker.busy_slots()));
  if (degraded) {
    j.key("failed_in_a_row").value((int64_t)worker.counters().failed_in_a_row);
    j.key("error").value(worker.last_error());
  }
  w->send(draining_ || degraded ? 503 : 200, kJson, j.end_object().str());
}

void Api::models(const http::Request&, Writer w) {
  if (not_ready(w)) return;
  w->send(200, kJson, models_json(model_->id, created_, model_->host.ctx()));
}

// The model object for the served id or an alias, under the name asked for; 404 in OpenAI's shape
// for any other.
void Api::model(const http::Request& r, Writer w) {
  if (not_ready(w)) return;
  const std::string id = r.path.substr(std::string("/v1/models/").size());  // decoded by http
  std::string name;
  try {
    if (id.empty()) throw ApiError(404, "the model '' does not exist", "model", "model_not_found");
    name = reply_model(*model_, id);
  } catch (const ApiError& e) {
    return send_api_error(*w, e);
  }
  w->send(200, kJson, model_json(name, created_, model_->host.ctx()));
}

void Api::metrics(const http::ServerStats& http, const Writer& w) {
  w->send(200, "text/plain; version=0.0.4",
          metrics_text(ready_ ? model_.get() : nullptr, rejected_, http));
}

RequestLimits Api::limits() const {
  return {model_->host.model().config().vocab, opt_.max_tokens, opt_.max_n};
}

// The job every chat-shaped API submits, the conversation rendered (its model checked first, by
// reply_model()).
Job Api::chat_job_for(const Conversation& c, const GenerationParams& p, const char* id_prefix) {
  Job job = chat_job(*model_, opt_, c, p);
  job.id = random_id(id_prefix);
  return job;
}

// POST /v1/chat/completions
void Api::chat(const std::string& body, const Writer& w) {
  const ServingModel& m = *model_;
  ChatCompletionRequest req = parse_chat_completion(body, limits());
  const std::string model = reply_model(m, req.params.model);
  Job job = chat_job_for(req.conversation, req.params, "chatcmpl-");
  ResponseHeader header{job.id, unix_now(), model, ""};
  OpenAiSinkOptions so;
  so.stream = req.params.stream;
  so.include_usage = req.params.include_usage;
  so.legacy_functions = req.legacy_functions;
  if (req.params.sampler.logprobs >= 0) so.logprobs = &m.format.tokenizer();
  job.sink = std::make_unique<OpenAiSink>(w, header, std::move(so));
  submit(std::move(job));
}

// POST /v1/completions
void Api::completions(const std::string& body, const Writer& w) {
  const ServingModel& m = *model_;
  CompletionRequest req = parse_completion(body, limits());
  const std::string model = reply_model(m, req.params.model);
  std::vector<int32_t> prompt = std::move(req.ids);
  // A raw prompt is the client's whole input, template markers included, so specials count.
  if (req.text)
    for (int id : m.format.tokenizer().encode_markup(*req.text)) prompt.push_back(id);
  Job job = completion_job(m, opt_, prompt, req.params);
  job.id = random_id("cmpl-");
  ResponseHeader header{job.id, unix_now(), model, ""};
  OpenAiSinkOptions so;
  so.chat = false;
  so.stream = req.params.stream;
  so.include_usage = req.params.include_usage;
  if (req.params.sampler.logprobs >= 0) so.logprobs = &m.format.tokenizer();
  if (req.echo) so.echo = m.format.tokenizer().decode(prompt);
  job.input.score_prompt = req.echo && so.logprobs;
  job.sink = std::make_unique<OpenAiSink>(w, header, std::move(so));
  submit(std::move(job));
}

// POST /v1/responses
void Api::responses(const std::string& body, const Writer& w) {
  const ServingModel& m = *model_;
  ResponsesRequest req = parse_responses_request(body, limits());
  const std::string model = reply_model(m, req.params.model);
  Job job = chat_job_for(req.conversation, req.params, "resp_");
  ResponseObject header;
  header.id = job.id;
  header.created_at = unix_now();
  header.model = model;
  header.instructions = req.instructions;
  header.echo = std::move(req.echo);
  job.sink = std::make_unique<ResponsesSink>(w, std::move(header), req.params.stream);
  submit(std::move(job));
}

// POST /v1/messages (Anthropic)
void Api::messages(const std::string& body, const Writer& w) {
  const ServingModel& m = *model_;
  MessagesRequest req = parse_messages_request(body, limits());
  const std::string model = reply_model(m, req.params.model);
  Job job = chat_job_for(req.conversation, req.params, "msg_");
  AnthropicSinkOptions so;
  so.stream = req.params.stream;
  so.prompt_tokens = (int64_t)job.input.prompt.size();
  so.omit_thinking = req.omit_thinking;
  job.sink = std::make_unique<AnthropicSink>(w, AnthropicHeader{job.id, model}, so);
  submit(std::move(job));
}

// POST /v1/messages/count_tokens (Anthropic)
void Api::count_tokens(const std::string& body, const Writer& w) {
  const ServingModel& m = *model_;
  MessagesRequest req = parse_count_tokens_request(body);
  reply_model(m, req.params.model);  // a name not served is a 404 here too
  w->send(200, kJson, count_tokens_json(prompt_tokens(m, opt_, req.conversation)));
}

}  // namespace waste
