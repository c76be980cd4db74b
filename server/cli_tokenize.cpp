// `waste tokenize` (text mode: special-token strings stay text) and `waste render` (an OpenAI
// chat request body on standard input, rendered in the model's chat format).
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "engine/container.h"
#include "engine/error.h"
#include "prompt_templates/k3_template.h"
#include "prompt_templates/kimi_linear_template.h"
#include "prompt_templates/specials_file.h"
#include "protocol/json_writer.h"
#include "server/cli_args.h"
#include "server/cli_commands.h"
#include "server/cli_model.h"

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
  ChatRequest req = parse_chat_request(read_stdin());
  std::vector<Segment> segments;
  bool k3 = tok->find_special("<|open|>").has_value();
  if (k3) {
    K3RenderOptions o;
    o.default_thinking = !a.has("--no-thinking");
    o.default_effort = a.get_or("--effort", "max");
    o.add_generation_prompt = !a.has("--no-generation-prompt");
    segments = render_k3(req, o);
  } else {
    KimiLinearRenderOptions o;
    o.add_generation_prompt = !a.has("--no-generation-prompt");
    segments = render_kimi_linear(req, o);
  }
  JsonWriter w;
  w.begin_object().key("segments").begin_array();
  for (const Segment& s : segments) w.begin_array().value(s.text).value(s.is_markup).end_array();
  w.end_array();
  ids_json(w, tokenize_segments(*tok, segments));
  fmt::print("{}\n", w.end_object().str());
  return 0;
}

}  // namespace waste::cli
