// `waste info` and `waste verify`: describe a container and check every expert record.
#include <cstdio>

#include <fmt/format.h>

#include "engine/base/human_bytes.h"
#include "engine/base/platform.h"
#include "engine/base/thread_pool.h"
#include "engine/experts/ram_budget.h"
#include "engine/format/container.h"
#include "engine/model/model_info.h"
#include "protocol/json/json_writer.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"

namespace waste::cli {

namespace {

std::string human_count(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f} M", n / 1e6);
  return fmt::format("{:.1f} K", n / 1e3);
}

std::string info_json(const Container& c, const ModelSummary& s) {
  const ModelConfig& cfg = c.config();
  JsonWriter w;
  w.begin_object();
  w.key("path").value(c.dir().string());
  w.key("arch").value(s.arch).key("architecture").value(s.architecture);
  w.key("family").value(s.family);
  w.key("layers").value(cfg.n_layers).key("kda_layers").value(s.n_kda);
  w.key("mla_layers").value(s.n_mla).key("moe_layers").value(s.n_moe);
  w.key("hidden").value(cfg.hidden).key("vocab").value(cfg.vocab);
  w.key("experts").value(cfg.n_experts).key("experts_per_token").value(cfg.top_k);
  w.key("params_total").value(s.params_total).key("params_active").value(s.params_active);
  w.key("trunk_formats").begin_object();
  for (auto& [f, n] : s.trunk_formats) w.key(f).value(n);
  w.end_object();
  w.key("expert_format").value(s.expert_format);
  w.key("files").begin_object();
  for (auto& [f, n] : s.file_bytes) w.key(f).value(n);
  w.end_object();
  w.key("container_bytes").value(s.container_bytes);
  const MemoryPlan& p = s.plan;
  w.key("ram").begin_object();
  w.key("ctx").value(p.ctx).key("trunk_bytes").value(p.trunk_bytes);
  w.key("state_bytes").value(p.state_bytes).key("scratch_bytes").value(p.scratch_bytes);
  w.key("record_bytes").value(p.record_bytes).key("working_set_bytes").value(p.working_set_bytes);
  w.key("floor_bytes").value(p.floor_bytes).key("vision_bytes").value(p.vision_bytes);
  w.end_object();
  w.key("tokenizer").value(c.tokenizer_path().has_value());
  w.key("specials").value((int64_t)c.specials().size());
  w.key("vision").value(c.vision_json().has_value());
  w.key("config").raw(c.manifest().config_json);
  w.end_object();
  return w.str();
}

void print_info(const Container& c, const ModelSummary& s) {
  const ModelConfig& cfg = c.config();
  fmt::print("{}\n", c.dir().string());
  fmt::print("  architecture  {} ({}, family {})\n", s.architecture.empty() ? "?" : s.architecture,
             s.arch, s.family);
  fmt::print("  layers        {} ({} KDA, {} MLA; {} MoE)\n", cfg.n_layers, s.n_kda, s.n_mla,
             s.n_moe);
  fmt::print("  hidden        {}   vocab {}\n", cfg.hidden, cfg.vocab);
  if (cfg.n_experts > 0)
    fmt::print("  experts       {} routed, {} per token, {} shared; {}\n", cfg.n_experts, cfg.top_k,
               cfg.n_shared, s.expert_format);
  fmt::print("  parameters    {} total, {} active per token\n", human_count(s.params_total),
             human_count(s.params_active));
  std::string formats;
  for (auto& [f, n] : s.trunk_formats) formats += fmt::format(" {} x{}", f, n);
  fmt::print("  trunk         {} tensors:{}\n", c.manifest().trunk.size(), formats);
  fmt::print("  files         {} in {} files\n", human_bytes(s.container_bytes),
             s.file_bytes.size());
  for (auto& [f, n] : s.file_bytes)
    if (f.rfind("experts-L", 0) != 0)
      fmt::print("                  {:<16} {}\n", f, human_bytes(n));
  const MemoryPlan& p = s.plan;
  fmt::print("  RAM floor     {} at ctx {} (trunk {}, state {}, scratch {}, experts {})\n",
             human_bytes(p.floor_bytes), p.ctx, human_bytes(p.trunk_bytes),
             human_bytes(p.state_bytes), human_bytes(p.scratch_bytes),
             human_bytes(p.min_cache_bytes));
  if (p.vision_bytes)
    fmt::print("  vision        {} of tensors outside the text prefix (loaded for images only)\n",
               human_bytes(p.vision_bytes));
  fmt::print("  working set   {} of experts per token ({} per record)\n",
             human_bytes(p.working_set_bytes), human_bytes(p.record_bytes));
  fmt::print("  side files    tokenizer {}, {} specials, vision {}\n",
             c.tokenizer_path() ? "yes" : "no", c.specials().size(),
             c.vision_json() ? "yes" : "no");
}

std::string one_model(const Args& a) {
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  return a.positional()[0];
}

}  // namespace

int cmd_info(int argc, char** argv) {
  Args a(argc, argv, 2, {"--ctx", "--threads"}, {"--json"});
  const EngineOptions eo = engine_options(a);
  OpenOptions opt;
  opt.load_trunk = false;
  auto c = Container::open(one_model(a), opt);
  const int threads = ThreadPool::resolve(eo.threads);
  const int64_t ctx =
      choose_context(c->manifest(), eo.ctx, eo.budget, usable_memory().bytes, threads);
  ModelSummary s = summarize(*c, ctx, threads);
  if (a.has("--json"))
    fmt::print("{}\n", info_json(*c, s));
  else
    print_info(*c, s);
  return 0;
}

int cmd_verify(int argc, char** argv) {
  for (int i = 2; i < argc; i++)
    if (std::string_view(argv[i]) == "--deep") return cmd_verify_deep(argc, argv);
  Args a(argc, argv, 2, {}, {});
  OpenOptions opt;
  opt.load_trunk = false;
  opt.verify_crc = true;
  auto c = Container::open(one_model(a), opt);
  auto problems = verify_records(*c);
  int64_t records = 0;
  for (auto& [l, b] : c->manifest().banks) records += b.experts;
  for (const std::string& p : problems) fmt::print(stderr, "bad record: {}\n", p);
  if (!problems.empty()) {
    fmt::print(stderr, "{}: {} of {} expert records failed verification\n", c->dir().string(),
               problems.size(), records);
    return 1;
  }
  fmt::print("{}: all {} expert records in {} banks verified (headers and CRC-32)\n",
             c->dir().string(), records, c->manifest().banks.size());
  return 0;
}

}  // namespace waste::cli
