// The model as the daemon serves it, built once the container is open: its id, its family's chat
// format, the vocabulary index for structured outputs, the image encoder (when the model takes
// images) and the engine worker with its queue and prompt cache.
#pragma once

#include <future>
#include <memory>
#include <string>

#include "config/serve_options.h"
#include "engine/vision/image_encoder.h"
#include "prompt_templates/chat_format.h"
#include "protocol/constraint/token_constraint.h"
#include "server/runtime/engine_worker.h"
#include "server/runtime/expert_warm_start.h"
#include "server/runtime/model_host.h"

namespace waste {

struct ServingModel {
  // Opens opt.model (or the demo) and builds the rest; throws what the engine throws.
  explicit ServingModel(const ServeOptions& opt);

  ModelHost host;
  std::string id;                    // the model id of /v1/models and of every response
  std::vector<std::string> aliases;  // other names requests may use for it
  ChatFormat format;
  std::unique_ptr<TokenIndex> token_index;
  // Null when the model takes no images (vision_error says why, if it has a vision.json).
  // Declared before the worker so that it outlives the jobs that point at it.
  std::unique_ptr<ImageEncoder> vision;
  std::string vision_error;
  std::string cache_folder;                  // prompt snapshots and expert usage; empty: none
  std::shared_future<uint64_t> fingerprint;  // the model's content fingerprint, when used
  EngineWorker worker;
  // Declared after the worker: saves the expert cache's counts before the worker goes.
  std::unique_ptr<ExpertWarmStart> warm_start;
};

}  // namespace waste
