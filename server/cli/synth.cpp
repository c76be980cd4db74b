// `waste synth`: write a synthetic container with random weights and real wiring.
#include <fmt/format.h>

#include "engine/synth/synth.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace waste::cli {

int cmd_synth(int argc, char** argv) {
  Args a(argc, argv, 2, {"--arch", "--preset", "--seed", "--layers"}, {});
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one OUT path"};
  SynthOptions o;
  std::string arch = a.get_or("--arch", "kimi-linear");
  if (arch == "k3")
    o.arch = Arch::kK3;
  else if (arch == "deepseek-v3")
    o.arch = Arch::kDeepSeekV3;
  else if (arch != "kimi-linear")
    throw UsageFailure{fmt::format("--arch: '{}' is not kimi-linear, k3 or deepseek-v3", arch)};
  o.preset = a.get_or("--preset", "tiny");
  o.seed = (uint64_t)a.get_int("--seed", 1, 0, INT64_MAX);
  o.layers = (int)a.get_int("--layers", 0, 1, 93);
  write_synthetic(a.positional()[0], o);
  fmt::print("wrote {} ({} {}, seed {})\n", a.positional()[0], arch, o.preset, o.seed);
  return 0;
}

}  // namespace waste::cli
