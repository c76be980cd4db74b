#include "protocol/data_url.h"

#include <algorithm>
#include <cctype>

#include "engine/base/base64.h"
#include "engine/base/error.h"

namespace waste {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = (char)std::tolower((unsigned char)c);
  return out;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

}  // namespace

bool is_data_url(std::string_view url) {
  return starts_with_nocase(url, "data:");
}

DataUrl parse_data_url(std::string_view url, size_t max_bytes) {
  if (!is_data_url(url)) fail<UsageError>("not a data: URL");
  size_t comma = url.find(',');
  if (comma == std::string_view::npos)
    fail<UsageError>("data: URL without a comma before its data");
  std::string_view header = url.substr(5, comma - 5);
  std::string_view payload = url.substr(comma + 1);
  // The media type, then ;-separated parameters, the last of which must be base64.
  std::vector<std::string> params;
  for (size_t at = 0;;) {
    size_t semi = header.find(';', at);
    params.push_back(lower(header.substr(at, semi == std::string_view::npos ? semi : semi - at)));
    if (semi == std::string_view::npos) break;
    at = semi + 1;
  }
  if (params.size() < 2 || params.back() != "base64")
    fail<UsageError>("data: URL is not base64-encoded (expected data:<type>;base64,<data>)");
  DataUrl out;
  out.mime = params.front();
  out.bytes = base64_decode(payload, max_bytes);
  return out;
}

}  // namespace waste
