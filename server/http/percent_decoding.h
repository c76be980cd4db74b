// A request path's %XX escapes (RFC 3986 §2.1), decoded once for every route: a client asks for
// /v1/models/claude-opus-4-8%5B1m%5D and the route sees the brackets.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace waste::http {

// `s` with each %XX decoded; nullopt when a '%' is not followed by two hexadecimal digits.
std::optional<std::string> percent_decoded(std::string_view s);

}  // namespace waste::http
