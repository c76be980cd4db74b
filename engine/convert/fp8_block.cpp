#include "engine/convert/fp8_block.h"

#include <cmath>

#include "engine/base/error.h"

namespace waste {

float e4m3_value(uint8_t code) {
  const int exp = (code >> 3) & 15, mant = code & 7;
  if (exp == 15 && mant == 7) return std::nanf("");
  // Subnormals are mant/8 * 2^-6; normals (1 + mant/8) * 2^(exp-7). Both exact in f32.
  float mag = exp == 0 ? std::ldexp((float)mant, -9) : std::ldexp((float)(8 + mant), exp - 10);
  return (code & 0x80) ? -mag : mag;
}

void fp8_block_decode(const uint8_t* codes, const float* scales, int64_t r0, int64_t r1,
                      int64_t cols, Fp8Tile tile, float* out, const std::string& what) {
  const int64_t scale_cols = (cols + tile.cols - 1) / tile.cols, first_tile = r0 / tile.rows;
  for (int64_t r = r0; r < r1; r++) {
    const uint8_t* c = codes + (r - r0) * cols;
    const float* s = scales + (r / tile.rows - first_tile) * scale_cols;
    float* o = out + (r - r0) * cols;
    for (int64_t j = 0; j < cols; j++) {
      if ((c[j] & 0x7f) == 0x7f)
        fail("{}: row {}, column {}: byte 0x{:02x} is NaN in E4M3; the shard is corrupt", what, r,
             j, c[j]);
      o[j] = e4m3_value(c[j]) * s[j / tile.cols];
    }
  }
}

uint8_t e4m3_encode(float x) {
  uint8_t sign = std::signbit(x) ? 0x80 : 0;
  float a = std::fabs(x);
  if (!(a < 448.0f)) return sign | 0x7e;  // saturate (NaN too: tests never pass one)
  // Walk the 127 finite magnitudes; the nearest wins, an exact tie goes to the even code.
  uint8_t best = 0;
  for (uint8_t c = 1; c < 0x7f; c++) {
    float d = std::fabs(e4m3_value(c) - a), bd = std::fabs(e4m3_value(best) - a);
    if (d < bd || (d == bd && (c & 1) == 0)) best = c;
  }
  return sign | best;
}

}  // namespace waste
