// IEEE binary16 conversions. The container stores trunk scales and codebooks as f16; the two
// decoders differ on purpose (docs/FORMAT.md §3): trunk scales keep subnormals, codebook values
// flush them to signed zero. Infinity/NaN exponents are not special-cased in either.
#pragma once

#include <cstdint>
#include <cstring>

namespace waste {

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Exact decode; exponent 31 decodes as a large finite value (2^16 * 1.m), as the original does.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 31;
  uint32_t man = h & 1023;
  if (exp == 0) {
    float v = (float)man * (1.0f / 16777216.0f);  // man * 2^-24
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

// Codebook decode: subnormals become signed zero.
inline float f16_to_f32_flush(uint16_t h) {
  if (((h >> 10) & 31) == 0) return bits_to_f32((uint32_t)(h >> 15) << 31);
  return f16_to_f32(h);
}

// Round to nearest even; overflow saturates to infinity, underflow goes through subnormals.
inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t ax = x & 0x7fffffff;
  if (ax >= 0x7f800000) return sign | (ax > 0x7f800000 ? 0x7e00 : 0x7c00);
  if (ax >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520: infinity
  if (ax < 0x38800000) {                       // below the smallest normal: subnormal or zero
    float v = bits_to_f32(ax) * 16777216.0f;   // scale to units of 2^-24, exact
    uint32_t m = (uint32_t)v;
    float rem = v - (float)m;
    if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
    return sign | (uint16_t)m;
  }
  uint32_t mant = ax & 0x7fffff;
  uint32_t exp = (ax >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return sign | (uint16_t)h;
}

}  // namespace waste
