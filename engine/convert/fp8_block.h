// Float8 E4M3 weights with one f32 scale per tile, as DeepSeek-V3 and Kimi K2-Instruct ship their
// linear weights (docs/CONVERTER.md §2.3). The "fn" variant: exponent bias 7, no infinities, and
// S.1111.111 the only NaN. A code decodes exactly in f32; each value is the code times its tile's
// scale, the product rounded once to f32 (what a float32 multiply of the two gives).
#pragma once

#include <cstdint>
#include <string>

namespace waste {

// The tile of weight_block_size: rows x cols of the weight share one scale; edge tiles are partial.
struct Fp8Tile {
  int64_t rows = 0, cols = 0;
};

// The exact value of one E4M3FN code; NaN for S.1111.111.
float e4m3_value(uint8_t code);

// Decodes rows [r0, r1) of a weight `cols` wide. `codes` holds those rows; `scales` holds the
// scale rows r0 / tile.rows .. (r1 - 1) / tile.rows, each ceil(cols / tile.cols) wide. A NaN code
// is refused naming `what`, the row and the column.
void fp8_block_decode(const uint8_t* codes, const float* scales, int64_t r0, int64_t r1,
                      int64_t cols, Fp8Tile tile, float* out, const std::string& what);

// The nearest E4M3FN code to x (ties to even, saturating at ±448). For synthetic checkpoints.
uint8_t e4m3_encode(float x);

}  // namespace waste
