// The options of an open model: every engine setting a user can choose, with one table of flags,
// environment variables, config-file keys, defaults and validation shared by `waste serve` and
// the model-running commands (run, eval, chat, bench). None of them changes a bit of the logits;
// they decide memory, threads and I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/experts/expert_cache.h"
#include "engine/experts/expert_store.h"

namespace waste {

struct EngineOptions {
  std::optional<uint64_t> budget;  // bytes of RAM; unset: the planner's default
  int64_t ctx = 0;                 // positions a session holds; 0: the RAM plan's default
  int threads = 0;                 // compute threads; 0: one per hardware thread
  int chunk = 0;                   // prompt tokens per prefill window (0: the RAM plan's)
  int lookahead = 6;               // next-layer experts prefetched per layer; 0: none
  int io_threads = 4;              // speculative expert reads in flight; 0: synchronous reads
  IoBackend io_backend = IoBackend::kUring;
  CachePolicy policy = CachePolicy::kLrfu;
  bool verify = false;  // check the CRC-32 of every expert record read
};

// One option's names and help: its flag, environment variable and config-file key.
struct OptionDoc {
  std::string flag, env, key, help;
};

// An option of some options struct T: how to document it and how to set it from text. Setters
// throw UsageError saying what is wrong with the value (the caller names the source).
template <class T>
struct Option {
  OptionDoc doc;
  std::function<void(T&, const std::string&)> set;
  bool boolean = false;  // a flag that may stand alone on the command line (then it is true)
};

const std::vector<Option<EngineOptions>>& engine_option_table();

// The words the command line takes as true or false.
bool parse_bool(const std::string& v);  // throws UsageError for anything else
bool is_bool_word(const std::string& v);

}  // namespace waste
