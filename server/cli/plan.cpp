// `waste plan`: the RAM plan of a container at a context length and budget, from the manifest.
#include <fmt/format.h>

#include "engine/base/human_bytes.h"
#include "engine/base/platform.h"
#include "engine/base/thread_pool.h"
#include "engine/experts/planner.h"
#include "engine/experts/ram_budget.h"
#include "engine/format/container.h"
#include "protocol/json/json_writer.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace waste::cli {

int cmd_plan(int argc, char** argv) {
  Args a(argc, argv, 2, {"--ctx", "--budget", "--threads", "--parallel"}, {"--json"});
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  OpenOptions opt;
  opt.load_trunk = false;
  auto c = Container::open(a.positional()[0], opt);
  const EngineOptions eo = engine_options(a);
  UsableMemory usable = usable_memory();
  const int threads = ThreadPool::resolve(eo.threads);
  const int64_t ctx = choose_context(c->manifest(), eo.ctx, eo.budget, usable.bytes, threads);
  MemoryPlan p = plan_memory(c->manifest(), ctx, threads);
  Budget b = plan_budget(p, eo.budget, usable.bytes);
  uint64_t slots = p.record_bytes ? b.cache_bytes / p.record_bytes : 0;
  const int parallel = plan_parallel(p, b, (int)a.get_int("--parallel", 0, 1, 256));
  if (a.has("--json")) {
    JsonWriter w;
    w.begin_object();
    w.key("ctx").value(p.ctx).key("trunk_bytes").value(p.trunk_bytes);
    w.key("state_bytes").value(p.state_bytes).key("scratch_bytes").value(p.scratch_bytes);
    w.key("threads").value(p.threads);
    w.key("min_cache_bytes").value(p.min_cache_bytes).key("floor_bytes").value(p.floor_bytes);
    w.key("record_bytes").value(p.record_bytes).key("working_set_bytes").value(p.working_set_bytes);
    w.key("usable_bytes").value(usable.bytes).key("usable_source").value(usable.source);
    w.key("cap_bytes").value(b.cap).key("budget_bytes").value(b.budget);
    w.key("budget_explicit").value(b.explicit_budget).key("working_sets").value(b.working_sets);
    w.key("cache_bytes").value(b.cache_bytes).key("cache_slots").value(slots);
    w.key("window_tokens").value(b.window).key("window_token_bytes").value(p.window_token_bytes);
    w.key("parallel").value(parallel);
    fmt::print("{}\n", w.end_object().str());
    return 0;
  }
  fmt::print("{} at context {}\n", c->dir().string(), p.ctx);
  fmt::print("  trunk            {}\n", human_bytes(p.trunk_bytes));
  fmt::print("  session state    {}\n", human_bytes(p.state_bytes));
  fmt::print("  scratch          {} ({} compute threads)\n", human_bytes(p.scratch_bytes),
             p.threads);
  fmt::print("  minimum cache    {} (one layer's {} experts, double-buffered)\n",
             human_bytes(p.min_cache_bytes), c->config().top_k);
  fmt::print("  floor            {}\n", human_bytes(p.floor_bytes));
  fmt::print("  working set      {} per token ({} per record)\n", human_bytes(p.working_set_bytes),
             human_bytes(p.record_bytes));
  fmt::print("  usable memory    {} ({}); cap 7/8 = {}\n", human_bytes(usable.bytes), usable.source,
             human_bytes(b.cap));
  if (b.explicit_budget)
    fmt::print("  budget           {} (given)\n", human_bytes(b.budget));
  else
    fmt::print("  budget           {} (floor + {} working sets)\n", human_bytes(b.budget),
               b.working_sets);
  fmt::print("  prefill window   {} tokens ({} per token; the floor holds {})\n", b.window,
             human_bytes(p.window_token_bytes), kMinWindowTokens);
  fmt::print("  expert cache     {} = {} records\n", human_bytes(b.cache_bytes), slots);
  fmt::print(
      "  conversations    {} at once ({} of session state each beyond the first, beside "
      "the budget)\n",
      parallel, human_bytes(p.state_bytes));
  return 0;
}

}  // namespace waste::cli
