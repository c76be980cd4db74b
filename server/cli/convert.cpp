// `waste convert`: a release checkpoint folder to a WASTE v0 container (engine/convert/convert.h).
#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/convert/convert.h"
#include "prompt_templates/specials_file.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace waste::cli {

namespace {

// Fault injection for the crash tests: WASTE_CONVERT_KILL_AT=STEP:N makes the process SIGKILL
// itself at the Nth time it reaches STEP (a ConvertOptions::step_hook name), so a test kills
// the real binary at a chosen point instead of racing a timer against a run of a tenth of a
// second.
std::function<void(const char*)> kill_hook() {
  const char* spec = std::getenv("WASTE_CONVERT_KILL_AT");
  if (!spec || !*spec) return {};
  std::string s = spec;
  size_t colon = s.rfind(':');
  std::string step = s.substr(0, colon);
  int nth = colon == std::string::npos ? 1 : std::atoi(s.c_str() + colon + 1);
  auto seen = std::make_shared<std::atomic<int>>(0);  // experts finish on worker threads
  return [step, nth, seen](const char* at) {
    if (step == at && ++*seen == nth) std::raise(SIGKILL);
  };
}

}  // namespace

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
  o.step_hook = kill_hook();
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
