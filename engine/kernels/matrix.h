// A weight matrix as it lies in RAM, in one of the container's trunk formats (docs/FORMAT.md §3).
#pragma once

#include <cstdint>

namespace waste {

enum class TensorFormat : uint8_t { kF32 = 0, kQ8G = 2, kQ4G = 3 };

// Quantized trunk formats group 128 inputs under one f16 scale.
constexpr int64_t kQuantGroup = 128;

const char* format_name(TensorFormat f);

// rows x cols, row-major. Quantized rows are padded with zero codes to whole groups.
struct Matrix {
  TensorFormat fmt = TensorFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;        // F32: floats; Q8G: int8 codes; Q4G: two codes per byte
  const uint16_t* scales = nullptr;  // Q8G/Q4G: rows x groups() f16, row-major

  int64_t groups() const { return (cols + kQuantGroup - 1) / kQuantGroup; }
  // Bytes of one stored row (without scales).
  int64_t row_bytes() const {
    switch (fmt) {
      case TensorFormat::kQ8G:
        return groups() * kQuantGroup;
      case TensorFormat::kQ4G:
        return groups() * kQuantGroup / 2;
      default:
        return cols * 4;
    }
  }
};

}  // namespace waste
