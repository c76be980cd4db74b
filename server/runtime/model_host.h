// The one way a container is opened to run it, for `waste serve` and every CLI command alike:
// the RAM plan is made from the manifest (and a budget under the model's floor refused with the
// numbers) before any weight loads, then the trunk, the expert store with every engine option,
// and the tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "config/engine_options.h"
#include "engine/experts/ram_budget.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/vision/image_encoder.h"
#include "prompt_templates/chat_format.h"

namespace waste {

class ModelHost {
 public:
  // Opens `path`; an empty path is the built-in demo container, written first if it is not there
  // yet. Throws for a container that cannot be opened or a budget that cannot hold it.
  ModelHost(const std::string& path, const EngineOptions& options);

  const std::string& path() const { return path_; }
  const EngineOptions& options() const { return opt_; }
  const Container& container() const { return *container_; }
  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  const MemoryPlan& plan() const { return plan_; }
  const Budget& budget() const { return budget_; }
  int64_t ctx() const { return opt_.ctx; }
  // Null when the container has no tokenizer.model.
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // The config's end-of-sequence id, when it names one.
  std::optional<int32_t> eos() const;

  // The image encoder, for a container with a vision.json whose chat format (`format`, made from
  // this model's tokenizer) has image blocks with vision.json's pad id. Throws UsageError saying
  // why this model takes no images.
  std::unique_ptr<ImageEncoder> image_encoder(const ChatFormat& format,
                                              const ImageEncoderOptions& options = {}) const;

 private:
  std::string path_;
  EngineOptions opt_;
  MemoryPlan plan_;
  Budget budget_;
  std::unique_ptr<Container> container_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

// Where the built-in demo container lives ($XDG_CACHE_HOME/waste, else ~/.cache/waste).
std::filesystem::path demo_container_path();

}  // namespace waste
