#include "config/option_values.h"

#include <sstream>

#include "engine/base/error.h"

namespace waste {

namespace {

// All of `v` read by `read` (std::stoll, std::stod) and within [lo, hi] (NaN never is); else
// UsageError saying it is not `what` or is out of range.
template <typename T, typename Read>
T whole_value(const std::string& v, T lo, T hi, const char* what, Read read) {
  size_t used = 0;
  T x{};
  try {
    x = read(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != v.size()) fail<UsageError>("'{}' is not {}", v, what);
  if (!(x >= lo && x <= hi)) fail<UsageError>("{} is out of range ({}..{})", v, lo, hi);
  return x;
}

}  // namespace

int64_t option_int(const std::string& v, int64_t lo, int64_t hi) {
  return whole_value<int64_t>(v, lo, hi, "an integer", [](const std::string& s, size_t* used) {
    return std::stoll(s, used);
  });
}

double option_number(const std::string& v, double lo, double hi) {
  return whole_value<double>(v, lo, hi, "a number",
                             [](const std::string& s, size_t* used) { return std::stod(s, used); });
}

std::vector<std::string> option_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

}  // namespace waste
