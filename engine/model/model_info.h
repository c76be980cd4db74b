// What `waste info` reports about a container: architecture, parameter counts, formats, sizes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/experts/planner.h"
#include "engine/format/container.h"

namespace waste {

struct ModelSummary {
  std::string arch;          // manifest arch
  std::string architecture;  // from config
  std::string family;        // "k3", "kimi-linear" or "deepseek-v3"
  int64_t params_total = 0;
  int64_t params_active = 0;  // per token: trunk without the embedding table + top_k experts/layer
  std::map<std::string, int64_t> trunk_formats;  // format name -> tensor count
  std::string expert_format;
  std::map<std::string, uint64_t> file_bytes;  // file name -> size
  uint64_t container_bytes = 0;
  MemoryPlan plan;
  int n_kda = 0, n_mla = 0, n_moe = 0;
};

// `threads` as plan_memory's.
ModelSummary summarize(const Container& c, int64_t ctx, int threads);

// Checks every expert record's header and CRC. Returns one line per bad record, naming the
// layer, expert and byte offset; `progress` is called after each bank.
std::vector<std::string> verify_records(const Container& c,
                                        void (*progress)(int layer, void* arg) = nullptr,
                                        void* arg = nullptr);

}  // namespace waste
