// Fuzzes the manifest parser: any input must either parse or be refused with a FormatError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/base/error.h"
#include "engine/experts/planner.h"
#include "engine/format/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    waste::Manifest m =
        waste::parse_manifest(std::string_view((const char*)data, size), "manifest.json");
    // A manifest that parses must plan without overflow traps or crashes.
    waste::plan_memory(m, 4096, 2);
  } catch (const waste::FormatError&) {
  }
  return 0;
}
