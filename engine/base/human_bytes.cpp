#include "engine/base/human_bytes.h"

#include <fmt/format.h>

namespace waste {

std::string human_bytes(uint64_t n) {
  if (n >= (1ull << 30)) return fmt::format("{:.2f} GiB", (double)n / (1ull << 30));
  if (n >= (1ull << 20)) return fmt::format("{:.2f} MiB", (double)n / (1ull << 20));
  if (n >= (1ull << 10)) return fmt::format("{:.1f} KiB", (double)n / (1ull << 10));
  return fmt::format("{} B", n);
}

}  // namespace waste
