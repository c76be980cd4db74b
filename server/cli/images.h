// Images for the model-running commands: `waste run/eval MODEL PROMPT --image FILE` (repeatable;
// the images' media blocks go before the prompt, in the order given) and `/image FILE` in
// `waste chat`. Local files are the user's own, so TGA and PSD are decoded too.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/vision/image_encoder.h"
#include "server/cli/args.h"
#include "server/runtime/model_host.h"
#include "server/runtime/prompt_images.h"

namespace waste::cli {

// The model's image encoder (`format` is its chat format); UsageFailure saying why when it takes
// no images.
std::unique_ptr<ImageEncoder> image_encoder(const ModelHost& m, const ChatFormat& format);

// Reads, decodes and preprocesses one file; UsageFailure naming the file and the problem.
PromptImage load_image_file(const std::string& path, const ImageEncoder& enc);

// The --image files of `a` as media blocks before `prompt`, each widened to its image's
// positions; null (and `enc` untouched) when there are none.
std::shared_ptr<PromptImages> images_from_args(const ModelHost& m, const Args& a,
                                               std::unique_ptr<ImageEncoder>& enc,
                                               std::vector<int32_t>& prompt);

}  // namespace waste::cli
