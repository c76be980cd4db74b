#include "server/prompt_cache/expert_usage_file.h"

#include "engine/base/error.h"
#include "server/prompt_cache/checked_file.h"

namespace waste {
namespace {

constexpr uint32_t kUsageMagic = 0x55435057;  // "WPCU"
constexpr uint32_t kUsageVersion = 1;

struct Entry {
  int32_t layer, expert;
  uint64_t uses;
};
static_assert(sizeof(Entry) == 16);

}  // namespace

void write_expert_usage(const std::filesystem::path& file, uint64_t fingerprint,
                        std::span<const ExpertUse> uses) {
  std::vector<Entry> entries;
  for (const ExpertUse& u : uses) entries.push_back({u.layer, u.expert, u.uses});
  CheckedHeader h;
  h.magic = kUsageMagic;
  h.version = kUsageVersion;
  h.fingerprint = fingerprint;
  h.a = (int64_t)entries.size();
  const FilePiece pieces[] = {piece(entries)};
  write_checked_file(file, h, pieces);
}

std::vector<ExpertUse> read_expert_usage(const std::filesystem::path& file, uint64_t fingerprint) {
  CheckedReader r(file);
  CheckedHeader h = r.header(kUsageMagic, kUsageVersion, fingerprint);
  if (h.a < 0 || (uint64_t)h.a != h.payload_bytes / sizeof(Entry) ||
      h.payload_bytes % sizeof(Entry))
    fail("{}: its header counts {} entries in {} bytes", file.string(), h.a, h.payload_bytes);
  std::vector<Entry> entries((size_t)h.a);
  r.read(entries, 0, entries.size());
  r.check_payload(h);
  std::vector<ExpertUse> out;
  for (const Entry& e : entries) out.push_back({e.layer, e.expert, e.uses});
  return out;
}

}  // namespace waste
