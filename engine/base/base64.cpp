#include "engine/base/base64.h"

#include <cctype>

#include "engine/base/error.h"

namespace waste {
namespace {

// 0..63 for the alphabet, -1 otherwise.
int sextet(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

}  // namespace

size_t base64_decoded_size(std::string_view text) {
  if (text.size() % 4 != 0)
    fail<UsageError>("base64 length {} is not a multiple of 4 (padding missing?)", text.size());
  size_t pad = 0;
  if (!text.empty() && text.back() == '=')
    pad = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  return text.size() / 4 * 3 - pad;
}

std::vector<uint8_t> base64_decode(std::string_view text, size_t max_bytes) {
  const size_t n = base64_decoded_size(text);
  if (n > max_bytes)
    fail<UsageError>("the decoded data would be {} bytes, more than the limit of {}", n, max_bytes);
  const size_t pad = text.size() / 4 * 3 - n;
  std::vector<uint8_t> out;
  out.reserve(n);
  for (size_t at = 0; at < text.size(); at += 4) {
    const bool last = at + 4 == text.size();
    uint32_t group = 0;
    for (size_t k = 0; k < 4; k++) {
      char c = text[at + k];
      int v = sextet(c);
      if (v < 0 && c == '=' && last && k >= 4 - pad) v = 0;
      if (v < 0) {
        if (c == '=') fail<UsageError>("base64 padding '=' at offset {} before the end", at + k);
        if (std::isspace((unsigned char)c))
          fail<UsageError>("whitespace in base64 at offset {} (send it without line breaks)",
                           at + k);
        fail<UsageError>("character 0x{:02x} at offset {} is not base64", (unsigned char)c, at + k);
      }
      group = group << 6 | (uint32_t)v;
    }
    const size_t bytes = last ? 3 - pad : 3;
    // Canonical encodings leave the bits under the padding zero; anything else is corrupt.
    if (last && pad > 0 && (group & ((1u << (8 * pad)) - 1)) != 0)
      fail<UsageError>("non-zero bits under the base64 padding at offset {}", at);
    for (size_t k = 0; k < bytes; k++) out.push_back((uint8_t)(group >> (16 - 8 * k)));
  }
  return out;
}

}  // namespace waste
