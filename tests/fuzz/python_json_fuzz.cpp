// Fuzzes the Python-exact JSON reader and writer: any text loads or is refused with a
// UsageError; what loads dumps to text that loads to the same dump again (both styles).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "engine/base/error.h"
#include "protocol/json/python_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  waste::PyJson v;
  try {
    v = waste::py_loads(std::string_view((const char*)data, size));
  } catch (const waste::UsageError&) {
    return 0;
  }
  for (waste::PyDumpStyle style :
       {waste::PyDumpStyle{false, true, false}, waste::PyDumpStyle{true, false, true}}) {
    const std::string once = waste::py_dumps(v, style);
    const std::string twice = waste::py_dumps(waste::py_loads(once), style);
    if (once != twice) std::abort();
  }
  return 0;
}
