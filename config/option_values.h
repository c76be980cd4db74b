// Reading option values from text, for the option tables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace waste {

// A decimal integer in [lo, hi]; UsageError saying what is wrong otherwise.
int64_t option_int(const std::string& v, int64_t lo, int64_t hi);
// A decimal number in [lo, hi]; UsageError saying what is wrong otherwise.
double option_number(const std::string& v, double lo, double hi);
// A comma-separated list; empty items are dropped.
std::vector<std::string> option_list(const std::string& v);

}  // namespace waste
