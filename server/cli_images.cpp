#include "server/cli_images.h"

#include <fmt/format.h>

#include "engine/container.h"
#include "engine/error.h"
#include "prompt_templates/k3_template.h"

namespace waste::cli {

std::unique_ptr<ImageEncoder> image_encoder(const LoadedModel& m) {
  if (!m.container->vision_json())
    throw UsageFailure{"this model does not accept images (its container has no vision.json)"};
  if (!m.tokenizer) throw UsageFailure{"images need the container's tokenizer.model"};
  return std::make_unique<ImageEncoder>(*m.container);
}

PromptImage load_image_file(const std::string& path, const ImageEncoder& enc) {
  DecodeLimits limits;
  limits.allow_tga_psd = true;
  std::string bytes;
  try {
    bytes = read_small_file(path, limits.max_encoded_bytes);  // its errors name the file
  } catch (const std::exception& e) {
    throw UsageFailure{e.what()};
  }
  try {
    std::span<const uint8_t> b((const uint8_t*)bytes.data(), bytes.size());
    return prepare_image(b, enc, limits, path);
  } catch (const std::exception& e) {
    throw UsageFailure{fmt::format("{}: {}", path, e.what())};
  }
}

std::unique_ptr<PromptImages> prepend_images(const LoadedModel& m, ImageEncoder& enc,
                                             std::vector<PromptImage> images,
                                             std::vector<int32_t>& prompt) {
  auto out = std::make_unique<PromptImages>(enc, std::move(images));
  std::vector<int32_t> ids;
  for (const std::string& block : out->media_prompts())
    for (int id : m.tokenizer->encode_markup(block)) ids.push_back(id);
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  size_t boundary = 0;
  try {
    out->place(ids, boundary, (int32_t)enc.config().placeholder_id);
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
  prompt = std::move(ids);
  return out;
}

std::unique_ptr<PromptImages> images_from_args(const LoadedModel& m, const Args& a,
                                               std::unique_ptr<ImageEncoder>& enc,
                                               std::vector<int32_t>& prompt) {
  std::vector<std::string> files = a.get_all("--image");
  if (files.empty()) return nullptr;
  enc = image_encoder(m);
  std::vector<PromptImage> list;
  for (const std::string& f : files) list.push_back(load_image_file(f, *enc));
  auto images = prepend_images(m, *enc, std::move(list), prompt);
  if ((int64_t)prompt.size() >= m.plan.ctx)
    throw UsageFailure{fmt::format("the prompt with its images takes {} positions; --ctx is {}",
                                   prompt.size(), m.plan.ctx)};
  return images;
}

void forward_prompt(Model& model, Session& s, std::span<const int32_t> ids, size_t from,
                    PromptImages* images, float* logits) {
  std::vector<EmbeddingOverride> embeds;
  if (images) embeds = images->overrides(from, ids.size(), model.pool());
  model.forward(s, ids, logits, embeds);
}

}  // namespace waste::cli
