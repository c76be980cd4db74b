#include "server/cli/images.h"

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "prompt_templates/k3/k3_template.h"

namespace waste::cli {

std::unique_ptr<ImageEncoder> image_encoder(const ModelHost& m) {
  try {
    return m.image_encoder();
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
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

std::shared_ptr<PromptImages> images_from_args(const ModelHost& m, const Args& a,
                                               std::unique_ptr<ImageEncoder>& enc,
                                               std::vector<int32_t>& prompt) {
  std::vector<std::string> files = a.get_all("--image");
  if (files.empty()) return nullptr;
  enc = image_encoder(m);
  std::vector<PromptImage> list;
  for (const std::string& f : files) list.push_back(load_image_file(f, *enc));
  auto images = std::make_shared<PromptImages>(*enc, std::move(list));
  std::vector<int32_t> ids;
  for (const std::string& block : images->media_prompts())
    for (int id : m.tokenizer()->encode_markup(block)) ids.push_back(id);
  ids.insert(ids.end(), prompt.begin(), prompt.end());
  std::vector<size_t> no_points;
  try {
    images->place(ids, no_points, (int32_t)enc->config().placeholder_id);
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
  prompt = std::move(ids);
  if ((int64_t)prompt.size() >= m.ctx())
    throw UsageFailure{fmt::format("the prompt with its images takes {} positions; --ctx is {}",
                                   prompt.size(), m.ctx())};
  return images;
}

}  // namespace waste::cli
