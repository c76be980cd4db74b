// Fuzzes the JSON Schema compiler and the grammar matcher: any schema text either compiles or is
// refused with SchemaError/UsageError, and a compiled one can be walked by masks over a small
// vocabulary without crashing, without an empty mask, and without a mask that disagrees with
// accept().
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "protocol/constraint/json_schema.h"
#include "protocol/constraint/token_constraint.h"

namespace {

// Every byte, some multi-byte tokens of the kinds JSON writers need, and an end token.
const waste::TokenIndex& vocabulary() {
  static waste::TokenIndex index = [] {
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, (char)b));
    for (const char* t : {"\":", "\",\"", "{\"", "\"}", "true", "null", "12", "-0.5", "e+1",
                          "\\u00", "\xc3\xa9", "\xe4\xb8", "abc", "]}", "2024-01-"})
      bytes.push_back(t);
    bytes.push_back("<|end|>");
    return waste::TokenIndex(bytes, {{"<|end|>", (int)bytes.size() - 1}});
  }();
  return index;
}

bool allowed(const std::vector<uint8_t>& m, int id) {
  return m[id >> 3] >> (id & 7) & 1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto g = std::make_shared<waste::Grammar>();
  try {
    int value = waste::compile_json_schema(*g, text);
    g->root = g->seq({value, g->literal("<|end|>")});
  } catch (const waste::UsageError&) {
    return 0;  // refused with a message: fine
  }
  const waste::TokenIndex& index = vocabulary();
  waste::TokenConstraint c(g, index);
  std::vector<uint8_t> mask(index.mask_bytes());
  uint64_t pick = size;
  for (int step = 0; step < 64 && !c.done(); ++step) {
    c.mask(mask.data());
    std::vector<int> ids;
    for (int id = 0; id < index.vocab(); ++id)
      if (allowed(mask, id)) ids.push_back(id);
    if (ids.empty()) __builtin_trap();  // the grammar painted itself into a corner
    // A refused id must be refused by accept() too.
    int refused = (int)(pick % (uint64_t)index.vocab());
    if (!allowed(mask, refused)) {
      waste::TokenConstraint probe = c;
      bool took = true;
      try {
        probe.accept(refused);
      } catch (const waste::UsageError&) {
        took = false;
      }
      if (took) __builtin_trap();
    }
    pick = pick * 6364136223846793005ull + 1442695040888963407ull;
    c.accept(ids[(pick >> 33) % ids.size()]);
  }
  return 0;
}
