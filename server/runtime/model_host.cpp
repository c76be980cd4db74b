#include "server/runtime/model_host.h"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/base/platform.h"
#include "engine/base/thread_pool.h"
#include "engine/synth/synth.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

// The demo is small (a few MB) and written once; a later start only opens it.
std::string ensure_demo() {
  fs::path path = demo_container_path();
  if (!fs::exists(path / "manifest.json")) {
    spdlog::info("writing the built-in demo model to {}", path.string());
    fs::create_directories(path.parent_path());
    write_synthetic(path, {Arch::kKimiLinear, "tiny", 1});
  }
  return path.string();
}

ModelOptions model_options(const EngineOptions& o, const Budget& b) {
  ModelOptions mo;
  mo.threads = o.threads;
  mo.chunk = o.chunk > 0 ? o.chunk : (int)b.window;
  mo.lookahead = o.lookahead;
  mo.store.io_threads = o.io_threads;
  mo.store.backend = o.io_backend;
  mo.store.policy = o.policy;
  mo.store.cache_bytes = b.cache_bytes;
  return mo;
}

}  // namespace

fs::path demo_container_path() {
  const char* cache = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  fs::path base =
      cache && *cache ? fs::path(cache) : fs::path(home && *home ? home : "/tmp") / ".cache";
  return base / "waste" / "demo-kimi-linear.waste";
}

ModelHost::ModelHost(const std::string& path, const EngineOptions& options)
    : path_(path.empty() ? ensure_demo() : path), opt_(options) {
  OpenOptions oo;
  oo.verify_crc = opt_.verify;
  oo.load_trunk = false;
  {
    // The manifest alone: a budget that cannot hold the model is refused before weights load.
    auto probe = Container::open(path_, oo);
    const uint64_t usable = usable_memory().bytes;
    const int threads = ThreadPool::resolve(opt_.threads);
    opt_.ctx = choose_context(probe->manifest(), opt_.ctx, opt_.budget, usable, threads);
    plan_ = plan_memory(probe->manifest(), opt_.ctx, threads);
    budget_ = plan_budget(plan_, opt_.budget, usable);
  }
  oo.load_trunk = true;
  container_ = Container::open(path_, oo);
  model_ = std::make_unique<Model>(*container_, model_options(opt_, budget_));
  if (auto tp = container_->tokenizer_path())
    tokenizer_ = std::make_unique<Tokenizer>(*tp, container_->specials());
}

std::optional<int32_t> ModelHost::eos() const {
  int64_t eos = container_->config().eos_token_id;
  if (eos <= 0) return std::nullopt;
  return (int32_t)eos;
}

std::unique_ptr<ImageEncoder> ModelHost::image_encoder(const ChatFormat& format,
                                                       const ImageEncoderOptions& options) const {
  if (!container_->vision_json())
    fail<UsageError>("this model does not accept images (its container has no vision.json)");
  const std::optional<int32_t> pad = format.media_pad();
  if (!pad)
    fail<UsageError>("this model's chat format ({}) has no image blocks", format.family_name());
  auto enc = std::make_unique<ImageEncoder>(*container_, options);
  if (*pad != enc->config().placeholder_id)
    fail<UsageError>(
        "this model's chat format has no image blocks (its media pad, id {}, is not "
        "vision.json's media_placeholder_token_id {})",
        *pad, enc->config().placeholder_id);
  return enc;
}

}  // namespace waste
