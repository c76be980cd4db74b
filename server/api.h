// The OpenAI-compatible routes of the daemon and the state behind them: the model loads in the
// background (GET /health answers 503 until it is ready), then one engine worker serves the
// queue. Routes never block on generation: /health, /v1/models and /metrics always answer.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "config/serve_options.h"
#include "engine/container.h"
#include "engine/image_encoder.h"
#include "engine/model.h"
#include "engine/ram_budget.h"
#include "engine/tokenizer.h"
#include "server/chat_format.h"
#include "server/engine_worker.h"
#include "server/http.h"

namespace waste {

class Api {
 public:
  explicit Api(ServeOptions opt);
  ~Api();

  void register_routes(http::Server& server);
  // Loads the model on a background thread; `on_failure` runs there if loading fails.
  void start_loading(std::function<void(const std::string&)> on_failure);
  // Refuses new work and finishes the queue's bookkeeping (queued requests get 503).
  void shutdown();
  bool ready() const { return ready_; }

 private:
  void load();
  void health(const http::Request& r, std::shared_ptr<http::ResponseWriter> w);
  void models(const http::Request& r, std::shared_ptr<http::ResponseWriter> w);
  void metrics(const http::Request& r, std::shared_ptr<http::ResponseWriter> w);
  void chat(const http::Request& r, std::shared_ptr<http::ResponseWriter> w);
  std::unique_ptr<TokenConstraint> reply_constraint(const ChatRequest& req, bool thinking) const;
  void completions(const http::Request& r, std::shared_ptr<http::ResponseWriter> w);
  // Checks limits, fills the job's header and max_new, and queues it (or answers 429).
  void enqueue(Job job, const std::shared_ptr<http::ResponseWriter>& w);
  bool not_ready(const std::shared_ptr<http::ResponseWriter>& w) const;
  // Images (server/image_request.h): the encoder when the model takes them, the request's
  // images decoded and preprocessed, their media blocks widened in the rendered prompt.
  void load_vision();
  std::shared_ptr<PromptImages> prompt_images(const ChatRequest& req) const;
  void place_images(PromptImages& images, RenderedPrompt& p) const;

  ServeOptions opt_;
  std::string model_id_;
  int64_t created_ = 0;
  std::atomic<bool> ready_{false};
  std::string load_error_;
  mutable std::mutex load_mu_;
  std::unique_ptr<Container> container_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatFormat> chat_;
  // Null when the model takes no images (vision_error_ says why, if it has a vision.json).
  // Declared before worker_ so that it outlives the jobs that point at it.
  std::unique_ptr<ImageEncoder> vision_;
  std::string vision_error_;
  std::unique_ptr<TokenIndex> token_index_;  // the vocabulary for structured-output masks
  std::unique_ptr<EngineWorker> worker_;
  std::atomic<uint64_t> rejected_{0};
  std::thread loader_;
};

// Where `waste serve` with no MODEL finds (and if needed writes) the built-in demo container.
std::string demo_container_path();

}  // namespace waste
