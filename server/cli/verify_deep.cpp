// `waste verify MODEL --deep [--src DIR]`: decode every expert back and report its error.
#include <fmt/format.h>

#include "engine/convert/convert_verify.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace waste::cli {

namespace {

constexpr double kBadError = 0.30;  // the original's bar for a matrix against its source

}  // namespace

int cmd_verify_deep(int argc, char** argv) {
  Args a(argc, argv, 2, {"--src", "--threads"}, {"--deep"});
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  OpenOptions opt;
  opt.load_trunk = false;
  opt.verify_crc = true;
  auto c = Container::open(a.positional()[0], opt);
  std::unique_ptr<Checkpoint> src;
  if (a.has("--src")) src = std::make_unique<Checkpoint>(*a.get("--src"));
  DeepReport r = verify_deep(*c, src.get(), (int)a.get_int("--threads", 0, 0, 4096));
  const char* metric = src ? "relative error vs source" : "row peak vs scale (no --src)";
  for (const DeepLayer& l : r.layers)
    fmt::print("layer {}: {} matrices, {} median {:.2f}%, max {:.2f}%\n", l.layer, l.errors.size(),
               metric, 100 * l.median, 100 * l.max);
  for (const std::string& p : r.problems) fmt::print(stderr, "bad record: {}\n", p);
  bool too_far = src && r.max >= kBadError;
  fmt::print("{}: {} layers decoded; {} median {:.2f}%, max {:.2f}%; {} bad records{}\n",
             c->dir().string(), r.layers.size(), metric, 100 * r.median, 100 * r.max,
             r.problems.size(), too_far ? "; some matrix is at or over the 30% bar" : "");
  return r.problems.empty() && !too_far ? 0 : 1;
}

}  // namespace waste::cli
