// `waste cache [--prompt-cache-dir DIR] (ls | prune [--max BYTES] | clear)`: the prompt cache's
// disk tier as the daemon keeps it, one folder per model (its content fingerprint), seen and
// managed while the daemon is stopped (a running daemon's index does not see changes made here
// until it restarts).
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "config/serve_options.h"
#include "engine/experts/ram_budget.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/prompt_cache/disk_prefix_cache.h"

namespace waste::cli {
namespace {

namespace fs = std::filesystem;

// The model folders under `root`, by name.
std::vector<fs::path> model_folders(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && model_cache_fingerprint(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<DiskPrefixCache> open_folder(const fs::path& dir, uint64_t max_bytes,
                                             bool inspect_only) {
  DiskCacheOptions o;
  o.root = dir.parent_path();
  o.max_bytes = max_bytes;
  o.free_margin = 0;
  o.inspect_only = inspect_only;
  const uint64_t fp = *model_cache_fingerprint(dir);
  auto c = std::make_unique<DiskPrefixCache>(
      o, [fp] { return fp; }, [] { return Session(); });
  c->flush();
  return c;
}

std::string mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", bytes / 1048576.0);
}

}  // namespace

int cmd_cache(int argc, char** argv) {
  Args a(argc, argv, 2, {"--prompt-cache-dir", "--max"}, {});
  if (a.positional().size() != 1) throw UsageFailure{"expected one of ls, prune, clear"};
  const std::string what = a.positional()[0];
  const fs::path root = a.get_or("--prompt-cache-dir", default_prompt_cache_dir());
  if (root.empty())
    throw UsageFailure{"no --prompt-cache-dir, and neither XDG_CACHE_HOME nor HOME is set"};
  if (what != "ls" && what != "prune" && what != "clear")
    throw UsageFailure{fmt::format("'{}' is not ls, prune or clear", what)};
  if (a.has("--max") && what != "prune") throw UsageFailure{"--max goes with prune"};
  uint64_t max = 32ull << 30;
  if (auto m = a.get("--max")) {
    try {
      max = parse_bytes(*m);
    } catch (const std::exception& e) {
      throw UsageFailure{fmt::format("--max: {}", e.what())};
    }
  }
  uint64_t total = 0;
  for (const fs::path& dir : model_folders(root)) {
    if (what == "clear") {
      std::uintmax_t n = fs::remove_all(dir);
      fmt::print("{}: removed ({} files)\n", dir.string(), n ? n - 1 : 0);
      continue;
    }
    auto c = open_folder(dir, max, what == "ls");
    DiskCacheStats st = c->stats();
    total += st.bytes;
    fmt::print("{}: {} snapshots, {}{}\n", dir.string(), st.snapshots, mib(st.bytes),
               what == "prune" ? fmt::format(" after pruning ({} deleted)", st.evictions) : "");
    if (what != "ls") continue;
    for (const CachedSnapshot& s : c->snapshots())
      fmt::print("  {:>8} tokens  {:>10}  {} segments  {}\n", s.info.n_tokens, mib(s.bytes),
                 s.info.segments.size(), s.info.file_name());
  }
  if (what != "clear") fmt::print("total: {}\n", mib(total));
  return 0;
}

}  // namespace waste::cli
