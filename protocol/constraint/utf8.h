// Well-formed UTF-8, one byte at a time: what a lead byte promises, and the range its first
// continuation byte must lie in (which rules out overlongs, surrogates and code points past
// U+10FFFF). The grammar matcher and the token index must agree on this exactly.
#pragma once

#include <cstdint>

namespace waste {

// Ranges of the first continuation byte, by code; later continuation bytes use code 0.
constexpr uint8_t kUtf8ContLo[] = {0x80, 0xA0, 0x80, 0x90, 0x80};
constexpr uint8_t kUtf8ContHi[] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

// For a lead byte: how many continuation bytes follow (0 for ASCII) and the code of the first
// one's range. False for a byte that cannot start a character.
inline bool utf8_lead(uint8_t b, int& more, int& code) {
  code = 0;
  if (b < 0x80)
    more = 0;
  else if (b >= 0xC2 && b <= 0xDF)
    more = 1;
  else if (b == 0xE0)
    more = 2, code = 1;
  else if (b == 0xED)
    more = 2, code = 2;
  else if (b >= 0xE1 && b <= 0xEF)
    more = 2;
  else if (b == 0xF0)
    more = 3, code = 3;
  else if (b >= 0xF1 && b <= 0xF3)
    more = 3;
  else if (b == 0xF4)
    more = 3, code = 4;
  else
    return false;
  return true;
}

}  // namespace waste
