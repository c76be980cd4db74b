// `waste`: one executable for the daemon and its tools.
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "config/engine_options.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* usage;
  bool engine = false;    // it opens a model, so it takes the engine options too
  const char* note = "";  // after the options
};

// The command's usage line; a model command's ends with every engine option of config/.
std::string usage(const Command& c) {
  std::string out = c.usage;
  if (!c.engine) return out;
  for (const auto& o : waste::engine_option_table()) {
    std::string value;
    if (!o.boolean)
      for (char ch : o.doc.key) value += (char)std::toupper((unsigned char)ch);
    out += " [" + o.doc.flag + (value.empty() ? "" : " " + value) + "]";
  }
  return out + c.note;
}

// `--help` or `-h` anywhere after the command: its usage, and for the model commands every
// engine option with its environment variable. `serve --help` prints its own, longer table.
bool print_command_help(const Command& c, int argc, char** argv) {
  bool asked = false;
  for (int i = 2; i < argc; ++i)
    asked = asked || !std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h");
  if (!asked || !std::strcmp(c.name, "serve")) return false;
  std::printf("usage: %s\n", usage(c).c_str());
  if (c.engine) {
    std::printf("\nengine options (each also an environment variable):\n");
    for (const auto& o : waste::engine_option_table())
      std::printf("  %-16s %-20s %s\n", o.doc.flag.c_str(), o.doc.env.c_str(), o.doc.help.c_str());
  }
  return true;
}

const Command kCommands[] = {
    {"serve", waste::cli::cmd_serve,
     "waste serve [MODEL] [--host H] [--port P] [--api-key K] [--budget B] [--ctx N] "
     "[--config FILE] ... (waste serve --help lists every option)"},
    {"health", waste::cli::cmd_health,
     "waste health [URL] [--timeout SECONDS]   (default http://127.0.0.1:8000/health; exit 0 when "
     "it answers 200)"},
    {"info", waste::cli::cmd_info, "waste info MODEL [--json] [--ctx N]"},
    {"verify", waste::cli::cmd_verify, "waste verify MODEL [--deep [--src DIR] [--threads N]]"},
    {"run", waste::cli::cmd_run,
     "waste run MODEL (PROMPT | --ids 1,2,3) [--image FILE]... [-n N] [--temp T] [--top-k K] "
     "[--top-p P] [--seed S] [--json]",
     true},
    {"eval", waste::cli::cmd_eval,
     "waste eval MODEL (PROMPT | --ids 1,2,3) [--image FILE]... [--top-k K] [--json] "
     "[--dump-logits FILE]",
     true},
    {"chat", waste::cli::cmd_chat,
     "waste chat MODEL [--system TEXT] [-n N] [--temp T] [--seed S] [--no-thinking]", true,
     "   (/image FILE attaches an image to the next message)"},
    {"tokenize", waste::cli::cmd_tokenize,
     "waste tokenize (MODEL | --tokenizer FILE [--specials FILE]) TEXT [--json]   (TEXT - reads "
     "stdin)"},
    {"render", waste::cli::cmd_render,
     "waste render (MODEL | --tokenizer FILE [--specials FILE]) [--no-thinking] [--effort E] "
     "[--no-generation-prompt] < request.json   (image parts need MODEL)"},
    {"schema", waste::cli::cmd_schema,
     "waste schema (MODEL | --tokenizer FILE [--specials FILE]) SCHEMA.json [--bench N] "
     "[--steps N] [--seed S] [--json]"},
    {"cache", waste::cli::cmd_cache,
     "waste cache [--prompt-cache-dir DIR] (ls | prune [--max BYTES] | clear)   (the prompt "
     "cache on disk; default folder as waste serve's)"},
    {"plan", waste::cli::cmd_plan,
     "waste plan MODEL [--ctx N] [--budget B] [--parallel N] [--json]"},
    {"bench", waste::cli::cmd_bench,
     "waste bench MODEL [--tokens N] [--prompt-tokens P] [--json] [--disk-reads N] "
     "[--no-resident]",
     true,
     "\n  waste bench --kernels [--arch kimi-linear|k3 | --quick] [--threads N] [--kernel-iters N] "
     "[--json]   (every kernel per instruction set, beside the FMA peak; no MODEL)"},
    {"cachesim", waste::cli::cmd_cachesim,
     "waste cachesim TRACE [--experts N] [--percent 3,6,12] [--json]"},
    {"synth", waste::cli::cmd_synth,
     "waste synth OUT --arch kimi-linear|k3|deepseek-v3 "
     "--preset tiny|small|48b-shape|k3-shape|k2-shape [--layers N] [--seed N]"},
    {"convert", waste::cli::cmd_convert,
     "waste convert --src DIR --out MODEL [--jobs N] [--reclaim off|dry|on] "
     "[--arch auto|k3|kimi-linear|deepseek-v3] [--seed N] [--quiet]"},
    {"download", waste::cli::cmd_download,
     "waste download --repo ID --dest DIR [--revision REV] [--dry-run] [--endpoint URL] "
     "[--retries N] [--timeout SECONDS]   (HF_TOKEN, HF_ENDPOINT from the environment)"},
};

void print_usage(FILE* f) {
  std::fprintf(f, "usage:\n");
  for (const Command& c : kCommands) std::fprintf(f, "  %s\n", usage(c).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  for (const Command& c : kCommands) {
    if (std::strcmp(argv[1], c.name) != 0) continue;
    if (print_command_help(c, argc, argv)) return 0;
    // The tools print their result on stdout, often JSON that a script parses, so the engine's
    // log lines (a fallback it took: no io_uring, no direct I/O) go to stderr. The daemon keeps
    // spdlog's stdout.
    if (std::strcmp(c.name, "serve") != 0)
      spdlog::set_default_logger(std::make_shared<spdlog::logger>(
          "", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
    try {
      return c.run(argc, argv);
    } catch (const waste::cli::UsageFailure& u) {
      std::fprintf(stderr, "waste %s: %s\nusage: %s\n", c.name, u.message.c_str(),
                   usage(c).c_str());
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "waste %s: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "waste: unknown command '%s'\n", argv[1]);
  print_usage(stderr);
  return 2;
}
