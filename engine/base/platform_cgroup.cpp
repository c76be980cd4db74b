// Linux's cgroup memory rule, as plain file reads: compiled on every OS so its tests run
// everywhere; only platform_linux.cpp applies it to the real hierarchy.
#include <fstream>
#include <optional>
#include <sstream>

#include "engine/base/platform.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

std::optional<uint64_t> read_limit(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  if (!(f >> s) || s == "max") return std::nullopt;
  try {
    uint64_t v = std::stoull(s);
    if (v >= (uint64_t{1} << 60)) return std::nullopt;  // v1's "unlimited" is a huge number
    return v;
  } catch (...) {
    return std::nullopt;
  }
}

// Walks from the process's cgroup up to the root, keeping the smallest limit found.
void lower_by(const fs::path& base, const std::string& rel, const char* const* files,
              UsableMemory* m) {
  fs::path p = base / fs::path(rel).relative_path();
  for (;;) {
    for (const char* const* f = files; *f; f++)
      if (auto v = read_limit(p / *f); v && *v < m->bytes) {
        m->bytes = *v;
        m->source = (p / *f).string();
      }
    if (p == base || !p.has_parent_path() || p.parent_path() == p) break;
    p = p.parent_path();
  }
}

}  // namespace

UsableMemory cgroup_limited(UsableMemory m, const fs::path& root, const fs::path& proc_cgroup) {
  std::ifstream f(proc_cgroup);
  std::string line;
  static const char* const kV2[] = {"memory.max", "memory.high", nullptr};
  static const char* const kV1[] = {"memory.limit_in_bytes", nullptr};
  while (std::getline(f, line)) {
    // "hierarchy-id:controllers:path"
    size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      lower_by(root, path, kV2, &m);
    } else {
      std::stringstream ss(controllers);
      std::string c;
      while (std::getline(ss, c, ','))
        if (c == "memory") lower_by(root / "memory", path, kV1, &m);
    }
  }
  return m;
}

}  // namespace waste
