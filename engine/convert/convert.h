// `waste convert`: a release checkpoint (sharded safetensors) to a WASTE v0 container, natively
// (docs/CONVERTER.md §1-§4). Resumable at layer granularity: the trunk and each expert layer are
// committed (fsynced, renamed, then a .done record) before the next starts, so a crash redoes at
// most the piece in progress; the output is byte-identical whatever the thread count, the
// instruction set or the crash history. The manifest is published last.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/convert/vq_encode.h"
#include "engine/kernels/kernels.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste {

enum class Reclaim { kOff, kDry, kOn };

struct ConvertOptions {
  std::filesystem::path src;  // the release folder
  std::filesystem::path out;  // the container folder (created; resumed if it holds .convert/)
  int jobs = 0;               // threads; 0 = one per hardware thread
  Reclaim reclaim = Reclaim::kOff;
  std::string arch = "auto";  // auto | k3 | kimi-linear | deepseek-v3
  VqRecipe recipe;
  Isa isa = detect_isa();
  bool progress = true;     // a progress line with ETA on stderr
  bool check_space = true;  // refuse to start without room for the output
  // Reads the release's tokenizer_config.json specials (prompt_templates' read_specials_file);
  // unset: no specials.json.
  std::function<std::vector<SpecialToken>(const std::string& path)> read_specials;
  // Called at each commit step with its name; a test throws from it to simulate a crash there.
  // May be called from worker threads ("expert").
  std::function<void(const char* step)> step_hook;
  // Where log lines go (default: stderr).
  std::function<void(const std::string&)> log;
};

struct LayerReport {
  int layer = 0;
  bool resumed = false;        // found done from an earlier run
  std::vector<double> errors;  // relative Frobenius error per expert matrix
  double median = 0, max = 0;
};

struct ConvertReport {
  bool already_complete = false;
  bool trunk_resumed = false;
  int layers_converted = 0, layers_resumed = 0;
  std::vector<LayerReport> layers;
  double median_error = 0, max_error = 0;  // over every expert matrix
  std::vector<std::string> reclaimed;      // shards deleted (or, dry, that would be)
  uint64_t trunk_tensors = 0;
  double seconds = 0;
};

ConvertReport convert(const ConvertOptions& opt);

// The work folder inside the output while a conversion is unfinished.
constexpr const char* kConvertStateDir = ".convert";

}  // namespace waste
