// expert-usage.bin in a model's cache folder: how often each expert record was demanded, summed
// over the daemon's runs, so the next start warms its expert cache with the most used records
// (the daemon's counterpart of the original engine's --learn usage file). A checked file
// (checked_file.h): counts a = entries.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "engine/experts/expert_store.h"

namespace waste {

constexpr const char* kExpertUsageFile = "expert-usage.bin";

void write_expert_usage(const std::filesystem::path& file, uint64_t fingerprint,
                        std::span<const ExpertUse> uses);
// FormatError or IoError naming the file and what is wrong with it.
std::vector<ExpertUse> read_expert_usage(const std::filesystem::path& file, uint64_t fingerprint);

}  // namespace waste
