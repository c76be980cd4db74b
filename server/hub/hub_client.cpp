// The HTTP(S) client, SHA-256 and model-hub calls (hub_client.h).
#include "server/hub/hub_client.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <charconv>
#include <limits>

#include <simdjson.h>

#include "engine/base/json_fields.h"

namespace waste::hub {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using boost::system::error_code;

// ---- URLs ----

std::string Url::origin() const {
  return scheme + "://" + host + ":" + port;
}

std::string Url::str() const {
  bool default_port = (tls() && port == "443") || (!tls() && port == "80");
  return scheme + "://" + host + (default_port ? "" : ":" + port) + target;
}

Url parse_url(std::string_view s) {
  Url u;
  size_t sep = s.find("://");
  if (sep == std::string_view::npos) fail<UsageError>("'{}' is not an absolute URL", s);
  u.scheme = std::string(s.substr(0, sep));
  std::transform(u.scheme.begin(), u.scheme.end(), u.scheme.begin(), ::tolower);
  if (u.scheme != "http" && u.scheme != "https")
    fail<UsageError>("'{}': only http:// and https:// URLs are supported", s);
  std::string_view rest = s.substr(sep + 3);
  size_t slash = std::min(rest.find_first_of("/?"), rest.size());
  std::string_view authority = rest.substr(0, slash);
  u.target = slash < rest.size() ? std::string(rest.substr(slash)) : "/";
  if (u.target[0] == '?') u.target = "/" + u.target;
  if (authority.find('@') != std::string_view::npos)
    fail<UsageError>("'{}': credentials in URLs are not supported (use HF_TOKEN)", s);
  size_t colon = authority.rfind(':');
  bool bracketed = !authority.empty() && authority.back() == ']';
  if (colon != std::string_view::npos && !bracketed) {
    u.host = std::string(authority.substr(0, colon));
    u.port = std::string(authority.substr(colon + 1));
  } else {
    u.host = std::string(authority);
    u.port = u.tls() ? "443" : "80";
  }
  if (u.host.size() > 2 && u.host.front() == '[') u.host = u.host.substr(1, u.host.size() - 2);
  if (u.host.empty() || u.port.empty() ||
      !std::all_of(u.port.begin(), u.port.end(), [](char c) { return std::isdigit((uint8_t)c); }))
    fail<UsageError>("'{}': bad host or port", s);
  return u;
}

Url resolve_location(const Url& base, std::string_view location) {
  if (location.find("://") != std::string_view::npos) return parse_url(location);
  if (location.substr(0, 2) == "//") return parse_url(base.scheme + ":" + std::string(location));
  Url u = base;
  if (!location.empty() && location[0] == '/') {
    u.target = std::string(location);
  } else {
    // A relative path replaces the last segment of the base path.
    std::string path = base.target.substr(0, base.target.find('?'));
    u.target = path.substr(0, path.rfind('/') + 1) + std::string(location);
  }
  return u;
}

std::string url_escape(std::string_view s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    uint8_t c = (uint8_t)ch;
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/'))
      out += ch;
    else
      out += {'%', kHex[c >> 4], kHex[c & 15]};
  }
  return out;
}

// ---- responses ----

std::string Response::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

static std::optional<uint64_t> parse_u64(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<uint64_t> Response::content_length() const {
  return parse_u64(header("content-length"));
}

std::optional<std::chrono::milliseconds> retry_after(const Response& r) {
  auto secs = parse_u64(r.header("retry-after"));
  if (!secs) return std::nullopt;
  return std::chrono::milliseconds(std::min<uint64_t>(*secs, 3600) * 1000);
}

std::string clean_etag(std::string_view etag) {
  if (etag.substr(0, 2) == "W/") etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
    etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

std::string describe_status(const Response& r) {
  std::string code = r.header("x-error-code"), msg = r.header("x-error-message");
  std::string what;
  if (code == "GatedRepo")
    what = "gated repository: accept its terms on the hub and set HF_TOKEN";
  else if (code == "RepoNotFound")
    what = "repository not found (or private: set HF_TOKEN)";
  else if (code == "RevisionNotFound")
    what = "revision not found";
  else if (code == "EntryNotFound")
    what = "file not found at this revision";
  else if (r.status == 401)
    what = "unauthorized: the repository is gated or private (set HF_TOKEN), or does not exist";
  else if (r.status == 403)
    what = "forbidden: this token has no access (for a gated model, accept its terms first)";
  else if (r.status == 404)
    what = "not found: no such repository, revision or file";
  else
    what = "unexpected response";
  std::string out = fmt::format("HTTP {} from {}: {}", r.status, r.url.str(), what);
  if (!msg.empty()) out += " (" + msg + ")";
  return out;
}

// ---- the client ----

struct HttpClient::Impl {
  ClientOptions opt;
  net::io_context ioc;
  ssl::context tls{ssl::context::tls_client};

  explicit Impl(ClientOptions o) : opt(std::move(o)) {
    // The system store (honours SSL_CERT_FILE / SSL_CERT_DIR); peers must present a chain to it.
    tls.set_default_verify_paths();
    tls.set_verify_mode(ssl::verify_peer);
  }

  // Runs one asynchronous operation to completion: Beast's timeouts only apply to asynchronous
  // operations, and a blocking call could hang forever on a stalled peer.
  template <class Start>
  error_code run(Start&& start) {
    error_code out = net::error::would_block;
    start([&out](error_code ec, auto&&...) { out = ec; });
    ioc.restart();
    ioc.run();
    return out;
  }

  void connect(beast::tcp_stream& s, const Url& u) {
    tcp::resolver resolver(ioc);
    error_code ec;
    auto resolved = resolver.resolve(u.host, u.port, ec);
    if (ec) throw TransientError(fmt::format("cannot resolve {}: {}", u.host, ec.message()));
    // Only checked addresses are connected to, so a name cannot change its answer in between.
    std::vector<tcp::endpoint> endpoints;
    std::string refused;
    for (const auto& r : resolved) {
      std::string why = opt.refuse_address ? opt.refuse_address(r.endpoint().address().to_string())
                                           : std::string();
      if (why.empty())
        endpoints.push_back(r.endpoint());
      else if (refused.empty())
        refused = why;
    }
    if (endpoints.empty()) fail<UsageError>("{}: {}", u.host, refused);
    s.expires_after(opt.connect_timeout);
    ec = run([&](auto h) { s.async_connect(endpoints, h); });
    if (ec) throw TransientError(fmt::format("cannot connect to {}: {}", u.origin(), ec.message()));
  }

  http::request<http::empty_body> make_request(std::string_view method, const Url& u,
                                               const std::map<std::string, std::string>& hs) {
    http::verb verb = http::string_to_verb(beast::string_view(method.data(), method.size()));
    http::request<http::empty_body> req{verb, u.target, 11};
    bool default_port = (u.tls() && u.port == "443") || (!u.tls() && u.port == "80");
    req.set(http::field::host, default_port ? u.host : u.host + ":" + u.port);
    req.set(http::field::user_agent, opt.user_agent);
    // Byte ranges and lengths must refer to the file itself, not a compressed form of it.
    req.set(http::field::accept_encoding, "identity");
    req.set(http::field::connection, "close");
    for (const auto& [k, v] : hs) req.set(k, v);
    if (!opt.token.empty() && u.origin() == opt.token_origin)
      req.set(http::field::authorization, "Bearer " + opt.token);
    return req;
  }

  static bool is_redirect(int status) {
    return status == 301 || status == 302 || status == 303 || status == 307 || status == 308;
  }

  // Whether a read error is the peer's ordinary end of the connection after a complete message.
  static bool benign_end(error_code ec) {
    return ec == http::error::end_of_stream || ec == net::error::eof ||
           ec == ssl::error::stream_truncated;
  }

  template <class Stream>
  Response exchange(Stream& s, beast::tcp_stream& low, std::string_view method, const Url& u,
                    const std::map<std::string, std::string>& hs, bool follow,
                    const BodyHandler* handler) {
    auto req = make_request(method, u, hs);
    std::string what = fmt::format("{} {}", method, u.str());
    low.expires_after(opt.idle_timeout);
    error_code ec = run([&](auto h) { http::async_write(s, req, h); });
    if (ec) throw TransientError(fmt::format("{}: sending the request: {}", what, ec.message()));

    http::response_parser<http::buffer_body> p;
    p.body_limit(std::numeric_limits<uint64_t>::max());
    p.skip(method == "HEAD");
    beast::flat_buffer buf;
    low.expires_after(opt.idle_timeout);
    ec = run([&](auto h) { http::async_read_header(s, buf, p, h); });
    if (ec) throw TransientError(fmt::format("{}: reading the response: {}", what, ec.message()));

    Response r;
    r.url = u;
    r.status = (int)p.get().result_int();
    for (const auto& f : p.get()) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), ::tolower);
      r.headers[name] = std::string(f.value());
    }
    if (p.is_done() || (follow && is_redirect(r.status) && !r.header("location").empty())) return r;
    bool stream = handler && handler->on_headers(r);
    read_body(s, low, p, buf, r, stream ? handler : nullptr, what);
    return r;
  }

  template <class Stream, class Parser>
  void read_body(Stream& s, beast::tcp_stream& low, Parser& p, beast::flat_buffer& buf, Response& r,
                 const BodyHandler* sink, const std::string& what) {
    constexpr size_t kMessageCap = 64 * 1024;  // an error page is only kept for its message
    std::vector<char> chunk(256 * 1024);
    uint64_t got = 0;
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      low.expires_after(opt.idle_timeout);
      error_code ec = run([&](auto h) { http::async_read(s, buf, p, h); });
      if (ec == http::error::need_buffer) ec = {};
      size_t n = chunk.size() - p.get().body().size;
      got += n;
      if (sink && n) sink->on_data(chunk.data(), n);
      if (!sink) r.body.append(chunk.data(), std::min(n, kMessageCap - r.body.size()));
      if (!sink && r.body.size() >= kMessageCap) return;
      if (ec && !(benign_end(ec) && p.is_done())) {
        auto len = r.content_length();
        throw TransientError(fmt::format("{}: connection lost after {} body bytes{}: {}", what, got,
                                         len ? fmt::format(" of {}", *len) : "", ec.message()));
      }
    }
  }

  Response over_tcp(std::string_view method, const Url& u,
                    const std::map<std::string, std::string>& hs, bool follow,
                    const BodyHandler* handler) {
    beast::tcp_stream s(ioc);
    connect(s, u);
    return exchange(s, s, method, u, hs, follow, handler);
  }

  Response over_tls(std::string_view method, const Url& u,
                    const std::map<std::string, std::string>& hs, bool follow,
                    const BodyHandler* handler) {
    beast::ssl_stream<beast::tcp_stream> s(ioc, tls);
    // SNI, so a CDN serving many names presents the right certificate (never an IP address,
    // which SNI does not allow), and a name or address check on that certificate.
    error_code not_ip;
    net::ip::make_address(u.host, not_ip);
    if (not_ip && !SSL_set_tlsext_host_name(s.native_handle(), u.host.c_str()))
      throw IoError(fmt::format("{}: cannot set the TLS server name", u.host));
    s.set_verify_callback(ssl::host_name_verification(u.host));
    beast::tcp_stream& low = beast::get_lowest_layer(s);
    connect(low, u);
    low.expires_after(opt.connect_timeout);
    error_code ec = run([&](auto h) { s.async_handshake(ssl::stream_base::client, h); });
    if (ec && ec.category() == net::error::get_ssl_category())  // certificate: no retry helps
      throw IoError(fmt::format("TLS handshake with {} failed: {}", u.origin(), ec.message()));
    if (ec)
      throw TransientError(
          fmt::format("TLS handshake with {} failed: {}", u.origin(), ec.message()));
    return exchange(s, low, method, u, hs, follow, handler);
  }
};

HttpClient::HttpClient(ClientOptions opt) : impl_(std::make_unique<Impl>(std::move(opt))) {}
HttpClient::~HttpClient() = default;

Response HttpClient::request(std::string_view method, const Url& url,
                             const std::map<std::string, std::string>& headers, bool follow,
                             const BodyHandler* handler) {
  Url cur = url;
  for (int hop = 0; hop <= 10; hop++) {
    Response r = cur.tls() ? impl_->over_tls(method, cur, headers, follow, handler)
                           : impl_->over_tcp(method, cur, headers, follow, handler);
    if (!follow || !Impl::is_redirect(r.status) || r.header("location").empty()) return r;
    cur = resolve_location(cur, r.header("location"));
  }
  throw IoError(fmt::format("{} {}: more than 10 redirects", method, url.str()));
}

// ---- SHA-256 ----

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) throw std::bad_alloc();
  reset();
}

Sha256::~Sha256() {
  EVP_MD_CTX_free((EVP_MD_CTX*)ctx_);
}

void Sha256::reset() {
  if (EVP_DigestInit_ex((EVP_MD_CTX*)ctx_, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 initialisation failed");
}

void Sha256::update(const void* data, size_t n) {
  if (EVP_DigestUpdate((EVP_MD_CTX*)ctx_, data, n) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex((EVP_MD_CTX*)ctx_, md, &n) != 1)
    throw std::runtime_error("OpenSSL: SHA-256 finalisation failed");
  reset();
  std::string out;
  for (unsigned i = 0; i < n; i++) out += fmt::format("{:02x}", md[i]);
  return out;
}

// ---- the hub ----

static bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isdigit((uint8_t)c) || (c >= 'a' && c <= 'f');
         });
}

// A 429 or 5xx is worth another try; any other failure status is final.
[[noreturn]] static void throw_status(const Response& r, const std::string& what) {
  if (r.status == 429 || r.status >= 500)
    throw TransientError(fmt::format("{}: HTTP {}", what, r.status), retry_after(r));
  throw IoError(fmt::format("{}: {}", what, describe_status(r)));
}

Hub::Hub(Url endpoint, ClientOptions opt)
    : endpoint_(std::move(endpoint)), client_([&] {
        opt.token_origin = endpoint_.origin();
        return opt;
      }()) {}

static std::string base_path(const Url& endpoint) {
  std::string p = endpoint.target.substr(0, endpoint.target.find('?'));
  while (!p.empty() && p.back() == '/') p.pop_back();
  return p;
}

Url Hub::resolve_url(const std::string& repo, const std::string& commit,
                     const std::string& file) const {
  Url u = endpoint_;
  u.target = base_path(endpoint_) + "/" + repo + "/resolve/" + url_escape(commit, false) + "/" +
             url_escape(file, true);
  return u;
}

static RepoListing parse_listing(const std::string& body, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(body).get(doc)) fail<FormatError>("{}: the answer is not JSON", where);
  RepoListing out;
  out.commit = json::get_string(doc, "sha", where);
  if (out.commit.size() != 40)
    fail<FormatError>("{}: sha '{}' is not a commit id", where, out.commit);
  for (simdjson::dom::element e : json::items(json::get_array(doc, "siblings", where))) {
    RepoFile f;
    f.name = json::get_string(e, "rfilename", where + ": siblings[]");
    if (json::has_value(e, "size"))
      f.size = (uint64_t)json::get_int(e, "size", where + ": " + f.name, 0, INT64_MAX);
    if (json::has_value(e, "lfs")) {
      simdjson::dom::element lfs = json::get_object(e, "lfs", where + ": " + f.name);
      auto sha = json::get_string_opt(lfs, "sha256", where + ": " + f.name + ".lfs");
      if (sha && is_sha256_hex(*sha)) f.sha256 = sha;
    }
    out.files.push_back(std::move(f));
  }
  return out;
}

RepoListing Hub::list(const std::string& repo, const std::string& revision) {
  Url u = endpoint_;
  u.target = base_path(endpoint_) + "/api/models/" + repo + "/revision/" +
             url_escape(revision, false) + "?blobs=true";
  std::string what = fmt::format("listing {} at '{}'", repo, revision);
  Response r = client_.request("GET", u, {}, true);
  if (r.status != 200) throw_status(r, what);
  return parse_listing(r.body, what);
}

FileMeta Hub::head(const std::string& repo, const std::string& commit, const std::string& file) {
  Url u = resolve_url(repo, commit, file);
  std::string what = fmt::format("{}: HEAD {}", file, u.str());
  Response r = client_.request("HEAD", u, {}, false);
  if (r.status >= 300 && r.status < 400 && r.header("x-linked-size").empty())
    r = client_.request("HEAD", u, {}, true);  // no linked size: ask where it leads
  if (r.status >= 400 || r.status < 200) throw_status(r, what);
  FileMeta m;
  auto size = parse_u64(r.header("x-linked-size"));
  if (!size) size = r.content_length();
  if (!size) fail<IoError>("{}: no X-Linked-Size or Content-Length in the answer", what);
  m.size = *size;
  // For an LFS file the linked etag is the SHA-256 of its content; a small file's etag is a git
  // blob id, which is not a content hash we can check.
  std::string etag = clean_etag(r.header("x-linked-etag"));
  if (is_sha256_hex(etag)) m.sha256 = etag;
  return m;
}

}  // namespace waste::hub
