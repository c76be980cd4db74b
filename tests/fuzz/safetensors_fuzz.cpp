// Fuzzes the safetensors header parser (a checkpoint shard's JSON header and its tensor table):
// anything must parse into consistent tensors or be refused with a FormatError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/base/error.h"
#include "engine/convert/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json((const char*)data, size);
  try {
    // A shard described by its header alone, as a reclaimed one is: sized to hold 1 MiB of data.
    waste::SafetensorsFile f("fuzz.safetensors", 8 + json.size() + (1u << 20), json);
    for (const auto& [name, t] : f.tensors()) (void)t.elements();
  } catch (const waste::FormatError&) {
  }
  return 0;
}
