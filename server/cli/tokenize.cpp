// `waste tokenize`: text mode, so special-token strings stay text.
#include <fmt/format.h>

#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace waste::cli {

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
    write_token_ids(w, ids);
    fmt::print("{}\n", w.end_object().str());
    return 0;
  }
  for (size_t i = 0; i < ids.size(); i++) fmt::print("{}{}", i ? " " : "", ids[i]);
  fmt::print("\n");
  return 0;
}

}  // namespace waste::cli
