// `waste bench`: decode and prefill speed on a container, each figure beside the floor measured
// in the same run (random direct-read bandwidth at the record size, and compute time per token
// with every expert resident).
#include <algorithm>
#include <chrono>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/human_bytes.h"
#include "engine/base/stopwatch.h"
#include "engine/experts/disk_bench.h"
#include "protocol/json/json_writer.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"
#include "server/runtime/decoder.h"

namespace waste::cli {

namespace {

std::vector<int32_t> bench_prompt(int n, int vocab) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; i++) ids.push_back((int32_t)((1009 * i + 17) % vocab));
  return ids;
}

struct DecodeRun {
  std::vector<int32_t> tokens;  // fed one at a time
  double seconds = 0;
  ExpertStats stats;
  LookaheadStats lookahead;
};

class NoSink final : public ReplySink {
 public:
  void on_event(const ReplyEvent&) override {}
};

// Greedy decode of `n` tokens after a one-token start, through the Decoder; `follow` feeds a
// fixed token list instead (so two models see the same routing).
DecodeRun decode(Model& m, int n, const std::vector<int32_t>* follow) {
  DecodeRun r;
  DecodeInput in;
  in.prompt = {follow ? (*follow)[0] : 1};
  in.sampler.temperature = 0;
  in.max_new = n;
  // Every fed token after the first, then one more that is never fed (n forward passes in all).
  if (follow) in.forced.assign(follow->begin() + 1, follow->end());
  if (follow) in.forced.push_back(0);
  Session s = m.new_session(n + 2);
  Decoder decoder(m, nullptr);
  NoSink sink;
  ExpertStats before = m.expert_stats();
  LookaheadStats la_before = m.lookahead_stats();
  DecodeResult d = decoder.run(s, in, nullptr, sink);
  r.seconds = d.prefill_seconds + d.decode_seconds;
  r.tokens = in.prompt;
  r.tokens.insert(r.tokens.end(), d.tokens.begin(), d.tokens.end() - 1);
  ExpertStats after = m.expert_stats();
  r.stats = after;
  r.stats.hits -= before.hits;
  r.stats.misses -= before.misses;
  r.stats.bytes_read -= before.bytes_read;
  r.stats.prefetched -= before.prefetched;
  r.stats.read_seconds -= before.read_seconds;
  r.stats.wait_seconds -= before.wait_seconds;
  r.lookahead.predicted = m.lookahead_stats().predicted - la_before.predicted;
  r.lookahead.correct = m.lookahead_stats().correct - la_before.correct;
  return r;
}

// A prefill of `p` tokens through the Decoder (the last position's logits included).
double prefill(Model& m, int p) {
  DecodeInput in;
  in.prompt = bench_prompt(p, m.config().vocab);
  Session s = m.new_session(p + 1);
  Decoder decoder(m, nullptr);
  NoSink sink;
  return decoder.run(s, in, nullptr, sink).prefill_seconds;
}

// Milliseconds per token in each layer between two readings of the model's layer clocks.
std::vector<double> per_token_ms(const std::vector<double>& from, const std::vector<double>& to,
                                 int tokens) {
  std::vector<double> out(from.size());
  for (size_t l = 0; l < from.size(); l++) out[l] = tokens ? 1e3 * (to[l] - from[l]) / tokens : 0;
  return out;
}

std::string layer_kind(const ModelConfig& c, int l) {
  return fmt::format("{} {}", c.is_kda[l] ? "KDA" : "MLA", c.is_moe_layer(l) ? "MoE" : "dense");
}

// The release a short shape container (`waste synth --preset k3-shape|k2-shape`) stands for:
// how many of its layers are dense, KDA MoE and MLA MoE.
struct ReleaseShape {
  const char* name;
  const char* json_key;
  int layers, dense, kda_moe, mla_moe;
};

constexpr ReleaseShape kK3Release{"K3", "k3_93_layers_extrapolated", 93, 1, 68, 24};
constexpr ReleaseShape kK2Release{"Kimi K2", "k2_61_layers_extrapolated", 61, 1, 0, 60};

// Null unless the container is one of those releases' shapes cut short and has an MoE layer to
// measure.
const ReleaseShape* release_shape(const ModelConfig& c) {
  const ReleaseShape* r = nullptr;
  if (c.arch() == Arch::kK3 && c.n_experts == 896) r = &kK3Release;
  if (c.arch() == Arch::kDeepSeekV3 && c.n_experts == 384 && c.hidden == 7168) r = &kK2Release;
  if (!r || c.n_layers >= r->layers || c.n_layers <= c.first_dense) return nullptr;
  return r;
}

// Each kind of layer costs this run's mean over the container's layers of that kind (a kind the
// container lacks as the other MoE kind), plus what runs outside the layers once. Milliseconds
// per token.
struct Extrapolation {
  double ms = 0;
  bool substituted = false;  // the release has a kind of MoE layer this container lacks
};

Extrapolation extrapolate(const ReleaseShape& r, const ModelConfig& c,
                          const std::vector<double>& ms, double total_ms) {
  double sum[3] = {0, 0, 0}, outside = total_ms;
  int count[3] = {0, 0, 0};  // dense, KDA MoE, MLA MoE
  for (int l = 0; l < c.n_layers; l++) {
    int k = !c.is_moe_layer(l) ? 0 : c.is_kda[l] ? 1 : 2;
    sum[k] += ms[l];
    count[k]++;
    outside -= ms[l];
  }
  auto mean = [&](int k) { return count[k] ? sum[k] / count[k] : 0.0; };
  const double kda = count[1] ? mean(1) : mean(2), mla = count[2] ? mean(2) : mean(1);
  Extrapolation e;
  e.substituted = (r.kda_moe > 0 && !count[1]) || (r.mla_moe > 0 && !count[2]);
  e.ms = outside + r.dense * mean(0) + r.kda_moe * kda + r.mla_moe * mla;
  return e;
}

void print_extrapolation(const ReleaseShape& r, int measured_layers, const Extrapolation& decode,
                         const Extrapolation& prefill) {
  std::string kinds = fmt::format("{} dense", r.dense);
  if (r.kda_moe) kinds += fmt::format(" + {} KDA MoE", r.kda_moe);
  if (r.mla_moe) kinds += fmt::format(" + {} MLA MoE", r.mla_moe);
  fmt::print(
      "{} at {} layers, extrapolated from these {} ({}, each kind at this run's mean{}): decode "
      "{:.2f} s/token ({:.3f} tok/s), prefill {:.3f} tok/s\n",
      r.name, r.layers, measured_layers, kinds,
      decode.substituted ? "; a kind absent here taken as the other MoE kind" : "", decode.ms / 1e3,
      1e3 / decode.ms, prefill.ms > 0 ? 1e3 / prefill.ms : 0.0);
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  for (int i = 2; i < argc; i++)
    if (std::string_view(argv[i]) == "--kernels") return cmd_bench_kernels(argc, argv);
  Args a(argc, argv, 2, model_valued_flags({"--tokens", "--prompt-tokens", "--disk-reads"}),
         model_boolean_flags({"--json", "--no-resident"}));
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  int n = (int)a.get_int("--tokens", 16, 1, 100000);
  int p = (int)a.get_int("--prompt-tokens", 64, 0, 100000);
  auto host = open_model(a.positional()[0], a);
  Model& model = host->model();
  const ModelConfig& cfg = model.config();
  const ModelOptions& mo = model.options();

  // Floor 1: the disk at the record size, with as many readers as the store uses, measured
  // right before and right after decode and pooled: this disk's speed drifts minute to minute.
  int disk_reads = (int)a.get_int("--disk-reads", 64, 1, 1 << 20);
  const int readers = std::max(1, mo.store.io_threads);
  DiskBench before = measure_record_reads(host->container(), disk_reads, readers, 7);

  // The measured run: decode under the planned budget, then prefill.
  const std::vector<double> clock0 = model.layer_seconds();
  DecodeRun run = decode(model, n, nullptr);
  const std::vector<double> clock1 = model.layer_seconds();
  DiskBench after = measure_record_reads(host->container(), disk_reads, readers, 8);
  DiskBench disk{before.reads + after.reads, before.bytes + after.bytes,
                 before.seconds + after.seconds};
  double prefill_s = 0;
  if (p > 0) prefill_s = prefill(model, p);
  const std::vector<double> decode_ms = per_token_ms(clock0, clock1, n);
  const std::vector<double> prefill_ms = per_token_ms(clock1, model.layer_seconds(), p);
  const ReleaseShape* release = release_shape(cfg);
  Extrapolation ex_decode, ex_prefill;
  if (release) {
    ex_decode = extrapolate(*release, cfg, decode_ms, 1e3 * run.seconds / n);
    ex_prefill = extrapolate(*release, cfg, prefill_ms, p > 0 ? 1e3 * prefill_s / p : 0);
  }

  // Floor 2: the same tokens with every expert they touch resident (a second pass over a cache
  // big enough to hold them), so only compute remains.
  double resident_s = 0;
  if (!a.has("--no-resident")) {
    ModelOptions ro = mo;
    ro.store.cache_bytes = (uint64_t)n * cfg.top_k * host->container().manifest().banks.size() *
                           host->plan().record_bytes;
    Model resident(host->container(), ro);
    decode(resident, n, &run.tokens);
    resident_s = decode(resident, n, &run.tokens).seconds;
  }

  double per_token = run.seconds / n;
  double bytes_per_token = (double)run.stats.bytes_read / n;
  double io_floor = disk.gbps() > 0 ? bytes_per_token / (disk.gbps() * 1e9) : 0;
  double compute_floor = resident_s / n;
  double floor = std::max(io_floor, compute_floor);
  uint64_t demands = run.stats.hits + run.stats.misses;
  JsonWriter w;
  w.begin_object();
  w.key("tokens").value(n).key("prompt_tokens").value(p);
  w.key("budget_bytes")
      .value(host->budget().budget)
      .key("cache_bytes")
      .value(host->budget().cache_bytes);
  w.key("record_bytes").value(host->plan().record_bytes);
  w.key("working_set_bytes").value(host->plan().working_set_bytes);
  w.key("io_threads").value(mo.store.io_threads).key("lookahead").value(mo.lookahead);
  w.key("io_backend").value(mo.store.backend == IoBackend::kUring ? "uring" : "threads");
  w.key("threads").value(model.threads()).key("policy").value(policy_name(mo.store.policy));
  w.key("decode_tokens_per_second").value(n / run.seconds);
  w.key("prefill_tokens_per_second").value(prefill_s > 0 ? p / prefill_s : 0.0);
  w.key("hit_rate").value(demands ? (double)run.stats.hits / demands : 0.0);
  w.key("bytes_read_per_token").value(bytes_per_token);
  w.key("achieved_read_gbps").value((double)run.stats.bytes_read / run.seconds / 1e9);
  w.key("wait_seconds_per_token").value(run.stats.wait_seconds / n);
  w.key("lookahead_accuracy")
      .value(run.lookahead.predicted ? (double)run.lookahead.correct / run.lookahead.predicted
                                     : 0.0);
  w.key("disk_gbps").value(disk.gbps());
  w.key("disk_gbps_before").value(before.gbps()).key("disk_gbps_after").value(after.gbps());
  w.key("floor_io_seconds_per_token").value(io_floor);
  w.key("floor_compute_seconds_per_token").value(compute_floor);
  w.key("seconds_per_token").value(per_token);
  w.key("floor_ratio").value(per_token > 0 ? floor / per_token : 0.0);
  w.key("layers").begin_array();
  for (int l = 0; l < cfg.n_layers; l++)
    w.begin_object()
        .key("layer")
        .value(l + 1)
        .key("kind")
        .value(layer_kind(cfg, l))
        .key("decode_ms_per_token")
        .value(decode_ms[l])
        .key("prefill_ms_per_token")
        .value(prefill_ms[l])
        .end_object();
  w.end_array();
  if (release) {
    w.key(release->json_key).begin_object();
    w.key("decode_seconds_per_token").value(ex_decode.ms / 1e3);
    w.key("prefill_tokens_per_second").value(ex_prefill.ms > 0 ? 1e3 / ex_prefill.ms : 0.0);
    w.key("every_kind_measured").value(!ex_decode.substituted);
    w.end_object();
  }
  w.end_object();
  if (a.has("--json")) {
    fmt::print("{}\n", w.str());
    return 0;
  }
  fmt::print("decode   {:.3f} tok/s ({:.1f} ms/token) over {} tokens\n", n / run.seconds,
             1e3 * per_token, n);
  if (p > 0) fmt::print("prefill  {:.2f} tok/s over {} tokens\n", p / prefill_s, p);
  fmt::print("cache    {} = {} records, hit rate {:.1f}%, {:.1f} MB read per token\n",
             human_bytes(host->budget().cache_bytes),
             host->budget().cache_bytes / std::max<uint64_t>(host->plan().record_bytes, 1),
             demands ? 100.0 * run.stats.hits / demands : 0.0, bytes_per_token / 1e6);
  fmt::print(
      "reads    {:.2f} GB/s achieved; disk floor {:.2f} GB/s ({:.2f} before decode, {:.2f} after; "
      "{} random records, {} readers)\n",
      (double)run.stats.bytes_read / run.seconds / 1e9, disk.gbps(), before.gbps(), after.gbps(),
      disk.reads, readers);
  fmt::print("lookahead {:.1f}% of {} predictions right\n",
             run.lookahead.predicted ? 100.0 * run.lookahead.correct / run.lookahead.predicted : 0,
             run.lookahead.predicted);
  fmt::print(
      "floor    {:.1f} ms/token (I/O {:.1f}, resident compute {:.1f}); decode at {:.0f}% of "
      "floor\n",
      1e3 * floor, 1e3 * io_floor, 1e3 * compute_floor,
      per_token > 0 ? 100 * floor / per_token : 0);
  fmt::print("layers   ms per token (decode, prefill):");
  for (int l = 0; l < cfg.n_layers; l++)
    fmt::print("{}{} {}: {:.1f}, {:.1f}", l % 4 ? "; " : "\n  ", l + 1, layer_kind(cfg, l),
               decode_ms[l], prefill_ms[l]);
  fmt::print("\n");
  if (release) print_extrapolation(*release, cfg.n_layers, ex_decode, ex_prefill);
  return 0;
}

}  // namespace waste::cli
