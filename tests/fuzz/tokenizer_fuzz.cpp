// Fuzzes the tokenizer's rank-file loader (base64 token, space, rank per line) and then the
// tokenizer it builds: a bad file is refused with a FormatError; a good one encodes and decodes
// text of every kind without a crash, and decoding what it encoded gives the text back.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/base/error.h"
#include "engine/tokenizer/tokenizer.h"

namespace {

// The loader reads a path, so each input is written to a scratch file of this process's, removed
// at exit. A plain array, so that it is still there when the exit handler runs.
char scratch[4096];

void remove_scratch() {
  std::remove(scratch);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("waste-tokenizer-fuzz-" + std::to_string(::getpid()));
  std::snprintf(scratch, sizeof scratch, "%s", p.c_str());
  std::atexit(remove_scratch);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream f(scratch, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), (std::streamsize)size);
    if (!f) return 0;
  }
  try {
    waste::Tokenizer tok(scratch, {{300, "<|x|>"}});
    for (const char* text : {"Hello, wörld 123 ", "<|x|> \n\t  tabs", "日本語テキスト", "a"}) {
      std::vector<int> ids = tok.encode_text(text);
      if (tok.decode(ids) != text) std::abort();
      tok.encode_markup(text);
    }
  } catch (const waste::FormatError&) {
  } catch (const waste::UsageError&) {
  }
  return 0;
}
