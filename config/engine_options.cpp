#include "config/engine_options.h"

#include "config/option_values.h"
#include "engine/base/error.h"
#include "engine/experts/ram_budget.h"

namespace waste {

bool is_bool_word(const std::string& v) {
  for (const char* w : {"1", "true", "on", "yes", "0", "false", "off", "no"})
    if (v == w) return true;
  return false;
}

bool parse_bool(const std::string& v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail<UsageError>("'{}' is not true or false", v);
}

const std::vector<Option<EngineOptions>>& engine_option_table() {
  using E = EngineOptions;
  static const std::vector<Option<E>> kOptions = {
      {{"--budget", "WASTE_BUDGET", "budget", "RAM budget, e.g. 48G (default: planned)"},
       [](E& o, const std::string& v) { o.budget = parse_bytes(v); }},
      {{"--ctx", "WASTE_CTX", "ctx",
        "positions per conversation (default: the largest the RAM plan holds)"},
       [](E& o, const std::string& v) { o.ctx = option_int(v, 1, int64_t{1} << 24); }},
      {{"--threads", "WASTE_THREADS", "threads",
        "compute threads (default: every core this process may use; on macOS the performance "
        "cores)"},
       [](E& o, const std::string& v) { o.threads = (int)option_int(v, 0, 1024); }},
      {{"--chunk", "WASTE_CHUNK", "chunk",
        "prompt tokens per prefill window, each layer's experts read once for all of them "
        "(default 0: as many as a quarter of the RAM above the floor holds, 64 to 4096)"},
       [](E& o, const std::string& v) { o.chunk = (int)option_int(v, 0, 4096); }},
      {{"--lookahead", "WASTE_LOOKAHEAD", "lookahead", "experts prefetched per layer (default 6)"},
       [](E& o, const std::string& v) { o.lookahead = (int)option_int(v, 0, 64); }},
      {{"--io-threads", "WASTE_IO_THREADS", "io_threads",
        "speculative expert reads in flight (default 4; 0 reads synchronously)"},
       [](E& o, const std::string& v) { o.io_threads = (int)option_int(v, 0, 64); }},
      {{"--io-backend", "WASTE_IO_BACKEND", "io_backend",
        "expert reader: uring (default where the kernel allows it) or threads"},
       [](E& o, const std::string& v) {
         if (v != "uring" && v != "threads") fail<UsageError>("'{}' is not uring or threads", v);
         o.io_backend = v == "uring" ? IoBackend::kUring : IoBackend::kThreads;
       }},
      {{"--policy", "WASTE_POLICY", "policy",
        "expert cache policy: lru, lfru, lfu or lrfu (default)"},
       [](E& o, const std::string& v) { o.policy = parse_policy(v); }},
      {{"--verify", "WASTE_VERIFY", "verify", "check the CRC-32 of every expert record read"},
       [](E& o, const std::string& v) { o.verify = parse_bool(v); },
       true},
  };
  return kOptions;
}

}  // namespace waste
