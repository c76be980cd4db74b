// Fuzzes session (snapshot) files: anything must restore into a session of the model's shape or
// be refused; what restores is written and read back to the same state.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/base/error.h"
#include "engine/model/session.h"

namespace {

// A small hybrid model: two KDA layers and one MLA layer.
waste::ModelConfig config() {
  waste::ModelConfig c;
  c.n_layers = 3;
  c.hidden = 16;
  c.vocab = 300;
  c.n_heads = 2;
  c.kv_lora = 8;
  c.qk_nope = 4;
  c.qk_rope = 2;
  c.v_head = 4;
  c.kda_heads = 2;
  c.kda_dim = 4;
  c.conv_k = 4;
  c.is_kda = {true, false, true};
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const waste::ModelConfig c = config();
  waste::Session s(c, 0x1234, 64);
  const std::string bytes((const char*)data, size);
  try {
    s.restore(bytes, "fuzz.session");
  } catch (const waste::FormatError&) {
    return 0;
  }
  const std::string out = s.serialize();
  waste::Session again(c, 0x1234, 64);
  again.restore(out, "fuzz.session (written back)");
  if (again.serialize() != out || again.tokens != s.tokens) std::abort();
  return 0;
}
