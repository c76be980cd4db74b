// Tiny image fixtures made in the test itself: an uncompressed-deflate PNG encoder (stored zlib
// blocks, CRC-32, Adler-32) and base64, so the image tests need no files and no libraries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "engine/base/rng.h"

namespace waste::test {

inline uint32_t png_crc(const std::string& bytes) {
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return ~c;
}

inline std::string be32(uint32_t v) {
  return {(char)(v >> 24), (char)(v >> 16), (char)(v >> 8), (char)v};
}

// A w×h 8-bit RGB PNG of noise drawn from `seed`.
inline std::string png_rgb(int w, int h, uint64_t seed) {
  Rng rng(seed);
  std::string raw;
  for (int y = 0; y < h; y++) {
    raw += '\0';  // filter: none
    for (int x = 0; x < 3 * w; x++) raw += (char)(rng.next() & 0xff);
  }
  std::string z = "\x78\x01";
  for (size_t at = 0; at < raw.size() || at == 0; at += 65535) {
    size_t n = std::min<size_t>(65535, raw.size() - at);
    bool last = at + n >= raw.size();
    z += (char)(last ? 1 : 0);
    z += (char)(n & 0xff);
    z += (char)(n >> 8);
    z += (char)(~n & 0xff);
    z += (char)((~n >> 8) & 0xff);
    z += raw.substr(at, n);
    if (last) break;
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  z += be32(b << 16 | a);
  auto chunk = [](const std::string& type, const std::string& data) {
    return be32((uint32_t)data.size()) + type + data + be32(png_crc(type + data));
  };
  std::string ihdr = be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) +
         chunk("IEND", "");
}

// A w×h 8-bit gray PNG of zeros, deflated for real (fixed Huffman codes, one literal and then
// back-references of 258 bytes), so a picture of many megapixels is a small file: what a
// decompression bomb looks like.
inline std::string png_zeros(int w, int h) {
  const uint64_t n = (uint64_t)h * ((uint64_t)w + 1);  // a filter byte, then w pixels, per row
  std::string z = "\x78\x01";
  uint32_t acc = 0;
  int bits = 0;
  auto put = [&](uint32_t v, int count) {  // LSB first
    acc |= v << bits;
    bits += count;
    while (bits >= 8) {
      z += (char)(acc & 0xff);
      acc >>= 8;
      bits -= 8;
    }
  };
  auto code = [&](uint32_t c, int len) {  // Huffman codes go most significant bit first
    for (int i = len - 1; i >= 0; --i) put((c >> i) & 1, 1);
  };
  put(1, 1);      // the final block
  put(1, 2);      // fixed Huffman codes
  code(0x30, 8);  // literal 0
  uint64_t left = n - 1;
  for (; left >= 258; left -= 258) {
    code(0xC5, 8);  // length 258 (symbol 285)
    code(0, 5);     // distance 1
  }
  for (; left > 0; --left) code(0x30, 8);
  code(0, 7);  // end of block
  if (bits > 0) put(0, 8 - bits);
  z += be32((uint32_t)((n % 65521) << 16 | 1));  // Adler-32 of n zeros
  auto chunk = [](const std::string& type, const std::string& data) {
    return be32((uint32_t)data.size()) + type + data + be32(png_crc(type + data));
  };
  std::string ihdr = be32(w) + be32(h) + std::string("\x08\x00\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + chunk("IHDR", ihdr) + chunk("IDAT", z) +
         chunk("IEND", "");
}

inline std::string base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
    if (i + 1 < in.size()) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
    if (i + 2 < in.size()) v |= (uint32_t)(unsigned char)in[i + 2];
    out += kAlphabet[v >> 18 & 63];
    out += kAlphabet[v >> 12 & 63];
    out += i + 1 < in.size() ? kAlphabet[v >> 6 & 63] : '=';
    out += i + 2 < in.size() ? kAlphabet[v & 63] : '=';
  }
  return out;
}

inline std::string png_data_url(int w, int h, uint64_t seed) {
  return "data:image/png;base64," + base64(png_rgb(w, h, seed));
}

}  // namespace waste::test
