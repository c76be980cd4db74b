#include "server/api/serving_model.h"

#include <filesystem>
#include <future>

#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/format/content_fingerprint.h"
#include "prompt_templates/reply_grammar.h"

namespace waste {

namespace {

const Tokenizer& required_tokenizer(const ModelHost& h) {
  if (!h.tokenizer()) fail<UsageError>("{} has no tokenizer.model; the server needs one", h.path());
  return *h.tokenizer();
}

// The cache folder for this model's files, or empty when there is none.
std::string cache_root(const ServeOptions& o) {
  std::string dir = o.prompt_cache_dir.empty() ? default_prompt_cache_dir() : o.prompt_cache_dir;
  if (dir.empty()) spdlog::warn("no cache folder (neither XDG_CACHE_HOME nor HOME is set)");
  return dir == "off" ? "" : dir;
}

// The content fingerprint, hashed once on its own thread for every user of the cache folder.
std::shared_future<uint64_t> start_fingerprint(const std::string& root, const ModelHost& h) {
  if (root.empty()) return {};
  return std::async(std::launch::async, [&h] { return content_fingerprint(h.container()); })
      .share();
}

WorkerOptions worker_options(const ServeOptions& o, const ModelHost& h, const std::string& root,
                             const std::shared_future<uint64_t>& fingerprint) {
  WorkerOptions wo;
  wo.parallel = plan_parallel(h.plan(), h.budget(), o.parallel);
  wo.step.step_tokens = o.step_tokens;
  wo.queue_limit = o.queue;
  wo.ctx = h.ctx();
  wo.snapshot_bytes = o.snapshot_bytes;
  if (!root.empty()) {
    DiskCacheOptions d;
    d.root = root;
    d.max_bytes = o.prompt_cache_disk;
    wo.disk_cache = d;
    wo.fingerprint = [fingerprint] { return fingerprint.get(); };
  }
  // As the engine names its files: the container's folder as given, then the file.
  wo.private_prefix = (std::filesystem::path(h.path()) / "").string();
  return wo;
}

}  // namespace

ServingModel::ServingModel(const ServeOptions& opt)
    : host(opt.model, opt.engine),
      id(!opt.model_name.empty() ? opt.model_name
                                 : std::filesystem::path(host.path()).filename().stem().string()),
      aliases(opt.model_aliases),
      format(required_tokenizer(host), host.eos(),
             ChatDefaults{opt.thinking, opt.effort, true, opt.thinking_allowed}),
      token_index(make_token_index(*host.tokenizer(), host.model().config().vocab)),
      cache_folder(cache_root(opt)),
      fingerprint(start_fingerprint(cache_folder, host)),
      worker(host.model(), worker_options(opt, host, cache_folder, fingerprint)) {
  if (!cache_folder.empty()) {
    WarmStartOptions wo;
    wo.root = cache_folder;
    wo.warm = opt.warm_start;
    auto fp = fingerprint;
    warm_start = std::make_unique<ExpertWarmStart>(
        host.model(), [fp] { return fp.get(); }, wo);
  }
  // Only vision.json is read here; the tower loads with the first image, so text pays nothing. A
  // bad vision.json disables images (and says why) instead of the whole model.
  if (host.container().vision_json()) {
    try {
      ImageEncoderOptions io;
      io.max_patches = opt.max_image_patches;
      vision = host.image_encoder(format, io);
      spdlog::info("images: accepted (up to {} patches, {} positions, per image)",
                   vision->max_patches(), vision->max_patches() / 4);
    } catch (const std::exception& e) {
      vision_error = e.what();
      spdlog::warn("images disabled: {}", e.what());
    }
  }
}

}  // namespace waste
