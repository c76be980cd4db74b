// What the model-running commands (run, eval, chat, bench) share: the engine options from the
// environment and their flags (the table `waste serve` uses, config/engine_options.h), opening
// the model through ModelHost, the end rules, and the prompt given as text or --ids.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "config/engine_options.h"
#include "engine/tokenizer/tokenizer.h"
#include "protocol/json/json_writer.h"
#include "server/cli/args.h"
#include "server/runtime/model_host.h"

namespace waste::cli {

// The engine's valued flags and --ids, plus `extra`; and the engine's boolean flags (--verify),
// plus `extra`. For a command's Args.
std::set<std::string> model_valued_flags(std::set<std::string> extra);
std::set<std::string> model_boolean_flags(std::set<std::string> extra);

// The process environment as a map, for the WASTE_* variables.
std::map<std::string, std::string> environment();

// WASTE_* variables first, then the flags of `a`; UsageFailure naming the option and the source.
EngineOptions engine_options(const Args& a);

// Opens MODEL with the engine options of `a`. The budget is planned, and refused, before any
// weight loads.
std::unique_ptr<ModelHost> open_model(const std::string& path, const Args& a);

// The ids that end a reply: the family's end-of-message tokens and eos (eos alone without a
// tokenizer).
std::vector<int32_t> end_ids(const ModelHost& m);

// --ids 1,2,3 or the single PROMPT positional after MODEL (text mode: special-token strings stay
// text). "-" reads the prompt from standard input.
std::vector<int32_t> prompt_ids(const ModelHost& m, const Args& a);

std::string decode_text(const ModelHost& m, const std::vector<int32_t>& ids);

// All of standard input, for a TEXT or PROMPT of "-" and `waste render`'s request.
std::string read_stdin();

// `"token_ids": [...]` inside the object `w` is writing.
void write_token_ids(JsonWriter& w, std::span<const int32_t> ids);

// From MODEL (the positional at `model_index`: its tokenizer.model and specials.json) or
// --tokenizer FILE (+ --specials FILE: a tokenizer_config.json or a specials.json; without it,
// the tokenizer_config.json or specials.json beside FILE, when there is one).
std::unique_ptr<Tokenizer> open_tokenizer(const Args& a, size_t model_index);

}  // namespace waste::cli
