// zlib-compatible CRC-32 (reflected 0xEDB88320, init and final XOR 0xFFFFFFFF), as the expert
// records carry it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace waste {

uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);

}  // namespace waste
