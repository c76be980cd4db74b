// The client side of the outside world: a small blocking HTTP/1.1 client (Boost.Beast, TLS through
// OpenSSL with the system trust store, redirects, idle timeouts, streamed bodies) for the
// downloader and the daemon's remote-image fetches, a streaming SHA-256, and the few model-hub
// endpoints the downloader needs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/base/error.h"

namespace waste::hub {

struct Url {
  std::string scheme;  // "http" or "https"
  std::string host;
  std::string port;
  std::string target;  // path and query, starting with '/'
  bool tls() const { return scheme == "https"; }
  std::string origin() const;  // scheme://host:port, for comparing hosts across redirects
  std::string str() const;
};

// Throws UsageError for anything but an absolute http(s) URL.
Url parse_url(std::string_view s);
// A Location header: absolute, scheme-relative ("//host/x") or a path on the same origin.
Url resolve_location(const Url& base, std::string_view location);
// Percent-encodes everything but unreserved characters; '/' too unless `keep_slash`.
std::string url_escape(std::string_view s, bool keep_slash);

// A failure that another try may cure: connection refused or reset, a timeout, a body cut short,
// a 429 or a 5xx. `retry_after` is the server's Retry-After, when it sent one.
class TransientError : public IoError {
 public:
  explicit TransientError(const std::string& what,
                          std::optional<std::chrono::milliseconds> wait = std::nullopt)
      : IoError(what), retry_after(wait) {}
  std::optional<std::chrono::milliseconds> retry_after;
};

struct Response {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // only when not streamed (capped, for messages)
  Url url;                                     // where this response came from (after redirects)
  std::string header(const std::string& lower_name) const;
  std::optional<uint64_t> content_length() const;
};

struct ClientOptions {
  std::chrono::milliseconds connect_timeout{30'000};
  // The stall watchdog: the longest wait for the next bytes of a response.
  std::chrono::milliseconds idle_timeout{120'000};
  std::string token;         // sent as a Bearer token, only to `token_origin`
  std::string token_origin;  // a CDN on another host gets no token
  std::string user_agent = "waste-download/0.1";
  // Asked for every address a host name resolves to (as text, e.g. "10.0.0.1"), redirects
  // included: a non-empty answer is why that address may not be connected to. A host with no
  // address left is refused with the first reason.
  std::function<std::string(const std::string& address)> refuse_address;
};

// Decides, once the status and headers of the final response are in, whether its body goes to
// `on_data` (true) or is kept in Response::body for an error message (false).
struct BodyHandler {
  std::function<bool(const Response&)> on_headers;
  std::function<void(const char*, size_t)> on_data;
};

class HttpClient {
 public:
  explicit HttpClient(ClientOptions opt);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // One request on a fresh connection, following up to 10 redirects when `follow` is set.
  // Network failures throw TransientError; statuses are returned, not thrown.
  Response request(std::string_view method, const Url& url,
                   const std::map<std::string, std::string>& headers, bool follow,
                   const BodyHandler* handler = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// SHA-256 through OpenSSL's EVP interface, fed as the bytes arrive.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  std::string hex();  // finishes the digest and resets for the next use
  void reset();

 private:
  void* ctx_;  // EVP_MD_CTX, kept opaque so callers need no OpenSSL headers
};

// One file of a repository as the hub lists it.
struct RepoFile {
  std::string name;
  std::optional<uint64_t> size;
  std::optional<std::string> sha256;  // LFS files only
};

struct RepoListing {
  std::string commit;  // the revision resolved to a commit sha
  std::vector<RepoFile> files;
};

// What a HEAD on resolve/<commit>/<file> says about one file.
struct FileMeta {
  uint64_t size = 0;
  std::optional<std::string> sha256;  // X-Linked-Etag of an LFS file
};

class Hub {
 public:
  Hub(Url endpoint, ClientOptions opt);
  // GET /api/models/<repo>/revision/<rev>?blobs=true: the commit and the files at it.
  RepoListing list(const std::string& repo, const std::string& revision);
  // HEAD /<repo>/resolve/<commit>/<file>, redirects not followed, so the hub's own headers
  // (X-Linked-Size, X-Linked-Etag) are read rather than the CDN's.
  FileMeta head(const std::string& repo, const std::string& commit, const std::string& file);
  Url resolve_url(const std::string& repo, const std::string& commit,
                  const std::string& file) const;
  HttpClient& client() { return client_; }

 private:
  Url endpoint_;
  HttpClient client_;
};

// A readable message for a 4xx the hub sent (gated, missing repo, missing revision).
std::string describe_status(const Response& r);
// Retry-After: delta-seconds (an HTTP date is treated as absent).
std::optional<std::chrono::milliseconds> retry_after(const Response& r);
// Strips W/ and quotes from an ETag.
std::string clean_etag(std::string_view etag);

}  // namespace waste::hub
