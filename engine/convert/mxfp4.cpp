#include "engine/convert/mxfp4.h"

#include <cmath>

#include "engine/base/error.h"

namespace waste {

const float kE2m1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void mxfp4_decode_row(const uint8_t* packed, const uint8_t* scales, int64_t cols, float* out,
                      const std::string& what, int64_t row) {
  for (int64_t g = 0; g < cols / kMxfp4Group; g++) {
    uint8_t e = scales[g];
    if (e == 255)
      fail("{}: row {}, group {}: E8M0 scale byte 255 is NaN; the shard is corrupt", what, row, g);
    // 2^(e-127) is exact in f32 for every e in 1..254 (subnormal at the bottom).
    float s = e == 0 ? 0.0f : std::ldexp(1.0f, (int)e - 127);
    const uint8_t* p = packed + g * (kMxfp4Group / 2);
    float* o = out + g * kMxfp4Group;
    for (int j = 0; j < kMxfp4Group / 2; j++) {
      o[2 * j] = kE2m1Values[p[j] & 15] * s;
      o[2 * j + 1] = kE2m1Values[p[j] >> 4] * s;
    }
  }
}

namespace {

uint8_t nearest_code(float v) {
  float a = std::fabs(v);
  int best = 0;
  for (int c = 1; c < 8; c++)
    if (std::fabs(kE2m1Values[c] - a) < std::fabs(kE2m1Values[best] - a)) best = c;
  return (uint8_t)(best | (v < 0 && best ? 8 : 0));
}

}  // namespace

void mxfp4_encode_row(const float* x, int64_t cols, uint8_t* packed, uint8_t* scales) {
  for (int64_t g = 0; g < cols / kMxfp4Group; g++) {
    const float* v = x + g * kMxfp4Group;
    float amax = 0;
    for (int i = 0; i < kMxfp4Group; i++) amax = std::fmax(amax, std::fabs(v[i]));
    int e = amax > 0 ? (int)std::ceil(std::log2(amax / 6.0f)) + 127 : 0;
    e = e < 1 ? 1 : e > 254 ? 254 : e;
    if (amax == 0) e = 0;
    scales[g] = (uint8_t)e;
    float inv = e == 0 ? 0.0f : std::ldexp(1.0f, 127 - e);
    uint8_t* p = packed + g * (kMxfp4Group / 2);
    for (int j = 0; j < kMxfp4Group / 2; j++)
      p[j] = (uint8_t)(nearest_code(v[2 * j] * inv) | nearest_code(v[2 * j + 1] * inv) << 4);
  }
}

}  // namespace waste
