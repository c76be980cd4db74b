// The RAM plan of a container, derived from the manifest alone (no weights read): what must be
// resident (the floor), one token's expert working set, and the expert cache a budget leaves.
#pragma once

#include <cstdint>

#include "engine/format/manifest.h"

namespace waste {

struct MemoryPlan {
  int64_t ctx = 0;
  int threads = 0;                  // compute threads, each with its own attention buffers
  uint64_t trunk_bytes = 0;         // resident text tensors (a quantized embedding stays on disk)
  uint64_t vision_bytes = 0;        // tensors outside the prefix, loaded only for images
  uint64_t state_bytes = 0;         // KDA states, conv tails and MLA latents at ctx, per session
  uint64_t scratch_bytes = 0;       // activations (a 64-token window), tables, logits, and
                                    // every thread's attention buffers (those grow with ctx)
  uint64_t window_token_bytes = 0;  // what each token of a prefill window holds while it runs
  uint64_t record_bytes = 0;        // one expert record (the largest bank stride)
  uint64_t min_cache_bytes = 0;     // one layer's experts, double-buffered
  uint64_t working_set_bytes = 0;   // one token's experts across all MoE layers
  uint64_t floor_bytes = 0;
};

// The prefill window at the floor, and the most the planner gives (docs/MODEL.md §10).
constexpr int64_t kMinWindowTokens = 64;
// Attention and the dense FFNs read no experts; inside a window they run over pieces this long.
constexpr int64_t kPieceTokens = 64;
constexpr int64_t kMaxWindowTokens = 4096;
// MLA's unit of attention work: a thread scores this many heads of this many query tokens at a
// time against every earlier position, so its scores hold up to their product in rows of the
// context. The rows share each block of cached latents while it sits in L1.
constexpr int64_t kHeadsPerUnit = 8;
constexpr int64_t kQueriesPerUnit = 8;

// `threads`: the compute threads the engine runs (ThreadPool::resolve of the option).
MemoryPlan plan_memory(const Manifest& m, int64_t ctx, int threads);

}  // namespace waste
