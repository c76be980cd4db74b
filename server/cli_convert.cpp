// `waste convert`: a release checkpoint folder to a WASTE v0 container (engine/convert.h).
#include <fmt/format.h>

#include "engine/convert.h"
#include "prompt_templates/specials_file.h"
#include "server/cli_args.h"
#include "server/cli_commands.h"

namespace waste::cli {

int cmd_convert(int argc, char** argv) {
  Args a(argc, argv, 2, {"--src", "--out", "--jobs", "--reclaim", "--arch", "--seed"}, {"--quiet"});
  if (!a.positional().empty()) throw UsageFailure{"unexpected argument " + a.positional()[0]};
  if (!a.has("--src") || !a.has("--out")) throw UsageFailure{"--src and --out are required"};
  ConvertOptions o;
  o.src = *a.get("--src");
  o.out = *a.get("--out");
  o.jobs = (int)a.get_int("--jobs", 0, 0, 4096);
  o.arch = a.get_or("--arch", "auto");
  o.recipe.seed = (uint64_t)a.get_int("--seed", 0, 0, INT64_MAX);
  std::string reclaim = a.get_or("--reclaim", "off");
  if (reclaim == "on")
    o.reclaim = Reclaim::kOn;
  else if (reclaim == "dry")
    o.reclaim = Reclaim::kDry;
  else if (reclaim != "off")
    throw UsageFailure{fmt::format("--reclaim: '{}' is not off, dry or on", reclaim)};
  o.progress = !a.has("--quiet");
  o.read_specials = [](const std::string& p) { return read_specials_file(p); };
  ConvertReport r = convert(o);
  if (r.already_complete) return 0;
  fmt::print(
      "{}: trunk {} tensors{}, {} expert layers ({} converted, {} resumed); expert error median "
      "{:.2f}%, max {:.2f}%; {}{:.1f} s\n",
      o.out.string(), r.trunk_tensors, r.trunk_resumed ? " (resumed)" : "", r.layers.size(),
      r.layers_converted, r.layers_resumed, 100 * r.median_error, 100 * r.max_error,
      r.reclaimed.empty()
          ? ""
          : fmt::format("{} shards {}; ", r.reclaimed.size(),
                        o.reclaim == Reclaim::kDry ? "would be reclaimed" : "reclaimed"),
      r.seconds);
  return 0;
}

}  // namespace waste::cli
