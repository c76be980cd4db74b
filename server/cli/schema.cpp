// `waste schema`: compiles a JSON Schema into the grammar the daemon holds a response_format
// reply to (so a user learns before a request whether it is supported), and with --bench measures
// the token masks over the model's whole vocabulary along random outputs.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "prompt_templates/chat_format.h"
#include "prompt_templates/reply_grammar.h"
#include "protocol/constraint/constraint_walk.h"
#include "protocol/constraint/json_schema.h"
#include "protocol/json/json_writer.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace waste::cli {
namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, (size_t)(p * (double)(v.size() - 1) + 0.5))];
}

// The bytes of `ids` up to the first special token: the value, without the markup after it.
std::string value_text(const TokenIndex& index, const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    if (index.is_special(id)) break;
    out += index.bytes(id);
  }
  return out;
}

std::string read_schema(const std::string& path) {
  std::string text;
  std::FILE* f = path == "-" ? stdin : std::fopen(path.c_str(), "rb");
  if (!f) fail<UsageError>("{}: cannot open", path);
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  if (f != stdin) std::fclose(f);
  return text;
}

}  // namespace

int cmd_schema(int argc, char** argv) {
  Args a(argc, argv, 2, {"--tokenizer", "--specials", "--bench", "--steps", "--seed"}, {"--json"});
  size_t schema_index = a.has("--tokenizer") ? 0 : 1;
  if (a.positional().size() != schema_index + 1) throw UsageFailure{"expected SCHEMA.json (or -)"};
  std::string schema = read_schema(a.positional()[schema_index]);
  auto tok = open_tokenizer(a, 0);
  int walks = (int)a.get_int("--bench", 0, 0, 100000);
  int steps = (int)a.get_int("--steps", 400, 1, 1000000);
  uint64_t seed = (uint64_t)a.get_int("--seed", 1, 0, INT64_MAX);

  auto t0 = std::chrono::steady_clock::now();
  auto index = make_token_index(*tok, (int)tok->vocab_size());
  double index_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto t1 = std::chrono::steady_clock::now();
  // The daemon's own reply grammar for this response_format (thinking off: the value is the
  // reply), wrapped in the family's reply markup.
  Conversation c;
  c.response_format = {ResponseFormat::Kind::kJsonSchema, schema};
  std::shared_ptr<const Grammar> g = ChatFormat(*tok, std::nullopt, {}).reply_grammar(c, false);
  double compile_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();

  std::vector<double> masks;
  int finished = 0;
  size_t tokens = 0;
  std::string example;
  for (int i = 0; i < walks; ++i) {
    ConstraintWalk w = random_walk(g, *index, seed + (uint64_t)i, steps);
    masks.insert(masks.end(), w.mask_micros.begin(), w.mask_micros.end());
    tokens += w.ids.size();
    if (w.finished && example.empty()) example = value_text(*index, w.ids);
    finished += w.finished;
  }
  if (a.has("--json")) {
    JsonWriter j;
    j.begin_object().key("vocab").value((int64_t)index->vocab());
    j.key("index_ms")
        .value(index_ms)
        .key("compile_ms")
        .value(compile_ms)
        .key("nodes")
        .value((int64_t)g->nodes.size());
    if (walks > 0) {
      j.key("walks")
          .value(walks)
          .key("finished")
          .value(finished)
          .key("masks")
          .value((int64_t)masks.size());
      j.key("mask_us").begin_object().key("median").value(percentile(masks, 0.5));
      j.key("p90").value(percentile(masks, 0.9)).key("p99").value(percentile(masks, 0.99));
      j.key("max").value(percentile(masks, 1.0)).end_object();
      j.key("example").value(example);
    }
    j.end_object();
    fmt::print("{}\n", j.str());
    return 0;
  }
  fmt::print(
      "schema compiled: {} grammar nodes in {:.2f} ms (vocabulary of {} indexed in {:.0f} ms)\n",
      g->nodes.size(), compile_ms, index->vocab(), index_ms);
  if (walks > 0) {
    fmt::print("{} random outputs, {} finished, {} tokens\n", walks, finished, tokens);
    fmt::print("mask per token: median {:.1f} us, p90 {:.1f} us, p99 {:.1f} us, max {:.1f} us\n",
               percentile(masks, 0.5), percentile(masks, 0.9), percentile(masks, 0.99),
               percentile(masks, 1.0));
    if (!example.empty()) fmt::print("example: {}\n", example);
  }
  return 0;
}

}  // namespace waste::cli
