#include "server/api.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "engine/error.h"
#include "engine/synth.h"
#include "protocol/api_error.h"
#include "protocol/generation_params.h"
#include "protocol/json_schema.h"
#include "protocol/json_writer.h"
#include "protocol/openai_response.h"
#include "server/image_request.h"
#include "server/structured_output.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr const char* kJson = "application/json";

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 gen(std::random_device{}());
  return fmt::format("{}{:016x}{:08x}", prefix, gen(), (uint32_t)gen());
}

// A 429 tells the client when to come back.
void send_error(const std::shared_ptr<http::ResponseWriter>& w, const ApiError& e,
                std::map<std::string, std::string> extra = {}) {
  if (e.status == 429) extra.emplace("Retry-After", "2");
  w->send(e.status, kJson, http::error_body(e.what(), e.type, e.param, e.code), extra);
}

ImageRequestLimits image_limits(const ServeOptions& o) {
  ImageRequestLimits l;
  l.decode.max_encoded_bytes = o.max_image_bytes;
  l.decode.max_pixels = o.max_image_pixels;
  l.decode.allow_tga_psd = o.allow_tga_psd;
  l.max_images = o.max_images;
  l.allow_remote = o.allow_remote_images;
  return l;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string demo_container_path() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base =
      cache && *cache ? fs::path(cache) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return (base / "waste" / "demo-kimi-linear.waste").string();
}

Api::Api(ServeOptions opt) : opt_(std::move(opt)), created_(unix_now()) {}

Api::~Api() {
  shutdown();
  if (loader_.joinable()) loader_.join();
}

void Api::start_loading(std::function<void(const std::string&)> on_failure) {
  loader_ = std::thread([this, on_failure] {
    try {
      load();
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
  std::string path = opt_.model;
  if (path.empty()) {
    path = demo_container_path();
    if (!fs::exists(fs::path(path) / "manifest.json")) {
      spdlog::info("writing the built-in demo model to {}", path);
      fs::create_directories(fs::path(path).parent_path());
      write_synthetic(path, {Arch::kKimiLinear, "tiny", 1});
    }
  }
  model_id_ =
      !opt_.model_name.empty() ? opt_.model_name : fs::path(path).filename().stem().string();
  OpenOptions oo;
  oo.load_trunk = false;
  auto probe = Container::open(path, oo);
  MemoryPlan plan = plan_memory(probe->manifest(), opt_.ctx);
  Budget budget = plan_budget(plan, opt_.budget, usable_memory().bytes);
  probe.reset();
  spdlog::info("loading {} (budget {}, expert cache {})", path, human_bytes(budget.budget),
               human_bytes(budget.cache_bytes));
  container_ = Container::open(path);
  if (!container_->tokenizer_path())
    fail<UsageError>("{} has no tokenizer.model; the server needs one", path);
  tokenizer_ = std::make_unique<Tokenizer>(*container_->tokenizer_path(), container_->specials());
  ModelOptions mo;
  mo.threads = opt_.threads;
  mo.chunk = opt_.chunk;
  mo.lookahead = opt_.lookahead;
  mo.store.io_threads = opt_.io_threads;
  mo.store.cache_bytes = budget.cache_bytes;
  model_ = std::make_unique<Model>(*container_, mo);
  chat_ = std::make_unique<ChatFormat>(*container_, *tokenizer_,
                                       ChatDefaults{opt_.thinking, opt_.effort});
  token_index_ = make_token_index(*tokenizer_, model_->config().vocab);
  load_vision();
  WorkerOptions wo;
  wo.queue_limit = opt_.queue;
  wo.ctx = opt_.ctx;
  wo.snapshot_bytes = opt_.snapshot_bytes;
  worker_ = std::make_unique<EngineWorker>(*model_, *tokenizer_, chat_.get(), wo);
  ready_ = true;
  spdlog::info("ready: {} ({} chat format, context {}, {} threads)", model_id_,
               chat_->family_name(), opt_.ctx, model_->threads());
}

void Api::shutdown() {
  if (worker_) worker_->stop();
}

void Api::register_routes(http::Server& s) {
  auto bind = [this](void (Api::*f)(const http::Request&, std::shared_ptr<http::ResponseWriter>)) {
    return [this, f](const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
      (this->*f)(r, std::move(w));
    };
  };
  s.route("GET", "/health", bind(&Api::health));
  s.route("GET", "/v1/models", bind(&Api::models));
  s.route("GET", "/metrics", bind(&Api::metrics));
  s.route("POST", "/v1/chat/completions", bind(&Api::chat));
  s.route("POST", "/v1/completions", bind(&Api::completions));
}

bool Api::not_ready(const std::shared_ptr<http::ResponseWriter>& w) const {
  if (ready_) return false;
  send_error(w, ApiError(503, "the model is still loading", "", "model_loading", "server_error"),
             {{"Retry-After", "5"}});
  return true;
}

void Api::health(const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
  JsonWriter j;
  j.begin_object();
  if (!ready_) {
    std::lock_guard<std::mutex> lock(load_mu_);
    j.key("status").value(load_error_.empty() ? "loading" : "error");
    if (!load_error_.empty()) j.key("error").value(load_error_);
    w->send(503, kJson, j.end_object().str(), {{"Retry-After", "5"}});
    return;
  }
  j.key("status").value("ok").key("model").value(model_id_);
  j.key("queue_depth").value((int64_t)worker_->queue_depth()).key("busy").value(worker_->busy());
  w->send(200, kJson, j.end_object().str());
}

void Api::models(const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
  if (not_ready(w)) return;
  w->send(200, kJson, models_json(model_id_, created_, opt_.ctx));
}

void Api::metrics(const http::Request&, std::shared_ptr<http::ResponseWriter> w) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  metric("waste_ready", "gauge", "1 once the model is loaded", ready_ ? 1 : 0);
  metric("waste_requests_rejected_total", "counter", "requests refused with 429 (queue full)",
         (double)rejected_);
  if (ready_) {
    const WorkerCounters& c = worker_->counters();
    ExpertStats st = model_->expert_stats();
    metric("waste_requests_total", "counter", "generation requests taken by the engine",
           (double)c.requests);
    metric("waste_requests_failed_total", "counter", "requests that failed in the engine",
           (double)c.failed);
    metric("waste_requests_cancelled_total", "counter", "requests whose client went away",
           (double)c.cancelled);
    metric("waste_prompt_tokens_total", "counter", "prompt tokens", (double)c.prompt_tokens);
    metric("waste_cached_prompt_tokens_total", "counter", "prompt tokens restored from snapshots",
           (double)c.cached_tokens);
    metric("waste_completion_tokens_total", "counter", "generated tokens",
           (double)c.completion_tokens);
    double decode_s = (double)c.decode_micros / 1e6;
    metric("waste_decode_tokens_per_second", "gauge", "generated tokens per second of decoding",
           decode_s > 0 ? (double)c.completion_tokens / decode_s : 0);
    metric("waste_queue_depth", "gauge", "requests waiting", (double)worker_->queue_depth());
    metric("waste_busy", "gauge", "1 while a request is generating", worker_->busy() ? 1 : 0);
    metric("waste_expert_cache_hits_total", "counter", "expert records found in RAM",
           (double)st.hits);
    metric("waste_expert_cache_misses_total", "counter", "expert records read from disk",
           (double)st.misses);
    metric("waste_expert_bytes_read_total", "counter", "bytes of expert records read",
           (double)st.bytes_read);
    metric("waste_prefix_snapshots", "gauge", "conversation snapshots kept for reuse",
           (double)worker_->prefix_cache().size());
  }
  w->send(200, "text/plain; version=0.0.4", out);
}

void Api::enqueue(Job job, const std::shared_ptr<http::ResponseWriter>& w) {
  if (!job.params.model.empty() && job.params.model != model_id_)
    throw ApiError(404,
                   fmt::format("the model '{}' does not exist; this server serves '{}'",
                               job.params.model, model_id_),
                   "model", "model_not_found");
  int64_t room = opt_.ctx - (int64_t)job.prompt.size();
  if (room < 1 || (job.params.max_tokens && *job.params.max_tokens > room))
    throw ApiError(
        400,
        fmt::format("this model's context holds {} tokens; the prompt has {} and {} more "
                    "were asked for",
                    opt_.ctx, job.prompt.size(), job.params.max_tokens.value_or(1)),
        "messages", "context_length_exceeded");
  job.max_new = std::min(job.params.max_tokens.value_or(opt_.default_max_tokens), room);
  job.header.created = unix_now();
  job.header.model = model_id_;
  job.out = w;
  if (!worker_->submit(std::move(job))) {
    rejected_++;
    throw ApiError(429, "the server is busy: too many requests are waiting; retry shortly", "",
                   "queue_full");
  }
}

// The constraint that makes the reply follow response_format or the forced tool call.
std::unique_ptr<TokenConstraint> Api::reply_constraint(const ChatRequest& req,
                                                       bool thinking) const {
  bool tools =
      chat_->family() == ChatFamily::kK3 && (req.tool_choice.kind == ToolChoice::Kind::kNamed ||
                                             req.tool_choice.kind == ToolChoice::Kind::kRequired);
  try {
    std::shared_ptr<const Grammar> g = reply_grammar(chat_->family(), req, thinking);
    if (!g) return nullptr;
    return std::make_unique<TokenConstraint>(g, *token_index_);
  } catch (const SchemaError& e) {
    throw ApiError(400, e.what(), tools ? "tools" : "response_format");
  } catch (const UsageError& e) {
    throw ApiError(400, e.what(), tools ? "tool_choice" : "response_format");
  }
}

// Only vision.json is read here; the tower loads with the first image, so text pays nothing. A
// bad vision.json disables images (and says why) instead of the whole model.
void Api::load_vision() {
  if (!container_->vision_json()) return;
  if (chat_->family() != ChatFamily::kK3) {
    vision_error_ = "this model's chat format has no image blocks";
    return;
  }
  try {
    ImageEncoderOptions io;
    io.max_patches = opt_.max_image_patches;
    vision_ = std::make_unique<ImageEncoder>(*container_, io);
    auto pad = tokenizer_->find_special("<|media_pad|>");
    if (!pad || *pad != vision_->config().placeholder_id)
      fail("the tokenizer's <|media_pad|> is not vision.json's media_placeholder_token_id {}",
           vision_->config().placeholder_id);
    spdlog::info("images: accepted (up to {} patches, {} positions, per image)",
                 vision_->max_patches(), vision_->max_patches() / 4);
  } catch (const std::exception& e) {
    vision_.reset();
    vision_error_ = e.what();
    spdlog::warn("images disabled: {}", e.what());
  }
}

// The request's images, decoded and preprocessed; null when it has none.
std::shared_ptr<PromptImages> Api::prompt_images(const ChatRequest& req) const {
  if (!has_images(req)) return nullptr;
  try {
    std::vector<PromptImage> list = request_images(req, vision_.get(), image_limits(opt_));
    return std::make_shared<PromptImages>(*vision_, std::move(list));
  } catch (const ApiError& e) {
    if (vision_ || vision_error_.empty()) throw;
    throw ApiError(e.status, fmt::format("{} ({})", e.what(), vision_error_), e.param, e.code);
  }
}

// Widens the media blocks to the images' positions and checks they fit the context.
void Api::place_images(PromptImages& images, RenderedPrompt& p) const {
  images.place(p.ids, p.boundary, (int32_t)vision_->config().placeholder_id);
  check_image_room(images.images(), opt_.ctx);
}

void Api::chat(const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
  if (not_ready(w)) return;
  try {
    Job job;
    job.id = random_id("chatcmpl-");
    job.header.id = job.id;
    ChatRequest req;
    try {
      req = parse_chat_request(r.body);
    } catch (const UsageError& e) {
      throw ApiError(400, e.what());
    }
    job.params = parse_generation_params(r.body, {model_->config().vocab, opt_.max_tokens});
    std::shared_ptr<PromptImages> images = prompt_images(req);
    RenderedPrompt p;
    try {
      p = images ? chat_->render(req, images->media_prompts()) : chat_->render(req);
      if (images) place_images(*images, p);
    } catch (const UsageError& e) {
      throw ApiError(400, e.what());
    }
    job.prompt = std::move(p.ids);
    job.boundary = p.boundary;
    job.images = std::move(images);
    job.thinking = p.thinking;
    try {
      job.forced = chat_->forced_tool_call(req, p.thinking);
    } catch (const UsageError& e) {
      throw ApiError(400, e.what(), "tool_choice");
    }
    job.constraint = reply_constraint(req, p.thinking);
    enqueue(std::move(job), w);
  } catch (const ApiError& e) {
    send_error(w, e);
  }
}

void Api::completions(const http::Request& r, std::shared_ptr<http::ResponseWriter> w) {
  if (not_ready(w)) return;
  try {
    Job job;
    job.chat = false;
    job.id = random_id("cmpl-");
    job.header.id = job.id;
    job.params = parse_generation_params(r.body, {model_->config().vocab, opt_.max_tokens});
    CompletionPrompt p = parse_completion_prompt(r.body, model_->config().vocab);
    // A raw prompt is the client's whole input, template markers included, so specials count.
    if (p.text)
      for (int id : tokenizer_->encode_markup(*p.text)) job.prompt.push_back(id);
    else
      job.prompt = std::move(p.ids);
    if (job.prompt.empty()) throw ApiError(400, "the prompt is empty", "prompt");
    enqueue(std::move(job), w);
  } catch (const ApiError& e) {
    send_error(w, e);
  }
}

}  // namespace waste
