// `waste render`: a chat request body on standard input, parsed as the daemon parses it and
// rendered in the model's chat format as the daemon renders it. Image parts (data: URLs), with a
// MODEL that has vision.json, become the daemon's media blocks, each widened to the image's
// positions.
#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/format/container.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/segments.h"
#include "protocol/data_url.h"
#include "protocol/openai/request.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"
#include "server/runtime/prompt_images.h"

namespace waste::cli {

namespace {

// The image parts of `c`, decoded and preprocessed with the daemon's default limits, for the
// container at MODEL; UsageFailure naming the part, or saying why there is no encoder.
std::unique_ptr<PromptImages> render_images(const Args& a, const Conversation& c,
                                            std::unique_ptr<ImageEncoder>& enc) {
  if (a.has("--tokenizer") || a.positional().empty())
    throw UsageFailure{"the request has image parts: give MODEL (its vision.json sizes them)"};
  OpenOptions o;
  o.load_trunk = false;
  auto container = Container::open(a.positional()[0], o);
  try {
    enc = std::make_unique<ImageEncoder>(*container);
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
  const DecodeLimits limits;
  std::vector<PromptImage> list;
  for (const ImagePart& part : image_parts(c)) {
    try {
      DataUrl url = parse_data_url(part.ref, limits.max_encoded_bytes);
      list.push_back(prepare_image(url.bytes, *enc, limits, part.where));
    } catch (const std::exception& e) {
      throw UsageFailure{fmt::format("{}: {}", part.where, e.what())};
    }
  }
  return std::make_unique<PromptImages>(*enc, std::move(list));
}

}  // namespace

int cmd_render(int argc, char** argv) {
  Args a(argc, argv, 2, {"--tokenizer", "--specials", "--effort"},
         {"--no-thinking", "--no-generation-prompt"});
  auto tok = open_tokenizer(a, 0);
  // The family is chosen by the tokenizer's specials, as the daemon chooses it.
  ChatFormat format(*tok, std::nullopt,
                    ChatDefaults{!a.has("--no-thinking"), a.get_or("--effort", "max"),
                                 !a.has("--no-generation-prompt")});
  // The daemon's own parser, so a request renders here exactly as it is served.
  const Conversation c = parse_chat_completion(read_stdin(), {}).conversation;
  std::unique_ptr<ImageEncoder> enc;
  std::unique_ptr<PromptImages> images;
  if (has_images(c)) images = render_images(a, c, enc);
  std::vector<Segment> segments;
  const RenderedPrompt prompt =
      render_with_images(format, images.get(), [&](const ChatFormat::ImagePrompts& blocks) {
        segments = format.segments(c, blocks);
        const std::vector<TokenId> ids = tokenize_segments(*tok, segments);
        return RenderedPrompt{{ids.begin(), ids.end()}, {}, false};
      });
  JsonWriter w;
  w.begin_object().key("segments").begin_array();
  for (const Segment& s : segments) w.begin_array().value(s.text).value(s.is_markup).end_array();
  w.end_array();
  if (images) {
    w.key("images").begin_array();
    for (const PromptImage& im : images->images())
      w.begin_object()
          .key("offset")
          .value((int64_t)im.offset)
          .key("positions")
          .value((int64_t)im.pixels->tokens)
          .end_object();
    w.end_array();
  }
  write_token_ids(w, prompt.ids);
  fmt::print("{}\n", w.end_object().str());
  return 0;
}

}  // namespace waste::cli
