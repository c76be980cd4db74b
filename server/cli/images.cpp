#include "server/cli/images.h"

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/base/file_read.h"

namespace waste::cli {

std::unique_ptr<ImageEncoder> image_encoder(const ModelHost& m, const ChatFormat& format) {
  try {
    return m.image_encoder(format);
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
  if (!m.tokenizer()) throw UsageFailure{"images need the container's tokenizer.model"};
  const ChatFormat format(*m.tokenizer(), m.eos(), ChatDefaults{});
  enc = image_encoder(m, format);
  std::vector<PromptImage> list;
  for (const std::string& f : files) list.push_back(load_image_file(f, *enc));
  auto images = std::make_shared<PromptImages>(*enc, std::move(list));
  // The blocks go before the prompt, which is raw ids rather than a conversation.
  auto before_prompt = [&](const ChatFormat::ImagePrompts& blocks) {
    RenderedPrompt p;
    for (const std::string& block : *blocks)
      for (int id : m.tokenizer()->encode_markup(block)) p.ids.push_back(id);
    p.ids.insert(p.ids.end(), prompt.begin(), prompt.end());
    return p;
  };
  try {
    prompt = render_with_images(format, images.get(), before_prompt).ids;
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
  if ((int64_t)prompt.size() >= m.ctx())
    throw UsageFailure{fmt::format("the prompt with its images takes {} positions; --ctx is {}",
                                   prompt.size(), m.ctx())};
  return images;
}

}  // namespace waste::cli
