// `waste verify --deep`: every expert record decoded back to weights (docs/CONVERTER.md §6). With
// the source checkpoint, the relative Frobenius error of each matrix against it; without, the
// gap between each row's decoded peak and its stored scale (rows were normalized to peak 1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/convert/safetensors.h"
#include "engine/format/container.h"

namespace waste {

struct DeepLayer {
  int layer = 0;
  std::vector<double> errors;  // per expert matrix, gate/up/down of expert 0, then expert 1...
  double median = 0, max = 0;
};

struct DeepReport {
  bool against_source = false;
  std::vector<DeepLayer> layers;
  std::vector<std::string> problems;  // bad records: CRC, header, non-zero padding
  double median = 0, max = 0;
};

// Weights of one VQ matrix: out[r * nv*8 + j] = f16(scale_r) * sum_s book_s[idx][j % 8].
void decode_vq_matrix(const Container& c, const VqMatrix& m, int64_t base, int kind, float* out);

// `src` may be null. Opens nothing itself; `c` should be opened with verify_crc.
DeepReport verify_deep(const Container& c, Checkpoint* src, int threads);

}  // namespace waste
