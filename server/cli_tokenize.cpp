// `waste tokenize` (text mode: special-token strings stay text) and `waste render` (an OpenAI
// chat request body on standard input, rendered in the model's chat format).
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "engine/container.h"
#include "engine/error.h"
#include "prompt_templates/k3_template.h"
#include "prompt_templates/kimi_linear_template.h"
#include "prompt_templates/python_json.h"
#include "protocol/json_writer.h"
#include "server/cli_args.h"
#include "server/cli_commands.h"

namespace waste::cli {

namespace {

// A specials.json array of {id, text}, or a release's tokenizer_config.json (its
// added_tokens_decoder). Read with the Python-compatible parser: the release's config holds a
// 31-digit integer that simdjson refuses.
std::vector<SpecialToken> read_specials_file(const std::string& path) {
  PyJson root = py_loads(read_small_file(path, 64 << 20), path);
  std::vector<SpecialToken> out;
  if (root.type == PyJson::Type::kArray) {
    for (const PyJson& e : root.items) {
      const PyJson *id = e.find("id"), *text = e.find("text");
      if (!id || !text || id->type != PyJson::Type::kInt || text->type != PyJson::Type::kString)
        fail("{}: each entry needs an integer id and a string text", path);
      out.push_back({std::stoi(id->text), text->text});
    }
    return out;
  }
  const PyJson* added = root.find("added_tokens_decoder");
  if (!added || added->type != PyJson::Type::kObject)
    fail("{}: neither a specials array nor a tokenizer_config.json with added_tokens_decoder",
         path);
  for (const PyMember& m : added->members) {
    const PyJson* content = m.value.find("content");
    if (!content || content->type != PyJson::Type::kString)
      fail("{}: added_tokens_decoder.{}.content is missing", path, m.key);
    out.push_back({std::stoi(m.key), content->text});
  }
  return out;
}

// From MODEL (its tokenizer.model and specials.json) or --tokenizer FILE (+ --specials FILE:
// a tokenizer_config.json or a specials.json).
std::unique_ptr<Tokenizer> open_tokenizer(const Args& a, size_t model_index) {
  if (auto t = a.get("--tokenizer")) {
    std::vector<SpecialToken> specials;
    if (auto sp = a.get("--specials")) specials = read_specials_file(*sp);
    return std::make_unique<Tokenizer>(*t, specials);
  }
  if (a.positional().size() <= model_index)
    throw UsageFailure{"expected MODEL or --tokenizer FILE"};
  OpenOptions o;
  o.load_trunk = false;
  auto c = Container::open(a.positional()[model_index], o);
  if (!c->tokenizer_path()) fail("{}: the container has no tokenizer.model", c->dir().string());
  return std::make_unique<Tokenizer>(*c->tokenizer_path(), c->specials());
}

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
