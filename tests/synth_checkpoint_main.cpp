// `synth_checkpoint kimi-linear|k3|k2-fp8|k2-int4 DIR`: writes a synthetic release checkpoint
// convert_test converts (tests/synth_checkpoint.h) into DIR, for scripts/check_convert_identity
// and for trying `waste convert` by hand.
#include <cstdio>
#include <exception>
#include <string>

#include "tests/synth_checkpoint.h"

int main(int argc, char** argv) {
  const std::string arch = argc == 3 ? argv[1] : "";
  using waste::test::K2Weights;
  if (arch != "kimi-linear" && arch != "k3" && arch != "k2-fp8" && arch != "k2-int4") {
    std::fprintf(stderr, "usage: synth_checkpoint kimi-linear|k3|k2-fp8|k2-int4 DIR\n");
    return 2;
  }
  try {
    waste::test::write_checkpoint(argv[2],
                                  arch == "k3"        ? waste::test::k3_shape()
                                  : arch == "k2-fp8"  ? waste::test::k2_shape(K2Weights::kFp8)
                                  : arch == "k2-int4" ? waste::test::k2_shape(K2Weights::kInt4)
                                                      : waste::test::kimi_linear_shape());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synth_checkpoint: %s\n", e.what());
    return 1;
  }
  return 0;
}
