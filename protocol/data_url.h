// Image references inside chat requests: `data:` URLs with base64 payloads (RFC 2397), decoded
// strictly (RFC 4648 alphabet, `=` padding, no whitespace), with the decoded size known and
// capped from the length alone, before a byte is decoded (a request cannot make the server
// allocate more than the cap).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/base64.h"

namespace waste {

struct DataUrl {
  std::string mime;  // lowercased media type, e.g. "image/png"; empty when the URL names none
  std::vector<uint8_t> bytes;
  bool remote = false;  // fetched from an http(s) URL rather than carried inline
};

// True when `url` starts with "data:" (any case).
bool is_data_url(std::string_view url);

// `data:[<mediatype>][;<param>]*;base64,<payload>`. Throws UsageError for anything else (not a
// data URL, a non-base64 data URL, bad base64, a payload over `max_bytes` once decoded).
DataUrl parse_data_url(std::string_view url, size_t max_bytes);

}  // namespace waste
