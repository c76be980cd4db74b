// Fuzzes the tokenizer's rank-file loader (base64 token, space, rank per line) and then the
// tokenizer it builds: a bad file is refused with a FormatError; a good one encodes and decodes
// text of every kind without a crash, and decoding what it encoded gives the text back.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("ranks", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) != (ssize_t)size) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    waste::Tokenizer tok(path, {{300, "<|x|>"}});
    for (const char* text : {"Hello, wörld 123 ", "<|x|> \n\t  tabs", "日本語テキスト", "a"}) {
      std::vector<int> ids = tok.encode_text(text);
      if (tok.decode(ids) != text) std::abort();
      tok.encode_markup(text);
    }
  } catch (const waste::FormatError&) {
  } catch (const waste::UsageError&) {
  }
  close(fd);
  return 0;
}
