#include "server/http/access_policy.h"

#include <cctype>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/ascii.h"

namespace waste::http {

namespace {

const std::string* header(const Request& r, const char* name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? nullptr : &it->second;
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower((unsigned char)s[i]) != prefix[i]) return false;
  return true;
}

// HTTP's optional whitespace around a header value.
constexpr std::string_view kOws = " \t";

bool is_header_value(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// Runs over the whole expected key whatever the input, so timing says nothing about how
// much of a guess was right.
bool constant_time_equal(std::string_view given, std::string_view key) {
  volatile unsigned char diff = given.size() != key.size();
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(key[i]));
  }
  return diff == 0;
}

// The Host header's name: without the port, without IPv6 brackets, lower case.
std::string host_name(std::string_view h) {
  h = trim(h, kOws);
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    h = close == std::string_view::npos ? h.substr(1) : h.substr(1, close - 1);
  } else if (size_t colon = h.rfind(':'); colon != std::string_view::npos && h.find(':') == colon) {
    h = h.substr(0, colon);  // name:port (a bare IPv6 address has several colons)
  }
  std::string out(h);
  for (char& c : out) c = (char)std::tolower((unsigned char)c);
  return out;
}

}  // namespace

bool AccessPolicy::origin_allowed(const std::string& origin) const {
  for (const std::string& allowed : opt_.cors_origins)
    if (allowed == "*" || allowed == origin) return true;
  return false;
}

std::string AccessPolicy::cors_headers(const std::string* origin) const {
  if (opt_.cors_origins.empty()) return "";
  std::string h = "Vary: Origin\r\n";
  if (origin && !origin->empty() && origin_allowed(*origin) && is_header_value(*origin))
    h += fmt::format("Access-Control-Allow-Origin: {}\r\n", *origin);
  return h;
}

bool AccessPolicy::host_allowed(const Request& r) const {
  if (opt_.allowed_hosts.empty()) return true;
  const std::string* host = header(r, "host");
  if (!host) return true;  // HTTP/1.0 without a Host: not a browser's request
  const std::string name = host_name(*host);
  for (const std::string& allowed : opt_.allowed_hosts)
    if (allowed == "*" || host_name(allowed) == name) return true;
  return false;
}

// A browser sends a cross-site POST without asking first only with a form's or text's content
// type; refusing those (unless CORS lets the origin in) keeps a web page from making a local
// daemon generate.
bool AccessPolicy::content_type_allowed(const Request& r) const {
  if (r.method != "POST" || r.body.empty()) return true;
  const std::string* type = header(r, "content-type");
  if (!type) return true;
  std::string t(trim(std::string_view(*type).substr(0, type->find(';')), kOws));
  for (char& c : t) c = (char)std::tolower((unsigned char)c);
  if (t == "application/json" || t.ends_with("+json")) return true;
  const std::string* origin = header(r, "origin");
  return origin && !opt_.cors_origins.empty() && origin_allowed(*origin);
}

bool AccessPolicy::needs_key(const std::string& path) const {
  return !opt_.api_key.empty() && (path.starts_with("/v1/") || path == "/metrics");
}

std::optional<PolicyAnswer> AccessPolicy::check(const Request& r,
                                                const std::string& methods) const {
  if (!host_allowed(r)) {
    const std::string* host = header(r, "host");
    return PolicyAnswer{
        403,
        Refusal{403,
                fmt::format("the Host '{}' is not served here (a daemon on loopback answers "
                            "loopback names; --allowed-hosts adds others)",
                            host_name(*host)),
                "host_not_allowed"},
        {}};
  }
  const std::string* origin = header(r, "origin");
  if (r.method == "OPTIONS" && !opt_.cors_origins.empty() && origin &&
      header(r, "access-control-request-method")) {
    if (!origin_allowed(*origin))
      return PolicyAnswer{403, Refusal{403, "origin not allowed", "origin_not_allowed"}, {}};
    const std::string* asked = header(r, "access-control-request-headers");
    PolicyAnswer a;
    a.headers = {{"Access-Control-Allow-Methods",
                  methods.empty() ? "GET, POST, OPTIONS" : methods + ", OPTIONS"},
                 {"Access-Control-Allow-Headers", asked ? *asked : "Authorization, Content-Type"},
                 {"Access-Control-Max-Age", "600"}};
    if (header(r, "access-control-request-private-network"))
      a.headers["Access-Control-Allow-Private-Network"] = "true";
    return a;
  }
  if (needs_key(r.path)) {
    const std::string* auth = header(r, "authorization");
    std::string_view token;
    if (auth && auth->size() > 7 && iequals_prefix(*auth, "bearer "))
      token = trim(std::string_view(*auth).substr(7), kOws);
    // Anthropic's SDKs send the key as x-api-key.
    if (const std::string* key = header(r, "x-api-key"); token.empty() && key)
      token = trim(*key, kOws);
    if (token.empty() || !constant_time_equal(token, opt_.api_key)) return refuse_key(token);
  }
  if (!content_type_allowed(r))
    return PolicyAnswer{415,
                        Refusal{415,
                                fmt::format("Content-Type '{}' is not accepted; send the body as "
                                            "application/json (Content-Type: application/json)",
                                            *header(r, "content-type")),
                                "unsupported_media_type"},
                        {}};
  return std::nullopt;
}

PolicyAnswer AccessPolicy::refuse_key(std::string_view token) const {
  const char* message =
      token.empty() ? "You didn't provide an API key. Provide it in an Authorization header "
                      "using Bearer auth (Authorization: Bearer YOUR_KEY), or as x-api-key."
                    : "Incorrect API key provided.";
  return PolicyAnswer{
      401, Refusal{401, message, "invalid_api_key"}, {{"WWW-Authenticate", "Bearer"}}};
}

}  // namespace waste::http
