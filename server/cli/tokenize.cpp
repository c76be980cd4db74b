// `waste tokenize` (text mode: special-token strings stay text) and `waste render` (an OpenAI
// chat request body on standard input, rendered in the model's chat format, as the daemon would:
// image parts, with a MODEL that has vision.json, become the daemon's media blocks, each
// widened to the image's positions).
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/format/container.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/segments.h"
#include "protocol/api_error.h"
#include "protocol/json/json_writer.h"
#include "protocol/openai/request.h"
#include "server/api/request_images.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace waste::cli {

namespace {

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

void ids_json(JsonWriter& w, const std::vector<int>& ids) {
  w.key("token_ids").begin_array();
  for (int id : ids) w.value(id);
  w.end_array();
}

// The request's images as the daemon prepares them (data: URLs, its default limits), for the
// container at `model`; UsageFailure when it takes no images.
std::unique_ptr<PromptImages> render_images(const Args& a, const Conversation& c,
                                            std::unique_ptr<ImageEncoder>& enc) {
  if (a.has("--tokenizer") || a.positional().empty())
    throw UsageFailure{"the request has image parts: give MODEL (its vision.json sizes them)"};
  OpenOptions o;
  o.load_trunk = false;
  auto container = Container::open(a.positional()[0], o);
  try {
    enc = std::make_unique<ImageEncoder>(*container);
    return std::make_unique<PromptImages>(*enc, request_images(c, enc.get(), {}));
  } catch (const ApiError& e) {
    throw UsageFailure{e.message};
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args a(argc, argv, 2, {"--tokenizer", "--specials"}, {"--json"});
  size_t text_index = a.has("--tokenizer") ? 0 : 1;
  if (a.positional().size() != text_index + 1) throw UsageFailure{"expected TEXT (or - for stdin)"};
  auto tok = open_tokenizer(a, 0);
  std::string text = a.positional()[text_index];
  if (text == "-") text = read_stdin();
  std::vector<int> ids = tok->encode_text(text);
  if (a.has("--json")) {
    JsonWriter w;
    w.begin_object();
    ids_json(w, ids);
    fmt::print("{}\n", w.end_object().str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); i++) fmt::print("{}{}", i ? " " : "", ids[i]);
  fmt::print("\n");
  return 0;
}

int cmd_render(int argc, char** argv) {
  Args a(argc, argv, 2, {"--tokenizer", "--specials", "--effort"},
         {"--no-thinking", "--no-generation-prompt"});
  auto tok = open_tokenizer(a, 0);
  // The family is chosen by the tokenizer's specials, as the daemon chooses it.
  ChatFormat format(*tok, std::nullopt,
                    ChatDefaults{!a.has("--no-thinking"), a.get_or("--effort", "max"),
                                 !a.has("--no-generation-prompt")});
  Conversation c = parse_chat_completion(read_stdin(), {}).conversation;
  std::unique_ptr<ImageEncoder> enc;
  std::unique_ptr<PromptImages> images;
  if (has_images(c)) images = render_images(a, c, enc);
  ChatFormat::ImagePrompts prompts;
  if (images) prompts = images->media_prompts();
  std::vector<Segment> segments = format.segments(c, prompts);
  JsonWriter w;
  w.begin_object().key("segments").begin_array();
  for (const Segment& s : segments) w.begin_array().value(s.text).value(s.is_markup).end_array();
  w.end_array();
  std::vector<int> ids = tokenize_segments(*tok, segments);
  if (images) {
    std::vector<size_t> no_points;
    images->place(ids, no_points, (int32_t)enc->config().placeholder_id);
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
  ids_json(w, ids);
  fmt::print("{}\n", w.end_object().str());
  return 0;
}

}  // namespace waste::cli
