// Group-wise symmetric int4 weights packed eight to an int32, as compressed-tensors'
// "pack-quantized" format stores Kimi K2-Thinking's routed experts (docs/CONVERTER.md §2.4). Value
// i of a row sits in word i / 8 at bits 4·(i % 8) .. 4·(i % 8) + 3, stored as q + 8 for q in
// [-8, 7]; a row's last word is zero-padded. The weight is q times its group's scale (one per
// `group` columns), exact in f32: a 4-bit integer times a BF16 scale fits in f32's significand.
#pragma once

#include <cstdint>
#include <string>

namespace waste {

constexpr int kInt4PerWord = 8;

// Words per row of a weight `cols` wide.
inline int64_t int4_words(int64_t cols) {
  return (cols + kInt4PerWord - 1) / kInt4PerWord;
}

// Decodes one row: `words` packed values, `scales` (f32, already widened) one per group.
void int4_decode_row(const int32_t* words, const float* scales, int64_t cols, int group,
                     float* out);

// Packs one row of q in [-8, 7]. For synthetic checkpoints.
void int4_pack_row(const int8_t* q, int64_t cols, int32_t* words);

}  // namespace waste
