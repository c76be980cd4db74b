// `waste download` against a fake model hub in this process (127.0.0.1 only): the listing API, the
// resolve endpoint with LFS redirects to a second "CDN" server, range requests, and injected
// faults (drops, short bodies, 500s, 429 + Retry-After, wrong lengths, corrupt bytes, ignored
// ranges, stalls). The real binary runs as a child; one test kills it mid-file and resumes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "server/hub/hub_client.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

// Marks a socket close-on-exec, so the `waste` processes the tests start hold none of the fake
// servers' sockets (macOS has neither SOCK_CLOEXEC nor accept4, which would do it at once).
int cloexec(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}
using Clock = std::chrono::steady_clock;

const std::string kRepo = "acme/tiny-k3";
const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

std::string sha256(const std::string& s) {
  hub::Sha256 h;
  h.update(s.data(), s.size());
  return h.hex();
}

// Deterministic bytes that differ at every offset class, so a misplaced range shows.
std::string pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    s[i] = (char)(x & 0xff);
  }
  return s;
}

// ---- the fake hub ----------------------------------------------------------------------------

struct Fault {
  enum Kind { kDrop, kShort, k500, k429, kWrongLength, kCorrupt, kIgnoreRange, kStall } kind;
  size_t at = 0;        // body bytes sent before a drop, short end or stall
  int retry_after = 0;  // seconds, for 429
  int stall_ms = 0;
};

struct Request {
  std::string method, target;
  std::map<std::string, std::string> headers;
};

class FakeServer {
 public:
  FakeServer() {
    fd_ = cloexec(::socket(AF_INET, SOCK_STREAM, 0));
    int one = 1;
    setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, (sockaddr*)&a, sizeof a) != 0 || ::listen(fd_, 64) != 0)
      throw std::runtime_error("fake hub: cannot listen");
    socklen_t len = sizeof a;
    getsockname(fd_, (sockaddr*)&a, &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { accept_loop(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    for (auto& t : workers_) t.join();
    ::close(fd_);
  }

  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  void add_file(const std::string& name, const std::string& data, bool lfs) {
    std::lock_guard l(mu_);
    files_[name] = {data, lfs};
    order_.push_back(name);
  }
  void set_cdn(const std::string& base) { cdn_ = base; }
  void inject(const std::string& name, Fault f, int times = 1) {
    std::lock_guard l(mu_);
    for (int i = 0; i < times; i++) faults_[name].push_back(f);
  }
  void throttle_us(int us) { throttle_us_ = us; }
  std::vector<std::string> log() {
    std::lock_guard l(mu_);
    return log_;
  }
  void clear_log() {
    std::lock_guard l(mu_);
    log_.clear();
  }

 private:
  struct File {
    std::string data;
    bool lfs;
  };

  void accept_loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = cloexec(::accept(fd_, nullptr, nullptr));
      if (c < 0) continue;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      workers_.emplace_back([this, c] { handle(c); });
    }
  }

  static bool read_request(int c, Request* r) {
    std::string buf;
    char tmp[4096];
    while (buf.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, (size_t)n);
    }
    std::istringstream in(buf.substr(0, buf.find("\r\n\r\n")));
    std::string line;
    std::getline(in, line);
    std::istringstream first(line);
    first >> r->method >> r->target;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string k = line.substr(0, colon), v = line.substr(colon + 1);
      for (char& ch : k) ch = (char)tolower(ch);
      r->headers[k] = v.substr(v.find_first_not_of(' '));
    }
    return true;
  }

  static bool send_all(int c, const char* d, size_t n) {
    while (n > 0) {
      ssize_t w = ::send(c, d, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      d += w, n -= (size_t)w;
    }
    return true;
  }

  static void reply(int c, int status, const std::string& extra, const std::string& body) {
    std::string head =
        fmt::format("HTTP/1.1 {} X\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n", status,
                    body.size(), extra);
    send_all(c, head.data(), head.size());
    send_all(c, body.data(), body.size());
  }

  void handle(int c) {
    Request r;
    if (read_request(c, &r)) route(c, r);
    ::close(c);
  }

  void route(int c, const Request& r) {
    {
      std::lock_guard l(mu_);
      auto h = [&](const char* k) { return r.headers.count(k) ? r.headers.at(k) : ""; };
      log_.push_back(fmt::format("{} {} range={} auth={}", r.method, r.target, h("range"),
                                 h("authorization")));
    }
    std::string api = "/api/models/" + kRepo + "/revision/";
    std::string resolve = "/" + kRepo + "/resolve/";
    if (r.target.rfind(api, 0) == 0) return listing(c, r.target.substr(api.size()));
    if (r.target.rfind(resolve, 0) == 0) return resolve_file(c, r, r.target.substr(resolve.size()));
    if (r.target.rfind("/cdn/", 0) == 0) {
      std::string name = r.target.substr(5, r.target.find('?') - 5);
      return body(c, r, name);
    }
    reply(c, 401, "X-Error-Code: RepoNotFound\r\n", "{\"error\":\"Repository not found\"}");
  }

  void listing(int c, const std::string& rest) {
    std::string rev = rest.substr(0, rest.find('?'));
    if (rev != "main" && rev != kCommit)
      return reply(c, 404, "X-Error-Code: RevisionNotFound\r\n", "{}");
    std::string sib;
    std::lock_guard l(mu_);
    for (const std::string& n : order_) {
      const File& f = files_.at(n);
      std::string lfs = f.lfs ? fmt::format(",\"lfs\":{{\"sha256\":\"{}\",\"size\":{}}}",
                                            sha256(f.data), f.data.size())
                              : "";
      sib += fmt::format("{}{{\"rfilename\":\"{}\",\"size\":{}{}}}", sib.empty() ? "" : ",", n,
                         f.data.size(), lfs);
    }
    reply(c, 200, "Content-Type: application/json\r\n",
          fmt::format("{{\"id\":\"{}\",\"sha\":\"{}\",\"siblings\":[{}]}}", kRepo, kCommit, sib));
  }

  void resolve_file(int c, const Request& r, const std::string& rest) {
    std::string name = rest.substr(rest.find('/') + 1);
    File f;
    {
      std::lock_guard l(mu_);
      if (!files_.count(name)) return reply(c, 404, "X-Error-Code: EntryNotFound\r\n", "");
      f = files_.at(name);
    }
    if (!f.lfs) {
      if (r.method == "HEAD")
        return head_only(c, 200,
                         fmt::format("Content-Length: {}\r\nETag: \"{}\"\r\n", f.data.size(),
                                     sha256(f.data).substr(0, 40)));
      return body(c, r, name);
    }
    std::string loc = (cdn_.empty() ? url() : cdn_) + "/cdn/" + name + "?sig=expires-soon";
    std::string h = fmt::format(
        "Location: {}\r\nX-Linked-Size: {}\r\nX-Linked-Etag: \"{}\"\r\nX-Repo-Commit: {}\r\n", loc,
        f.data.size(), sha256(f.data), kCommit);
    if (r.method == "HEAD") return head_only(c, 302, h + "Content-Length: 0\r\n");
    reply(c, 302, h, "");
  }

  static void head_only(int c, int status, const std::string& headers) {
    std::string head = fmt::format("HTTP/1.1 {} X\r\nConnection: close\r\n{}\r\n", status, headers);
    send_all(c, head.data(), head.size());
  }

  std::optional<Fault> next_fault(const std::string& name) {
    std::lock_guard l(mu_);
    auto& q = faults_[name];
    if (q.empty()) return std::nullopt;
    Fault f = q.front();
    q.pop_front();
    return f;
  }

  void body(int c, const Request& r, const std::string& name) {
    std::string data;
    {
      std::lock_guard l(mu_);
      if (!files_.count(name)) return reply(c, 404, "", "");
      data = files_.at(name).data;
    }
    std::optional<Fault> f = next_fault(name);
    Fault::Kind k = f ? f->kind : Fault::kDrop;
    if (f && k == Fault::k500) return reply(c, 500, "", "oops");
    if (f && k == Fault::k429)
      return reply(c, 429, fmt::format("Retry-After: {}\r\n", f->retry_after), "slow down");
    size_t start = 0;
    bool ranged = r.headers.count("range") && !(f && k == Fault::kIgnoreRange);
    if (ranged) start = std::stoull(r.headers.at("range").substr(6));
    if (ranged && start >= data.size())
      return reply(c, 416, fmt::format("Content-Range: bytes */{}\r\n", data.size()), "");
    std::string out = data.substr(start);
    if (f && k == Fault::kCorrupt) out[out.size() / 2] ^= 0x5a;
    if (f && k == Fault::kWrongLength) out.resize(out.size() - 5);  // consistent but short
    std::string h = fmt::format("HTTP/1.1 {} X\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\n",
                                ranged ? 206 : 200, out.size());
    if (ranged)
      h += fmt::format("Content-Range: bytes {}-{}/{}\r\n", start, data.size() - 1, data.size());
    h += "Connection: close\r\n\r\n";
    if (!send_all(c, h.data(), h.size())) return;
    send_body(c, out, f);
  }

  void send_body(int c, const std::string& out, const std::optional<Fault>& f) {
    const size_t chunk = 16 * 1024;
    for (size_t off = 0; off < out.size(); off += chunk) {
      size_t n = std::min(chunk, out.size() - off);
      if (f && (f->kind == Fault::kDrop || f->kind == Fault::kShort || f->kind == Fault::kStall) &&
          off + n > f->at) {
        send_all(c, out.data() + off, f->at > off ? f->at - off : 0);
        return cut(c, *f);
      }
      if (!send_all(c, out.data() + off, n)) return;
      if (throttle_us_) std::this_thread::sleep_for(std::chrono::microseconds(throttle_us_));
    }
  }

  static void cut(int c, const Fault& f) {
    if (f.kind == Fault::kStall) std::this_thread::sleep_for(std::chrono::milliseconds(f.stall_ms));
    if (f.kind == Fault::kDrop) {  // a reset, as from a crashed proxy
      linger lg{1, 0};
      setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    }
  }

  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> throttle_us_{0};
  std::thread thread_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::map<std::string, File> files_;
  std::vector<std::string> order_;
  std::map<std::string, std::deque<Fault>> faults_;
  std::vector<std::string> log_;
  std::string cdn_;
};

// ---- a TLS front for the fake hub -----------------------------------------------------------

// A self-signed certificate for `san` ("IP:127.0.0.1", "DNS:name"), trusted by the client only
// through SSL_CERT_FILE pointing at the PEM written here.
class TlsProxy {
 public:
  TlsProxy(int backend_port, const std::string& san, const fs::path& pem)
      : backend_port_(backend_port) {
    key_ = EVP_EC_gen("P-256");
    cert_ = X509_new();
    X509_set_version(cert_, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert_), 1);
    X509_gmtime_adj(X509_getm_notBefore(cert_), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert_), 3600);
    X509_set_pubkey(cert_, key_);
    X509_NAME* name = X509_get_subject_name(cert_);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char*)"waste test", -1, -1,
                               0);
    X509_set_issuer_name(cert_, name);
    add_ext(NID_subject_alt_name, san);
    add_ext(NID_basic_constraints, "critical,CA:TRUE");
    X509_sign(cert_, key_, EVP_sha256());
    FILE* f = fopen(pem.c_str(), "w");
    PEM_write_X509(f, cert_);
    fclose(f);
    ctx_ = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(ctx_, cert_);
    SSL_CTX_use_PrivateKey(ctx_, key_);
    fd_ = listen_loopback(&port_);
    thread_ = std::thread([this] { loop(); });
  }
  ~TlsProxy() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
    SSL_CTX_free(ctx_);
    X509_free(cert_);
    EVP_PKEY_free(key_);
  }
  std::string url() const { return fmt::format("https://127.0.0.1:{}", port_); }

  static int listen_loopback(int* port) {
    int fd = cloexec(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, (sockaddr*)&a, sizeof a) != 0 || ::listen(fd, 16) != 0)
      throw std::runtime_error("tls proxy: cannot listen");
    socklen_t len = sizeof a;
    getsockname(fd, (sockaddr*)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
  }

 private:
  void add_ext(int nid, const std::string& value) {
    X509V3_CTX v3;
    X509V3_set_ctx_nodb(&v3);
    X509V3_set_ctx(&v3, cert_, cert_, nullptr, nullptr, 0);
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    X509_add_ext(cert_, e, -1);
    X509_EXTENSION_free(e);
  }

  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      int c = cloexec(::accept(fd_, nullptr, nullptr));
      if (c < 0) continue;
      timeval tv{5, 0};
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      serve(c);
      ::close(c);
    }
  }

  // One request per connection (the client sends Connection: close): relay it to the backend
  // and its whole answer back.
  void serve(int c) {
    SSL* ssl = SSL_new(ctx_);
    SSL_set_fd(ssl, c);
    if (SSL_accept(ssl) == 1) {
      std::string req;
      char buf[16384];
      int n;
      while (req.find("\r\n\r\n") == std::string::npos && (n = SSL_read(ssl, buf, sizeof buf)) > 0)
        req.append(buf, (size_t)n);
      int b = cloexec(::socket(AF_INET, SOCK_STREAM, 0));
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons((uint16_t)backend_port_);
      if (::connect(b, (sockaddr*)&a, sizeof a) == 0 &&
          ::send(b, req.data(), req.size(), MSG_NOSIGNAL) == (ssize_t)req.size()) {
        ssize_t got;
        while ((got = ::recv(b, buf, sizeof buf, 0)) > 0) SSL_write(ssl, buf, (int)got);
      }
      ::close(b);
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
  }

  int backend_port_, fd_ = -1, port_ = 0;
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
  SSL_CTX* ctx_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---- fixture -------------------------------------------------------------------------------

class Download : public ::testing::Test {
 protected:
  Download() {
    hub_.set_cdn(cdn_.url());  // LFS bodies come from another origin, as on the real hub
    add("config.json", pattern(517, 1), false);
    add(kShard1, pattern(1 << 20, 2), true);
    add(kShard2, pattern(600 * 1024 + 3, 3), true);
    add("tokenizer/tiktoken.model", pattern(70'000, 4), true);
  }

  void add(const std::string& name, const std::string& data, bool lfs) {
    hub_.add_file(name, data, lfs);
    cdn_.add_file(name, data, lfs);
    files_[name] = data;
  }

  std::string command(const std::string& extra = "", const std::string& endpoint = "") {
    return fmt::format(
        "WASTE_DOWNLOAD_BACKOFF_MS=5 HF_TOKEN=hf_secret {} download --repo {} --dest {} "
        "--endpoint {} --timeout 2 {}",
        test::waste_binary().string(), kRepo, dest().string(),
        endpoint.empty() ? hub_.url() : endpoint, extra);
  }

  int hub_port() const { return std::stoi(hub_.url().substr(hub_.url().rfind(':') + 1)); }

  int run(const std::string& extra = "", std::string* out = nullptr) {
    std::string o;
    int rc = test::run_command(command(extra), &o);
    if (out) *out = o;
    return rc;
  }

  fs::path dest() const { return tmp_.path() / "model"; }

  // Every file byte-identical, no partial files left, and the state lists each with its hash.
  void expect_complete() {
    std::string state = test::read_file(dest() / ".download" / "state");
    for (const auto& [name, data] : files_) {
      ASSERT_TRUE(fs::exists(dest() / name)) << name;
      EXPECT_TRUE(test::read_file(dest() / name) == data) << name << " differs";
      EXPECT_FALSE(fs::exists(dest() / ".download" / (name + ".part"))) << name;
      std::string rec = fmt::format("{} {} {} {}\n", sha256(data), data.size(), kCommit, name);
      EXPECT_NE(state.find(rec), std::string::npos) << name << " not recorded in\n" << state;
    }
    std::string names = test::read_file(dest() / ".download-state");
    for (const auto& [name, data] : files_) EXPECT_NE(names.find(name + "\n"), std::string::npos);
  }

  std::vector<std::string> gets(FakeServer& s, const std::string& name) {
    std::vector<std::string> out;
    for (const std::string& l : s.log())
      if (l.rfind("GET ", 0) == 0 && l.find("/" + name) != std::string::npos) out.push_back(l);
    return out;
  }

  void seed_part(const std::string& name, size_t n) {
    fs::create_directories(dest() / ".download");
    test::write_file(dest() / ".download" / (name + ".part"), files_[name].substr(0, n));
  }

  test::TempDir tmp_;
  FakeServer cdn_, hub_;
  std::map<std::string, std::string> files_;
};

TEST_F(Download, FetchesEveryFileAtThePinnedCommit) {
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  // The branch is named once, in the listing; every file request names the commit.
  int listing = 0;
  for (const std::string& l : hub_.log()) {
    if (l.find("/api/models/") != std::string::npos) {
      listing++;
      EXPECT_NE(l.find("/revision/main"), std::string::npos) << l;
    } else {
      EXPECT_NE(l.find("/resolve/" + kCommit + "/"), std::string::npos) << l;
    }
    EXPECT_NE(l.find("auth=Bearer hf_secret"), std::string::npos) << l;
  }
  EXPECT_EQ(listing, 1);
  // The token stays with the hub; the CDN on another origin never sees it.
  ASSERT_FALSE(cdn_.log().empty());
  for (const std::string& l : cdn_.log()) EXPECT_TRUE(l.ends_with(" auth=")) << l;
}

TEST_F(Download, ExplicitRevisionIsResolvedToItsCommit) {
  std::string out;
  ASSERT_EQ(run("--revision " + kCommit, &out), 0) << out;
  expect_complete();
  std::string bad;
  EXPECT_NE(run("--revision no-such-branch", &bad), 0);
  EXPECT_NE(bad.find("revision not found"), std::string::npos) << bad;
}

TEST_F(Download, SecondRunMakesNoFileRequests) {
  ASSERT_EQ(run(), 0);
  hub_.clear_log();
  cdn_.clear_log();
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  ASSERT_EQ(hub_.log().size(), 1u);  // the listing only
  EXPECT_NE(hub_.log()[0].find("/api/models/"), std::string::npos);
  EXPECT_TRUE(cdn_.log().empty());
  expect_complete();
}

TEST_F(Download, DryRunReportsSizesAndWritesNothing) {
  std::string out;
  ASSERT_EQ(run("--dry-run", &out), 0) << out;
  EXPECT_FALSE(fs::exists(dest()));
  uint64_t total = 0;
  for (const auto& [name, data] : files_) {
    total += data.size();
    EXPECT_NE(out.find(name), std::string::npos) << out;
  }
  EXPECT_NE(out.find(fmt::format("({} bytes)", total)), std::string::npos) << out;
  EXPECT_TRUE(cdn_.log().empty());  // nothing fetched
  // A partial file counts as already here.
  seed_part(kShard1, 400'000);
  ASSERT_EQ(run("--dry-run", &out), 0) << out;
  EXPECT_NE(out.find(fmt::format("({} bytes)", total - 400'000)), std::string::npos) << out;
  EXPECT_NE(out.find("partial"), std::string::npos) << out;
  // Too little space: reported, non-zero, still nothing written.
  std::string tiny = "WASTE_DOWNLOAD_FREE_BYTES=1000 " + command("--dry-run");
  EXPECT_EQ(test::run_command(tiny, &out), 3) << out;
  EXPECT_NE(out.find("not enough free space"), std::string::npos) << out;
  EXPECT_EQ(test::run_command("WASTE_DOWNLOAD_FREE_BYTES=1000 " + command(), &out), 3) << out;
  EXPECT_FALSE(fs::exists(dest() / kShard1));
}

TEST_F(Download, ResumesAPartialFileWithARangeRequest) {
  seed_part(kShard1, 400'000);
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  auto g = gets(cdn_, kShard1);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].find("range=bytes=400000-"), std::string::npos) << g[0];
}

TEST_F(Download, OverlongPartialIsRepaired) {
  seed_part(kShard2, 0);
  test::write_file(dest() / ".download" / (kShard2 + ".part"), files_[kShard2] + "junk");
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
}

TEST_F(Download, ResumesAfterADroppedConnection) {
  cdn_.inject(kShard1, {Fault::kDrop, 300'000});
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  auto g = gets(cdn_, kShard1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NE(g[1].find("range=bytes="), std::string::npos) << g[1];  // resumed, not restarted
  EXPECT_EQ(g[1].find("range=bytes=0-"), std::string::npos) << g[1];
  EXPECT_NE(out.find(kShard1), std::string::npos) << out;
}

TEST_F(Download, ResumesAfterShortBodies) {
  cdn_.inject(kShard2, {Fault::kShort, 100'000});
  cdn_.inject(kShard2, {Fault::kShort, 50'000});
  hub_.inject("config.json", {Fault::kShort, 100});
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  EXPECT_EQ(gets(cdn_, kShard2).size(), 3u);
  EXPECT_NE(out.find("connection lost"), std::string::npos) << out;
}

TEST_F(Download, RetriesServerErrorsThenSucceeds) {
  cdn_.inject(kShard1, {Fault::k500}, 3);
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  EXPECT_EQ(gets(cdn_, kShard1).size(), 4u);
  EXPECT_NE(out.find("HTTP 500"), std::string::npos) << out;
}

TEST_F(Download, HonoursRetryAfterOn429) {
  cdn_.inject(kShard2, {Fault::k429, 0, 1});
  std::string out;
  auto t0 = Clock::now();
  ASSERT_EQ(run("", &out), 0) << out;
  EXPECT_GE(Clock::now() - t0, std::chrono::milliseconds(1000));  // backoff alone is ~5 ms
  expect_complete();
  EXPECT_NE(out.find("HTTP 429"), std::string::npos) << out;
}

TEST_F(Download, PersistentErrorsGiveUpNamingTheFile) {
  cdn_.inject(kShard1, {Fault::k500}, 100);
  std::string out;
  EXPECT_EQ(run("--retries 2", &out), 1) << out;
  EXPECT_NE(out.find(kShard1 + ": giving up after 3 tries"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dest() / kShard1));
}

TEST_F(Download, WrongContentLengthIsRefused) {
  cdn_.inject(kShard1, {Fault::kWrongLength});  // once: the next try succeeds
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  EXPECT_NE(out.find("Content-Length 1048571 but 1048576 bytes expected"), std::string::npos)
      << out;

  fs::remove_all(dest());
  cdn_.inject(kShard2, {Fault::kWrongLength}, 100);
  EXPECT_EQ(run("--retries 2", &out), 1) << out;
  EXPECT_NE(out.find(kShard2 + ": giving up"), std::string::npos) << out;
  EXPECT_NE(out.find("Content-Length"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dest() / kShard2));
}

TEST_F(Download, CorruptBytesAreRefusedAndFetchedAgain) {
  cdn_.inject(kShard1, {Fault::kCorrupt});
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  EXPECT_NE(out.find(kShard1 + ": sha256"), std::string::npos) << out;
  EXPECT_NE(out.find("downloading it again"), std::string::npos) << out;
  EXPECT_EQ(gets(cdn_, kShard1).size(), 2u);
}

TEST_F(Download, PersistentCorruptionFailsClearly) {
  cdn_.inject(kShard2, {Fault::kCorrupt}, 10);
  std::string out;
  EXPECT_EQ(run("", &out), 1) << out;
  EXPECT_NE(out.find(kShard2 + ": sha256"), std::string::npos) << out;
  EXPECT_NE(out.find("giving up"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(dest() / kShard2));
  EXPECT_EQ(test::read_file(dest() / ".download" / "state").find(kShard2), std::string::npos);
}

TEST_F(Download, ServerIgnoringRangeStartsOver) {
  seed_part(kShard1, 400'000);
  cdn_.inject(kShard1, {Fault::kIgnoreRange});
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  EXPECT_NE(out.find("ignored the range request"), std::string::npos) << out;
  EXPECT_EQ(gets(cdn_, kShard1).size(), 1u);  // the 200's body is the file: no second request
}

TEST_F(Download, StalledTransferTimesOutAndResumes) {
  cdn_.inject(kShard1, {Fault::kStall, 200'000, 0, 1500});
  std::string out;
  std::string cmd = command("") + " --timeout 0.3";
  ASSERT_EQ(test::run_command(cmd, &out), 0) << out;
  // The retry came from the idle timeout, not from the server giving up on its own later.
  EXPECT_NE(out.find("closed due to a timeout"), std::string::npos) << out;
  expect_complete();
  auto g = gets(cdn_, kShard1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NE(g[1].find("range=bytes="), std::string::npos) << g[1];
}

TEST_F(Download, MissingRepoFailsWithoutRetrying) {
  std::string out;
  std::string cmd = fmt::format(
      "WASTE_DOWNLOAD_BACKOFF_MS=5 {} download --repo acme/nothing "
      "--dest {} --endpoint {}",
      test::waste_binary().string(), dest().string(), hub_.url());
  EXPECT_EQ(test::run_command(cmd, &out), 1) << out;
  EXPECT_NE(out.find("repository not found"), std::string::npos) << out;
  EXPECT_EQ(hub_.log().size(), 1u);
}

TEST_F(Download, UnsafeFileNameIsRefused) {
  add("../escape.txt", "x", false);
  std::string out;
  EXPECT_EQ(run("", &out), 1) << out;
  EXPECT_NE(out.find("../escape.txt: refusing an unsafe file name"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(tmp_.path() / "escape.txt"));
}

// The hub over HTTPS: the certificate is checked against the trust store and the address.
TEST_F(Download, HttpsWithATrustedCertificate) {
  fs::path pem = tmp_.path() / "cert.pem";
  TlsProxy tls(hub_port(), "IP:127.0.0.1", pem);
  std::string out;
  int rc = test::run_command("SSL_CERT_FILE=" + pem.string() + " " + command("", tls.url()), &out);
  ASSERT_EQ(rc, 0) << out;
  expect_complete();
  EXPECT_NE(hub_.log()[0].find("auth=Bearer hf_secret"), std::string::npos);
}

TEST_F(Download, HttpsRefusesUntrustedAndMisnamedCertificates) {
  fs::path pem = tmp_.path() / "cert.pem";
  std::string out;
  {
    TlsProxy tls(hub_port(), "IP:127.0.0.1", pem);  // not in the system store
    EXPECT_EQ(test::run_command(command("", tls.url()), &out), 1) << out;
    EXPECT_NE(out.find("certificate verify failed"), std::string::npos) << out;
    EXPECT_EQ(out.find("retrying"), std::string::npos) << out;  // no retry cures a certificate
  }
  TlsProxy tls(hub_port(), "DNS:elsewhere.invalid", pem);  // trusted, but for another name
  int rc = test::run_command("SSL_CERT_FILE=" + pem.string() + " " + command("", tls.url()), &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("certificate verify failed"), std::string::npos) << out;
  EXPECT_TRUE(hub_.log().empty());
}

// The real binary killed mid-file, then run again: it resumes from the partial file.
TEST_F(Download, KilledMidFileResumes) {
  add("model-big.safetensors", pattern(4 << 20, 9), true);
  cdn_.throttle_us(4000);  // ~4 MiB/s, so the kill lands mid-file
  std::string log = (tmp_.path() / "child.log").string();
  // Built before fork: the child of a threaded process may only make async-signal-safe calls.
  std::string cmd = "exec env " + command();
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1), dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  fs::path part = dest() / ".download" / "model-big.safetensors.part";
  auto deadline = Clock::now() + std::chrono::seconds(30);
  std::error_code ec;
  while (Clock::now() < deadline && !(fs::file_size(part, ec) >= (1u << 20) && !ec))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(pid, SIGKILL);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_TRUE(WIFSIGNALED(st)) << test::read_file(log);
  uint64_t have = fs::file_size(part);
  ASSERT_GT(have, 0u);
  ASSERT_LT(have, 4u << 20);
  EXPECT_FALSE(fs::exists(dest() / "model-big.safetensors"));
  EXPECT_EQ(test::read_file(dest() / ".download" / "state").find("model-big"), std::string::npos);

  cdn_.throttle_us(0);
  cdn_.clear_log();
  std::string out;
  ASSERT_EQ(run("", &out), 0) << out;
  expect_complete();
  auto g = gets(cdn_, "model-big.safetensors");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0].find(fmt::format("range=bytes={}-", have)), std::string::npos) << g[0];
}

}  // namespace
}  // namespace waste
