// The daemon's routes and the state behind them: the model loads in the background (GET /health
// answers 503 until it is ready), request bodies are turned into jobs on the request pool (never
// on an HTTP thread), and one engine worker serves the queue. /health, /v1/models and /metrics
// always answer at once.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "config/serve_options.h"
#include "protocol/api_error.h"
#include "protocol/conversation.h"
#include "protocol/generation_params.h"
#include "server/api/request_pool.h"
#include "server/api/serving_model.h"
#include "server/http/http.h"

namespace waste {

// Whose error body a route answers with.
enum class ErrorShape { kOpenAi, kAnthropic };
// The shape for `path`, the one place it is chosen: the Messages API's paths answer in
// Anthropic's, every other in OpenAI's.
ErrorShape error_shape(std::string_view path);

class Api {
 public:
  explicit Api(ServeOptions opt);
  ~Api();

  void register_routes(http::Server& server);
  // Loads the model on a background thread; `on_ready` or `on_failure` runs there after.
  void start_loading(std::function<void()> on_ready,
                     std::function<void(const std::string&)> on_failure);
  // Refuses new work (503) and answers queued requests 503; the running replies may finish within
  // `grace`, else they are cut (each ends with a 503 error). Returns how many were cut.
  size_t shutdown(std::chrono::milliseconds grace = std::chrono::milliseconds(0));
  bool ready() const { return ready_; }

 private:
  using Writer = std::shared_ptr<http::ResponseWriter>;
  using Work = std::function<void(const std::string& body, const Writer& w)>;

  void load();
  bool not_ready(const Writer& w, ErrorShape shape = ErrorShape::kOpenAi) const;
  // Runs `work` on the request pool; an ApiError it throws is the answer, in `shape`.
  void prepare(const http::Request& r, const Writer& w, Work work, ErrorShape shape);
  void submit(Job job);
  RequestLimits limits() const;
  Job chat_job_for(const Conversation& c, const GenerationParams& p, const char* id_prefix);

  void health(const http::Request& r, Writer w);
  void models(const http::Request& r, Writer w);
  void model(const http::Request& r, Writer w);  // GET /v1/models/{id}
  void metrics(const http::ServerStats& http, const Writer& w);
  void chat(const std::string& body, const Writer& w);
  void completions(const std::string& body, const Writer& w);
  void responses(const std::string& body, const Writer& w);
  void messages(const std::string& body, const Writer& w);
  void count_tokens(const std::string& body, const Writer& w);

  ServeOptions opt_;
  int64_t created_ = 0;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::string load_error_;
  mutable std::mutex load_mu_;
  std::unique_ptr<ServingModel> model_;  // set once, before ready_
  std::atomic<uint64_t> rejected_{0};
  // Declared after model_: destroyed first, so no task outlives the model it uses.
  std::unique_ptr<RequestPool> pool_;
  std::thread loader_;
};

// Answers `e` in the API's error shape (a 429 or 503 says when to come back).
void send_api_error(http::ResponseWriter& w, const ApiError& e,
                    ErrorShape shape = ErrorShape::kOpenAi);

// The body of an error the HTTP layer answers itself, in the shape of the API `path` is in.
std::string api_error_body(const std::string& path, const http::Refusal& r);

}  // namespace waste
