#include "engine/convert/int4_pack.h"

namespace waste {

void int4_decode_row(const int32_t* words, const float* scales, int64_t cols, int group,
                     float* out) {
  for (int64_t i = 0; i < cols; i++) {
    uint32_t w = (uint32_t)words[i / kInt4PerWord];
    int q = (int)((w >> (4 * (i % kInt4PerWord))) & 15) - 8;
    out[i] = (float)q * scales[i / group];
  }
}

void int4_pack_row(const int8_t* q, int64_t cols, int32_t* words) {
  for (int64_t w = 0; w < int4_words(cols); w++) words[w] = 0;
  for (int64_t i = 0; i < cols; i++) {
    uint32_t nib = (uint32_t)(q[i] + 8) & 15;
    words[i / kInt4PerWord] =
        (int32_t)((uint32_t)words[i / kInt4PerWord] | nib << (4 * (i % kInt4PerWord)));
  }
}

}  // namespace waste
