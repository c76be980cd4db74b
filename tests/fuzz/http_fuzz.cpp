// Fuzzes the daemon's request path short of sockets: raw bytes through Beast's request parser
// with the connection's limits, the access policy, and the body parsers of the routes. Any input
// must be parsed or refused (an HTTP error, an ApiError), never crash.
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <cstdint>
#include <string>

#include "protocol/api_error.h"
#include "protocol/openai/request.h"
#include "server/http/access_policy.h"

namespace {

namespace bhttp = boost::beast::http;

waste::http::Options options() {
  waste::http::Options o;
  o.api_key = "key";
  o.cors_origins = {"http://app.example"};
  o.allowed_hosts = {"localhost", "127.0.0.1"};
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const waste::http::Options opt = options();
  static const waste::http::AccessPolicy policy(opt);
  bhttp::request_parser<bhttp::string_body> p;
  p.header_limit(64 * 1024);
  p.body_limit(1 << 20);
  p.eager(true);
  boost::beast::error_code ec;
  size_t used = 0;
  while (used < size && !p.is_done()) {
    size_t n = p.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec || n == 0) break;
    used += n;
  }
  if (ec || !p.is_done()) return 0;
  const auto& msg = p.get();
  waste::http::Request r;
  r.method = std::string(msg.method_string());
  std::string target(msg.target());
  r.path = target.substr(0, target.find('?'));
  for (const auto& f : msg) {
    std::string name(f.name_string());
    for (char& c : name) c = (char)std::tolower((unsigned char)c);
    r.headers[name] += std::string(f.value());
  }
  r.body = msg.body();
  if (policy.check(r, "GET, POST")) return 0;
  try {
    if (r.path == "/v1/chat/completions") waste::parse_chat_completion(r.body, {1000, 0});
    if (r.path == "/v1/completions") waste::parse_completion(r.body, {1000, 0});
  } catch (const waste::ApiError&) {
  }
  return 0;
}
