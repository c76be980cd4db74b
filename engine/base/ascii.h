// ASCII helpers the text formats share (JSON and regex escapes, URL escapes, header values,
// template bodies): one spelling of each.
#pragma once

#include <string_view>

namespace waste {

// Python's str.strip() set of ASCII whitespace (also C's isspace in the "C" locale).
inline constexpr std::string_view kAsciiSpace = " \t\n\r\f\v";

// The value of one hexadecimal digit, either case; -1 for any other character.
constexpr int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `s` without the characters of `space` at either end.
constexpr std::string_view trim(std::string_view s, std::string_view space = kAsciiSpace) {
  const std::size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(space) - b + 1);
}

}  // namespace waste
