#include "server/api/metrics.h"

#include <functional>

#include <fmt/format.h>

namespace waste {

namespace {

using MetricWriter =
    std::function<void(const char* name, const char* type, const char* help, double v)>;

// The prompt cache: per-tier series with a `tier` label (memory, disk), then the disk's own.
void prompt_cache_metrics(const PrefixCache& cache, const MetricWriter& metric, std::string* out) {
  const MemoryCacheStats m = cache.memory_stats();
  const DiskPrefixCache* disk = cache.disk();
  const DiskCacheStats d = disk ? disk->stats() : DiskCacheStats{};
  auto tiered = [&](const char* name, const char* type, const char* help, uint64_t mem,
                    uint64_t on_disk) {
    *out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0}{{tier=\"memory\"}} {3}\n", name, help,
                        type, mem);
    if (disk) *out += fmt::format("{}{{tier=\"disk\"}} {}\n", name, on_disk);
  };
  tiered("waste_prompt_cache_hits_total", "counter", "prompts that restored a snapshot", m.hits,
         d.hits);
  tiered("waste_prompt_cache_tokens_reused_total", "counter", "prompt tokens restored",
         m.tokens_reused, d.tokens_reused);
  tiered("waste_prompt_cache_evictions_total", "counter", "snapshots deleted to stay in bounds",
         m.evictions, d.evictions);
  tiered("waste_prompt_cache_bytes", "gauge", "bytes the snapshots take", m.bytes, d.bytes);
  tiered("waste_prompt_cache_snapshots", "gauge", "snapshots kept", m.snapshots, d.snapshots);
  metric("waste_prompt_cache_misses_total", "counter", "prompts no snapshot served",
         (double)m.misses);
  if (!disk) return;
  metric("waste_prompt_cache_disk_writes_total", "counter", "snapshots written", (double)d.writes);
  metric("waste_prompt_cache_disk_dropped_writes_total", "counter",
         "snapshots not written (backlog full, or larger than the bound)",
         (double)d.dropped_writes);
  metric("waste_prompt_cache_disk_skipped_files_total", "counter",
         "files that failed their checks and were deleted", (double)d.skipped_files);
  metric("waste_prompt_cache_disk_ready", "gauge",
         "1 once the folder is scanned, while the tier is on", d.ready && d.enabled ? 1 : 0);
}

// The engine's counters, the expert cache's and the prompt cache's.
void model_metrics(const ServingModel& model, const MetricWriter& metric, std::string* out) {
  const EngineWorker& worker = model.worker;
  const WorkerCounters& c = worker.counters();
  const ExpertStats st = model.host.model().expert_stats();
  const ExpertSharing sharing = model.host.model().expert_sharing();
  const StepCounters steps = worker.step_counters();
  const double decode_s = (double)c.decode_micros / 1e6;
  struct Series {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Series series[] = {
      {"waste_requests_total", "counter", "generation requests taken by the engine",
       (double)c.requests},
      {"waste_requests_failed_total", "counter", "requests that failed in the engine",
       (double)c.failed},
      {"waste_requests_cancelled_total", "counter", "requests whose client went away",
       (double)c.cancelled},
      {"waste_prompt_tokens_total", "counter", "prompt tokens", (double)c.prompt_tokens},
      {"waste_cached_prompt_tokens_total", "counter", "prompt tokens restored from snapshots",
       (double)c.cached_tokens},
      {"waste_completion_tokens_total", "counter", "generated tokens", (double)c.completion_tokens},
      {"waste_decode_tokens_per_second", "gauge", "generated tokens per second of decoding",
       decode_s > 0 ? (double)c.completion_tokens / decode_s : 0},
      {"waste_queue_depth", "gauge", "requests waiting for a slot", (double)worker.queue_depth()},
      {"waste_queue_seconds_total", "counter", "time requests waited for a slot, summed",
       (double)c.queue_micros / 1e6},
      {"waste_busy", "gauge", "1 while a request is generating", worker.busy() ? 1.0 : 0.0},
      {"waste_slots", "gauge", "conversations that may run at once (--parallel)",
       (double)worker.slots()},
      {"waste_slots_busy", "gauge", "slots running a request", (double)worker.busy_slots()},
      {"waste_steps_total", "counter", "forward passes (shared steps) run", (double)steps.steps},
      {"waste_step_tokens_total", "counter", "tokens run in steps, summed (per step: / steps)",
       (double)steps.tokens},
      {"waste_step_conversations_total", "counter",
       "conversations in steps, summed (per step: / steps)", (double)steps.pieces},
      {"waste_step_expert_records_total", "counter",
       "distinct experts each step needed, per MoE layer, summed", (double)sharing.distinct},
      {"waste_step_expert_uses_total", "counter",
       "experts the steps' tokens chose, summed: what each token alone would read",
       (double)sharing.uses},
      {"waste_expert_cache_hits_total", "counter", "expert records found in RAM", (double)st.hits},
      {"waste_expert_cache_misses_total", "counter", "expert records read from disk",
       (double)st.misses},
      {"waste_expert_bytes_read_total", "counter", "bytes of expert records read",
       (double)st.bytes_read},
      {"waste_expert_cache_warmed_records", "gauge",
       "expert records read into the cache at start from earlier runs' counts", (double)st.warmed},
      {"waste_expert_cache_warm_seconds", "gauge", "how long warming the expert cache took",
       st.warm_seconds},
  };
  for (const Series& m : series) metric(m.name, m.type, m.help, m.value);
  prompt_cache_metrics(worker.prefix_cache(), metric, out);
}

}  // namespace

std::string metrics_text(const ServingModel* model, uint64_t rejected,
                         const http::ServerStats& http) {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, v);
  };
  metric("waste_ready", "gauge", "1 once the model is loaded", model ? 1 : 0);
  metric("waste_requests_rejected_total", "counter", "requests refused with 429 (queue full)",
         (double)rejected);
  metric("waste_http_idle_connections_evicted_total", "counter",
         "idle connections closed at --max-connections to admit a new one",
         (double)http.idle_connections_evicted);
  if (model) model_metrics(*model, metric, &out);
  return out;
}

}  // namespace waste
