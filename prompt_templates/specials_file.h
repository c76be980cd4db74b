// Special-token lists from a container's specials.json or a release's tokenizer_config.json.
#pragma once

#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace waste {

// A specials.json array of {id, text}, or a tokenizer_config.json's added_tokens_decoder.
// Throws FormatError naming the file and what is missing.
std::vector<SpecialToken> read_specials_file(const std::string& path);

}  // namespace waste
