// Images for the model-running commands: `waste run/eval MODEL PROMPT --image FILE` (repeatable;
// the images' media blocks go before the prompt, in the order given) and `/image FILE` in
// `waste chat`. Local files are the user's own, so TGA and PSD are decoded too.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/image_encoder.h"
#include "server/cli_model.h"
#include "server/prompt_images.h"

namespace waste::cli {

// The container's image encoder; UsageFailure "this model does not accept images" without
// vision.json.
std::unique_ptr<ImageEncoder> image_encoder(const LoadedModel& m);

// Reads, decodes and preprocesses one file; UsageFailure naming the file and the problem.
PromptImage load_image_file(const std::string& path, const ImageEncoder& enc);

// Puts one media block per image before `prompt` (K3's `<|media_begin|>image WxH...`) and
// widens each to the image's positions.
std::unique_ptr<PromptImages> prepend_images(const LoadedModel& m, ImageEncoder& enc,
                                             std::vector<PromptImage> images,
                                             std::vector<int32_t>& prompt);

// The --image files of `a`, prepended to `prompt`; null (and `enc` untouched) when none.
std::unique_ptr<PromptImages> images_from_args(const LoadedModel& m, const Args& a,
                                               std::unique_ptr<ImageEncoder>& enc,
                                               std::vector<int32_t>& prompt);

// forward() over prompt[from, from + ids.size()), image positions taking tower rows.
void forward_prompt(Model& model, Session& s, std::span<const int32_t> ids, size_t from,
                    PromptImages* images, float* logits);

}  // namespace waste::cli
