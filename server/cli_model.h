// What the model-running commands share: opening a container with its tokenizer, and turning a
// PROMPT or --ids argument into token ids.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/container.h"
#include "engine/model.h"
#include "engine/ram_budget.h"
#include "engine/tokenizer.h"
#include "server/cli_args.h"

namespace waste::cli {

struct LoadedModel {
  std::unique_ptr<Container> container;
  MemoryPlan plan;
  Budget budget;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the container has none
};

// Reads --threads, --chunk, --ctx, --budget, --lookahead (or WASTE_LOOKAHEAD), --io-threads,
// --policy and --verify from `a`. The budget is planned, and refused, before any weight loads.
LoadedModel load_model(const std::string& path, const Args& a);

// --ids 1,2,3 or the single PROMPT positional after MODEL (text mode: special-token strings stay
// text). "-" reads the prompt from standard input.
std::vector<int32_t> prompt_ids(const LoadedModel& m, const Args& a);

std::string decode_text(const LoadedModel& m, const std::vector<int32_t>& ids);

int64_t context_length(const Args& a);                    // --ctx, default 4096
std::optional<uint64_t> requested_budget(const Args& a);  // --budget

// From MODEL (the positional at `model_index`: its tokenizer.model and specials.json) or
// --tokenizer FILE (+ --specials FILE: a tokenizer_config.json or a specials.json).
std::unique_ptr<Tokenizer> open_tokenizer(const Args& a, size_t model_index);

// Flags the model-running commands all accept.
extern const std::set<std::string> kModelValuedFlags;

}  // namespace waste::cli
