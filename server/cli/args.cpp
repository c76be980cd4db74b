#include "server/cli/args.h"

#include <fmt/format.h>

namespace waste::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& valued,
           const std::set<std::string>& boolean) {
  for (int i = first; i < argc; i++) {
    std::string a = argv[i];
    if (a.size() > 1 && a[0] == '-' && a != "-") {
      std::string name = a, value;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
      }
      if (valued.count(name)) {
        if (eq == std::string::npos) {
          if (i + 1 >= argc) throw UsageFailure{fmt::format("{} needs a value", name)};
          value = argv[++i];
        }
      } else if (!boolean.count(name) || eq != std::string::npos) {
        throw UsageFailure{fmt::format("unknown option {}", a)};
      }
      values_[name] = value;
      all_[name].push_back(value);
    } else {
      positional_.push_back(a);
    }
  }
}

std::optional<std::string> Args::get(const std::string& flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Args::get_all(const std::string& flag) const {
  auto it = all_.find(flag);
  return it == all_.end() ? std::vector<std::string>{} : it->second;
}

std::string Args::get_or(const std::string& flag, const std::string& def) const {
  return get(flag).value_or(def);
}

int64_t Args::get_int(const std::string& flag, int64_t def, int64_t lo, int64_t hi) const {
  auto v = get(flag);
  if (!v) return def;
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(*v, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != v->size())
    throw UsageFailure{fmt::format("{}: '{}' is not an integer", flag, *v)};
  if (n < lo || n > hi)
    throw UsageFailure{fmt::format("{}: {} is out of range ({}..{})", flag, n, lo, hi)};
  return n;
}

}  // namespace waste::cli
