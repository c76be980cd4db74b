#include "server/cli/args.h"

#include <fmt/format.h>

#include "config/option_values.h"
#include "engine/base/error.h"

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

namespace {

// The value of `flag` read by config/'s option reader (`def` when not given), its refusal
// naming the flag.
template <typename T, typename Read>
T read_flag(const Args& a, const std::string& flag, T def, Read read) {
  auto v = a.get(flag);
  if (!v) return def;
  try {
    return read(*v);
  } catch (const UsageError& e) {
    throw UsageFailure{fmt::format("{}: {}", flag, e.what())};
  }
}

}  // namespace

int64_t Args::get_int(const std::string& flag, int64_t def, int64_t lo, int64_t hi) const {
  return read_flag(*this, flag, def, [&](const std::string& v) { return option_int(v, lo, hi); });
}

double Args::get_number(const std::string& flag, double def, double lo, double hi) const {
  return read_flag(*this, flag, def,
                   [&](const std::string& v) { return option_number(v, lo, hi); });
}

}  // namespace waste::cli
