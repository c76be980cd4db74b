// `synth_checkpoint kimi-linear|k3 DIR`: writes the synthetic release checkpoint convert_test
// converts (tests/synth_checkpoint.h) into DIR, for scripts/check_convert_identity.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/synth_checkpoint.h"

int main(int argc, char** argv) {
  const std::string arch = argc == 3 ? argv[1] : "";
  if (arch != "kimi-linear" && arch != "k3") {
    std::fprintf(stderr, "usage: synth_checkpoint kimi-linear|k3 DIR\n");
    return 2;
  }
  try {
    waste::test::write_checkpoint(
        argv[2], arch == "k3" ? waste::test::k3_shape() : waste::test::kimi_linear_shape());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synth_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
