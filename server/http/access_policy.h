// Who may use the server, decided in one place before any route runs: which Host names are
// served, which browser origins get CORS headers and preflight answers, which requests must
// carry the API key (/v1/ and /metrics; /health never), and that a POST body is JSON unless
// CORS lets its origin in.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "server/http/http.h"

namespace waste::http {

// What the policy says about a request that must not reach its route.
struct PolicyAnswer {
  int status = 204;
  std::optional<Refusal> refusal;  // set: answer with this error; unset: an empty answer
  std::map<std::string, std::string> headers;
};

class AccessPolicy {
 public:
  explicit AccessPolicy(const Options& o) : opt_(o) {}

  // The CORS headers every response to a request from `origin` carries ("" when CORS is off).
  std::string cors_headers(const std::string* origin) const;
  // A refusal (Host, API key, content type), a CORS preflight's answer, or nullopt when `r`
  // may go to its route.
  // `methods` lists the methods the path takes ("" for an unknown path).
  std::optional<PolicyAnswer> check(const Request& r, const std::string& methods) const;

 private:
  bool origin_allowed(const std::string& origin) const;
  bool host_allowed(const Request& r) const;
  bool content_type_allowed(const Request& r) const;
  bool needs_key(const std::string& path) const;
  PolicyAnswer refuse_key(std::string_view token) const;

  const Options& opt_;
};

}  // namespace waste::http
