// The side files of a converted container, made from the release's own files (docs/CONVERTER.md
// §1.6): tokenizer.model, specials.json, chat_template.jinja and vision.json.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/convert/convert_plan.h"
#include "engine/tokenizer/tokenizer.h"

namespace waste {

using SpecialsReader = std::function<std::vector<SpecialToken>(const std::string& path)>;

// Writes each file atomically into `out`; `log` gets a line for each input that is missing.
void write_side_files(const std::filesystem::path& src, const std::filesystem::path& out,
                      const ConvertPlan& plan, const SpecialsReader& read_specials,
                      const std::function<void(const std::string&)>& log);

}  // namespace waste
