// Fuzzes the expert-record checks: any bytes must be accepted as a well-formed record or refused
// with a FormatError, and an accepted record's views must lie inside the buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/base/error.h"
#include "engine/format/expert_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  waste::RecordGeometry g;
  g.inter = 64;
  g.width = 128;
  g.stages = 3;
  g.entries = 256;
  g.stride = (g.used_bytes() + 4095) / 4096 * 4096;
  std::vector<uint8_t> rec(g.stride, 0);
  std::memcpy(rec.data(), data, size < rec.size() ? size : rec.size());
  bool crc = size > 0 && (data[0] & 1);
  try {
    waste::check_record(rec.data(), g, 3, 5, 18, crc);
    waste::ExpertView v = waste::view_record(rec.data(), g);
    const uint8_t* end = rec.data() + rec.size();
    const uint8_t* scales_end = reinterpret_cast<const uint8_t*>(v.down.scales + v.down.rows);
    if (scales_end > end || v.down.idx + g.down_bytes() > end) std::abort();
  } catch (const waste::FormatError&) {
  }
  return 0;
}
