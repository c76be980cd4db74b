// Who may use the server, decided in one place before any route runs: which browser origins get
// CORS headers and preflight answers, and which requests must carry the API key.
#pragma once

#include <map>
#include <optional>
#include <string>

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
  // A CORS preflight's answer, an API-key refusal, or nullopt when `r` may go to its route.
  // `methods` lists the methods the path takes ("" for an unknown path).
  std::optional<PolicyAnswer> check(const Request& r, const std::string& methods) const;

 private:
  bool origin_allowed(const std::string& origin) const;

  const Options& opt_;
};

}  // namespace waste::http
