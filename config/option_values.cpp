#include "config/option_values.h"

#include <sstream>

#include "engine/base/error.h"

namespace waste {

int64_t option_int(const std::string& v, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != v.size()) fail<UsageError>("'{}' is not an integer", v);
  if (n < lo || n > hi) fail<UsageError>("{} is out of range ({}..{})", n, lo, hi);
  return n;
}

std::vector<std::string> option_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace waste
