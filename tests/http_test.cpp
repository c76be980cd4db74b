// The HTTP layer (server/http/http.h) driven over real sockets on 127.0.0.1: routing, limits, auth,
// CORS, server-sent events written from other threads, keepalives of silent streams, disconnects,
// keep-alive and stop().
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <simdjson.h>

#include <atomic>
#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/openai/error.h"
#include "server/http/http.h"

namespace waste::http {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace bhttp = boost::beast::http;
using Response = bhttp::response<bhttp::string_body>;

constexpr auto kWait = 5s;                  // the most any single read in these tests may take
const Keepalive kComment{"", "keepalive"};  // OpenAI's streams say this when silent

std::string field(const Response& r, const char* name) {
  auto it = r.find(name);
  return it == r.end() ? std::string() : std::string(it->value().data(), it->value().size());
}

// A blocking TCP client with deadlines on every read, so that no test can hang.
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connected_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { close(); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool connected() const { return connected_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::send(fd_, s.data(), s.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      s.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // Appends whatever arrives before `deadline` to buf; false on timeout, EOF or error.
  bool recv_some(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || eof_) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    buf.append(tmp, static_cast<size_t>(n));
    return true;
  }

  bool read_until(std::string_view needle, std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    while (buf.find(needle) == std::string::npos)
      if (!recv_some(deadline)) return false;
    return true;
  }

  // Our side is done sending (the client half-closes); the server may still answer.
  void half_close() { ::shutdown(fd_, SHUT_WR); }

  // Reads one complete response off the connection (leaving any bytes after it in buf); interim
  // 1xx responses before it are skipped, as HTTP/1.1 clients must.
  std::optional<Response> read_response(std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      std::optional<Response> r = read_one(deadline);
      if (!r || r->result_int() >= 200) return r;
      interim++;
    }
  }

  std::optional<Response> read_one(Clock::time_point deadline) {
    bhttp::response_parser<bhttp::string_body> p;
    p.body_limit(256u << 20);
    p.eager(true);
    for (;;) {
      while (!buf.empty() && !p.is_done()) {
        boost::beast::error_code ec;
        const size_t used = p.put(boost::asio::buffer(buf), ec);
        buf.erase(0, used);
        if (ec == bhttp::error::need_more) break;
        if (ec) return std::nullopt;
      }
      if (p.is_done()) return p.release();
      if (!recv_some(deadline)) {
        if (!eof_) return std::nullopt;
        boost::beast::error_code ec;
        p.put_eof(ec);
        if (!ec && p.is_done()) return p.release();
        return std::nullopt;
      }
    }
  }

  // True once the server has closed the connection (within the timeout).
  bool wait_closed(std::chrono::milliseconds timeout = kWait) {
    const auto deadline = Clock::now() + timeout;
    while (!eof_)
      if (!recv_some(deadline) && !eof_) return false;
    return true;
  }

  std::optional<Response> request(const std::string& method, const std::string& target,
                                  const std::string& body = "", const std::string& headers = "") {
    std::string req = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers;
    if (!body.empty() || method == "POST")
      req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "\r\n" + body;
    if (!send(req)) return std::nullopt;
    return read_response();
  }

  std::string buf;
  int interim = 0;  // 1xx responses seen

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
};

int status_of(const std::optional<Response>& r) {
  return r ? static_cast<int>(r->result_int()) : -1;
}

struct ErrorFields {
  std::string message, type, code;
  bool param_null = false;
};

std::optional<ErrorFields> parse_error(const std::string& body) {
  simdjson::dom::parser p;
  simdjson::dom::element e;
  if (p.parse(body).get(e)) return std::nullopt;
  simdjson::dom::element err;
  if (e["error"].get(err)) return std::nullopt;
  ErrorFields f;
  std::string_view s;
  if (!err["message"].get(s)) f.message = s;
  if (!err["type"].get(s)) f.type = s;
  if (!err["code"].get(s)) f.code = s;
  f.param_null = err["param"].is_null();
  return f;
}

// Polls `pred` for up to `timeout`; the tests' only waiting loop on shared state.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = kWait) {
  const auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Raises this process's descriptor limit to at least `n` (within the hard limit): each loopback
// connection costs one on both ends.
bool allow_descriptors(rlim_t n) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  if (r.rlim_cur != RLIM_INFINITY && r.rlim_cur < n) {
    if (r.rlim_max != RLIM_INFINITY && r.rlim_max < n) return false;
    r.rlim_cur = n;
    if (::setrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  }
  return true;
}

class HttpTest : public ::testing::Test {
 public:
  static Options options() {
    Options o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.io_threads = 2;
    o.error_format = [](const std::string&, const Refusal& r) {
      return openai_refusal_body(r.status, r.message, r.code);
    };
    return o;
  }

 protected:
  // A server that serves at most `max_connections` at once.
  void start_with_limit(size_t max_connections) {
    Options o = options();
    o.max_connections = max_connections;
    start(std::move(o));
  }

  void start(Options o = options()) {
    server_ = std::make_unique<Server>(std::move(o));
    add_routes();
    server_->start();
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  void TearDown() override {
    server_.reset();
    std::lock_guard lk(mutex_);
    for (std::thread& t : workers_) t.join();
  }

  // Handlers must not block an I/O thread, so the streaming ones hand off to a worker, as
  // the engine will.
  void spawn(std::function<void()> fn) {
    std::lock_guard lk(mutex_);
    workers_.emplace_back(std::move(fn));
  }

  void add_routes() {
    Server& s = *server_;
    s.route("GET", "/health", [](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->send(200, "application/json", R"({"status":"ok"})");
    });
    s.route("GET", "/v1/models", [](const Request&, std::shared_ptr<ResponseWriter> w) {
      w->send(200, "application/json", R"({"object":"list","data":[]})");
    });
    s.route("POST", "/echo", [](const Request& r, std::shared_ptr<ResponseWriter> w) {
      const auto it = r.headers.find("x-tag");
      w->send(200, "text/plain", r.body,
              {{"X-Query", r.query}, {"X-Tag", it == r.headers.end() ? "" : it->second}});
    });
    // A prefix route that answers with the path it was given.
    s.route("GET", "/path/", [](const Request& r, std::shared_ptr<ResponseWriter> w) {
      w->send(200, "text/plain", r.path);
    });
    s.route("PUT", "/echo", [](const Request& r, std::shared_ptr<ResponseWriter> w) {
      w->send(200, "text/plain", r.body);
    });
    s.route("GET", "/sse", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([this, w] {
        w->start_events(kComment);
        for (int i = 0; i < 4; ++i) {
          w->event("{\"n\":" + std::to_string(i) + "}");
          std::this_thread::sleep_for(150ms);
        }
        w->event("line1\nline2");
        w->event("[DONE]");
        sse_done_ = true;
        w->finish();
      });
    });
    s.route("GET", "/forever", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([this, w] {
        w->start_events(kComment);
        for (int i = 0; i < 2000; ++i) {  // 20 s at most
          if (!w->event("tick " + std::to_string(i))) break;
          std::this_thread::sleep_for(10ms);
        }
        saw_closed_ = w->closed();
        producer_done_ = true;
        w->finish();
      });
    });
    s.route("GET", "/big", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([this, w] {
        w->start_events(kComment);
        const std::string pad(kBigEvent - 6, 'x');
        for (int i = 0; i < kBigEvents; ++i) {
          char num[8];
          std::snprintf(num, sizeof num, "%06d", i);
          if (!w->event(num + pad)) break;
        }
        producer_done_ = true;
        w->finish();
      });
    });
    // Answered by the test itself, later (or never).
    s.route("GET", "/hold", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      std::lock_guard lk(mutex_);
      held_.push_back(std::move(w));
    });
    // Ticks until released (10 s at most), then ends: a stream that must arrive whole.
    s.route("GET", "/ticks", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([this, w] {
        w->start_events(kComment);
        for (int i = 0; i < 1000 && !release_; ++i) {
          if (!w->event("tick " + std::to_string(i))) break;
          std::this_thread::sleep_for(10ms);
        }
        w->event("[DONE]");
        w->finish();
      });
    });
    // Answered from another thread a moment later, as the engine answers.
    s.route("GET", "/later", [this](const Request& r, std::shared_ptr<ResponseWriter> w) {
      std::string q = r.query;
      spawn([w, q] {
        std::this_thread::sleep_for(100ms);
        w->send(200, "text/plain", "later " + q);
      });
    });
    s.route("POST", "/later", [this](const Request& r, std::shared_ptr<ResponseWriter> w) {
      std::string body = r.body;
      spawn([w, body] {
        std::this_thread::sleep_for(50ms);
        w->send(200, "text/plain", body);
      });
    });
    // One event, then silence for `quiet_`, then another: the keepalive fills the gap.
    s.route("GET", "/quiet", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([this, w] {
        w->start_events({"ping", R"({"type":"ping"})"});
        w->named_event("message", "first");
        std::this_thread::sleep_for(quiet_.load());
        w->named_event("message", "second");
        w->finish();
      });
    });
    // Multi-line events with short, uneven pauses: keepalives land between them.
    s.route("GET", "/chatty", [this](const Request&, std::shared_ptr<ResponseWriter> w) {
      spawn([w] {
        w->start_events(kComment);
        for (int i = 0; i < kChattyEvents; ++i) {
          w->event(chatty_event(i));
          std::this_thread::sleep_for(std::chrono::microseconds(700 * (i % 4)));
        }
        w->finish();
      });
    });
    s.route("GET", "/silent", [](const Request&, std::shared_ptr<ResponseWriter>) {});
    s.route("GET", "/throw", [](const Request&, std::shared_ptr<ResponseWriter>) {
      throw std::runtime_error("boom");
    });
  }

  // Whether a new connection's GET /health is answered 200 (it closes when this returns).
  bool newcomer_is_served() {
    Client c(port_);
    return status_of(c.request("GET", "/health")) == 200;
  }

  size_t held_count() {
    std::lock_guard lk(mutex_);
    return held_.size();
  }
  std::shared_ptr<ResponseWriter> held(size_t i) {
    std::lock_guard lk(mutex_);
    return held_.at(i);
  }

  static std::string chatty_event(int i) {
    return std::to_string(i) + "\n" + std::string(3000, 'a' + i % 26) + "\n" + std::to_string(i);
  }

  static constexpr int kChattyEvents = 300;
  static constexpr int kBigEvents = 640;
  static constexpr size_t kBigEvent = 64 * 1024;

  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::mutex mutex_;
  std::vector<std::thread> workers_;
  std::vector<std::shared_ptr<ResponseWriter>> held_;  // by /hold, in arrival order
  std::atomic<bool> release_{false};                   // ends /ticks
  std::atomic<std::chrono::milliseconds> quiet_{{}};   // /quiet's silence, read by its worker
  std::atomic<bool> sse_done_{false};
  std::atomic<bool> producer_done_{false};
  std::atomic<bool> saw_closed_{false};
};

TEST_F(HttpTest, GetRoute) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.connected());
  auto r = c.request("GET", "/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), R"({"status":"ok"})");
  EXPECT_EQ(field(*r, "Content-Type"), "application/json");
  EXPECT_EQ(field(*r, "Content-Length"), "15");
  EXPECT_TRUE(r->keep_alive());
}

TEST_F(HttpTest, PostEchoWithQueryAndHeaders) {
  start();
  Client c(port_);
  auto r = c.request("POST", "/echo?a=1&b=%20", "hello body", "X-Tag: t1\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), "hello body");
  EXPECT_EQ(field(*r, "X-Query"), "a=1&b=%20");
  EXPECT_EQ(field(*r, "X-Tag"), "t1");
}

TEST_F(HttpTest, UnknownPathIs404Json) {
  start();
  Client c(port_);
  auto r = c.request("GET", "/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 404);
  EXPECT_EQ(field(*r, "Content-Type"), "application/json");
  auto e = parse_error(r->body());
  ASSERT_TRUE(e) << r->body();
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_TRUE(e->param_null);
  EXPECT_NE(e->message.find("/nope"), std::string::npos);
  // Matching is exact: a trailing slash or a prefix is another path.
  EXPECT_EQ(status_of(c.request("GET", "/health/")), 404);
}

// Routes see the path with its %XX escapes decoded (a model id with brackets); a '%' that starts
// no escape is a 400 naming the path, in the route's error shape.
TEST_F(HttpTest, ThePathIsPercentDecodedAndABadEscapeIs400) {
  start();
  Client c(port_);
  auto r = c.request("GET", "/path/claude-opus-4-8%5B1m%5d");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), "/path/claude-opus-4-8[1m]");
  for (const char* bad : {"/path/a%zz", "/path/a%4", "/path/%"}) {
    SCOPED_TRACE(bad);
    r = c.request("GET", bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 400);
    auto e = parse_error(r->body());
    ASSERT_TRUE(e) << r->body();
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_NE(e->message.find(std::string("bad %-escape in the request path ") + bad),
              std::string::npos)
        << e->message;
  }
  // The connection is still usable after the refusal.
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

TEST_F(HttpTest, WrongMethodIs405WithAllow) {
  start();
  Client c(port_);
  auto r = c.request("POST", "/health", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 405);
  EXPECT_EQ(field(*r, "Allow"), "GET, HEAD");
  ASSERT_TRUE(parse_error(r->body()));
  r = c.request("DELETE", "/echo");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 405);
  EXPECT_EQ(field(*r, "Allow"), "POST, PUT");
  // The connection survives both errors.
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

// The bytes of one response's header block (its status line to the blank line), with the values
// of Date (two responses a second apart differ there) and Content-Length blanked.
std::string header_block(const std::string& bytes) {
  std::string h = bytes.substr(0, bytes.find("\r\n\r\n") + 4);
  for (const char* name : {"\r\nDate: ", "\r\nContent-Length: "}) {
    const size_t at = h.find(name);
    if (at == std::string::npos) continue;
    const size_t value = at + std::strlen(name);
    h.replace(value, h.find("\r\n", value) - value, "-");
  }
  return h;
}

// A HEAD is answered with exactly the header block GET's answer has, and not one byte after it,
// on every kind of answer: a route's, a stream's, an unknown path's 404, a wrong method's 405, a
// failed handler's 500. Its Content-Length is the length its body would have had: GET's, with
// the method named where an error names it. The GET that follows on the same connection is then
// read from its status line (with a body after the HEAD's header, a client takes that body for
// the next response: curl's "Excess found", Node's HPE_INVALID_CONSTANT).
TEST_F(HttpTest, HeadAnswersGetsHeadersWithoutTheBody) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.connected());
  for (const char* path : {"/health", "/nope", "/echo", "/throw", "/sse"}) {
    SCOPED_TRACE(path);
    c.buf.clear();
    ASSERT_TRUE(c.send(std::string("HEAD ") + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_TRUE(c.read_until("\r\n\r\n"));
    const std::string head = c.buf.substr(0, c.buf.find("\r\n\r\n") + 4);
    c.buf.erase(0, head.size());
    ASSERT_TRUE(c.send(std::string("GET ") + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_TRUE(c.read_until("\r\n\r\n"));
    ASSERT_TRUE(c.buf.starts_with("HTTP/1.1 ")) << "after the HEAD's header: " << c.buf;
    const std::string get = c.buf;
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(header_block(head), header_block(get));
    if (r->chunked()) continue;  // the stream: framed by chunks, no Content-Length
    std::string body = r->body();
    if (const size_t at = body.find("GET "); at != std::string::npos) body.replace(at, 3, "HEAD");
    EXPECT_NE(head.find("\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"),
              std::string::npos)
        << head;
  }
  // The connection is still in step: a POST's body comes back whole.
  auto echo = c.request("POST", "/echo", "after");
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->body(), "after");
}

// A HEAD that is refused before its route (no API key) has no body either.
TEST_F(HttpTest, ARefusedHeadHasNoBody) {
  Options o = options();
  o.api_key = "k";
  start(std::move(o));
  Client c(port_);
  ASSERT_TRUE(c.send("HEAD /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  ASSERT_TRUE(c.read_until("\r\n\r\n"));
  EXPECT_TRUE(c.buf.starts_with("HTTP/1.1 401 ")) << c.buf;
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  ASSERT_TRUE(c.read_until("{\"status\":\"ok\"}"));
  EXPECT_EQ(c.buf.find("HTTP/1.1 200 "), c.buf.find("\r\n\r\n") + 4) << c.buf;
}

Options small_body() {
  Options o = HttpTest::options();
  o.max_body_bytes = 1024;
  return o;
}

void expect_413(Client& c) {
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 413);
  auto e = parse_error(r->body());
  ASSERT_TRUE(e) << r->body();
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_FALSE(r->keep_alive());
  EXPECT_TRUE(c.wait_closed());
}

TEST_F(HttpTest, BodyAtTheLimitIsAccepted) {
  start(small_body());
  Client c(port_);
  auto r = c.request("POST", "/echo", std::string(1024, 'a'));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body().size(), 1024u);
}

TEST_F(HttpTest, TooLargeContentLengthIs413) {
  start(small_body());
  Client c(port_);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" +
                     std::string(5000, 'a')));
  expect_413(c);
}

TEST_F(HttpTest, TooLargeWithExpectContinueIsRefusedBeforeTheBody) {
  start(small_body());
  Client c(port_);
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\nExpect: "
             "100-continue\r\n\r\n"));
  expect_413(c);
}

TEST_F(HttpTest, ExpectContinueWithinTheLimit) {
  start(small_body());
  Client c(port_);
  ASSERT_TRUE(c.send(
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"));
  ASSERT_TRUE(c.read_until("HTTP/1.1 100 Continue\r\n\r\n"));
  c.buf.erase(0, c.buf.find("\r\n\r\n") + 4);
  ASSERT_TRUE(c.send("hello"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(r->body(), "hello");
}

TEST_F(HttpTest, TooLargeChunkedBodyIs413) {
  start(small_body());
  Client c(port_);
  std::string req = "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 3; ++i) req += "258\r\n" + std::string(600, 'b') + "\r\n";
  req += "0\r\n\r\n";
  ASSERT_TRUE(c.send(req));
  expect_413(c);
}

TEST_F(HttpTest, ChunkedBodyWithinTheLimit) {
  start(small_body());
  Client c(port_);
  ASSERT_TRUE(
      c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
             "chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body(), "abcde");
}

TEST_F(HttpTest, OversizedHeaderIs431AndGarbageIs400) {
  start();
  {
    Client c(port_);
    ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nX-Big: " + std::string(70000, 'h') + "\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 431);
  }
  {
    Client c(port_);
    ASSERT_TRUE(c.send("NOT HTTP AT ALL\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 400);
    EXPECT_TRUE(parse_error(r->body()));
  }
}

TEST_F(HttpTest, ApiKeyGuardsV1Only) {
  Options o = options();
  o.api_key = "sekrit-key";
  start(o);
  Client c(port_);
  auto check_401 = [&](const std::string& headers) {
    auto r = c.request("GET", "/v1/models", "", headers);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->result_int(), 401);
    auto e = parse_error(r->body());
    ASSERT_TRUE(e) << r->body();
    EXPECT_EQ(e->type, "invalid_request_error");
    EXPECT_EQ(e->code, "invalid_api_key");
  };
  check_401("");
  check_401("Authorization: Bearer wrong\r\n");
  check_401("Authorization: Bearer sekrit-ke\r\n");
  check_401("Authorization: Bearer sekrit-key2\r\n");
  check_401("Authorization: Basic c2Vrcml0LWtleQ==\r\n");
  auto ok = c.request("GET", "/v1/models", "", "Authorization: Bearer sekrit-key\r\n");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->result_int(), 200);
  EXPECT_EQ(status_of(c.request("GET", "/v1/models", "", "authorization: bearer sekrit-key\r\n")),
            200);
  // An unknown /v1 path does not reveal itself without the key.
  EXPECT_EQ(status_of(c.request("GET", "/v1/secret")), 401);
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

TEST_F(HttpTest, NoKeyConfiguredMeansOpen) {
  start();
  Client c(port_);
  EXPECT_EQ(status_of(c.request("GET", "/v1/models", "", "Authorization: Bearer anything\r\n")),
            200);
  EXPECT_EQ(status_of(c.request("GET", "/v1/models")), 200);
}

const char* kPreflight =
    "Origin: http://app.example\r\nAccess-Control-Request-Method: POST\r\n"
    "Access-Control-Request-Headers: authorization, content-type\r\n";

TEST_F(HttpTest, CorsIsOffByDefault) {
  start();
  Client c(port_);
  auto r = c.request("GET", "/health", "", "Origin: http://app.example\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "");
  r = c.request("OPTIONS", "/v1/models", "", kPreflight);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 405);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "");
}

TEST_F(HttpTest, CorsPreflightAndEcho) {
  Options o = options();
  o.cors_origins = {"http://app.example"};
  o.api_key = "k";
  start(o);
  Client c(port_);
  // Preflights carry no credentials, so they pass before the key check.
  auto r = c.request("OPTIONS", "/v1/models", "", kPreflight);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 204);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "http://app.example");
  EXPECT_NE(field(*r, "Access-Control-Allow-Methods").find("GET"), std::string::npos);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_FALSE(field(*r, "Access-Control-Max-Age").empty());
  EXPECT_EQ(field(*r, "Content-Length"), "");
  // Actual requests, including refused ones, carry the echo so the page can read them.
  r = c.request("GET", "/v1/models", "", "Origin: http://app.example\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 401);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "http://app.example");
  r = c.request("GET", "/health", "", "Origin: http://evil.example\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "");
  r = c.request("OPTIONS", "/v1/models", "",
                "Origin: http://evil.example\r\nAccess-Control-Request-Method: GET\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 403);
}

TEST_F(HttpTest, CorsWildcardEchoesAnyOrigin) {
  Options o = options();
  o.cors_origins = {"*"};
  start(o);
  Client c(port_);
  auto r = c.request("GET", "/health", "", "Origin: http://localhost:3000\r\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(field(*r, "Access-Control-Allow-Origin"), "http://localhost:3000");
}

TEST_F(HttpTest, SseEventsArriveIncrementally) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_until("data: {\"n\":0}\n\n"));
  EXPECT_FALSE(sse_done_) << "the first event must arrive while the handler is still producing";
  const std::string head = c.buf.substr(0, c.buf.find("\r\n\r\n"));
  EXPECT_NE(head.find("HTTP/1.1 200"), std::string::npos);
  EXPECT_NE(head.find("Content-Type: text/event-stream"), std::string::npos);
  EXPECT_NE(head.find("Cache-Control: no-cache"), std::string::npos);
  EXPECT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos);
  ASSERT_TRUE(c.read_until("data: {\"n\":1}\n\n"));
  EXPECT_FALSE(sse_done_);
  ASSERT_TRUE(c.read_until("data: [DONE]\n\n"));
  ASSERT_TRUE(c.read_until("\r\n0\r\n\r\n"));
  EXPECT_NE(c.buf.find("data: line1\ndata: line2\n\n"), std::string::npos);
  c.buf.clear();
  // The same connection serves the next request.
  auto r = c.request("GET", "/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 200);
}

TEST_F(HttpTest, SseParsesAsChunkedResponse) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->chunked());
  EXPECT_EQ(r->body().rfind("data: {\"n\":0}\n\n", 0), 0u);
  EXPECT_NE(r->body().find("data: [DONE]\n\n"), std::string::npos);
}

TEST_F(HttpTest, SseOverHttp10EndsWithTheConnection) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /sse HTTP/1.0\r\n\r\n"));
  ASSERT_TRUE(c.wait_closed());
  EXPECT_EQ(c.buf.find("Transfer-Encoding"), std::string::npos);
  EXPECT_NE(c.buf.find("\r\n\r\ndata: {\"n\":0}\n\n"), std::string::npos);
  EXPECT_NE(c.buf.find("data: [DONE]\n\n"), std::string::npos);
}

TEST_F(HttpTest, ClientLeavingMidStreamStopsTheProducer) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_until("data: tick 2\n\n"));
  const auto t0 = Clock::now();
  c.close();
  ASSERT_TRUE(eventually([&] { return producer_done_.load(); }, 2s));
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(saw_closed_);
  // The server keeps serving others.
  Client d(port_);
  EXPECT_EQ(status_of(d.request("GET", "/health")), 200);
}

TEST_F(HttpTest, ClosedTurnsTrueWhileTheHandlerIsSilent) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::shared_ptr<ResponseWriter> w = held(0);
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(w->closed());
  c.close();
  EXPECT_TRUE(eventually([&] { return w->closed(); }, 2s));
  EXPECT_FALSE(w->send(200, "text/plain", "late"));
  EXPECT_FALSE(w->start_events(kComment));
  std::lock_guard lk(mutex_);
  held_.clear();
}

TEST_F(HttpTest, AnswerFromAnotherThreadLater) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::shared_ptr<ResponseWriter> w = held(0);
  {
    std::lock_guard lk(mutex_);
    held_.clear();
  }
  std::thread t([w] {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(w->send(201, "text/plain", "later", {{"X-Extra", "1"}, {"Bad\r\nName", "x"}}));
    EXPECT_FALSE(w->send(200, "text/plain", "twice"));
    EXPECT_FALSE(w->event("not a stream"));
  });
  auto r = c.read_response();
  t.join();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 201);
  EXPECT_EQ(r->body(), "later");
  EXPECT_EQ(field(*r, "X-Extra"), "1");
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

TEST_F(HttpTest, SilentOrThrowingHandlersGet500) {
  start();
  Client c(port_);
  for (const char* path : {"/silent", "/throw"}) {
    auto r = c.request("GET", path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->result_int(), 500) << path;
    auto e = parse_error(r->body());
    ASSERT_TRUE(e) << r->body();
    EXPECT_EQ(e->type, "server_error");
  }
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

TEST_F(HttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  Client c(port_);
  for (int i = 0; i < 5; ++i) {
    auto r = c.request("POST", "/echo", "n" + std::to_string(i));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body(), "n" + std::to_string(i));
  }
  // Two pipelined requests sent at once are answered in order.
  ASSERT_TRUE(c.send(
      "POST /echo HTTP/1.1\r\nContent-Length: 1\r\n\r\nAPOST /echo HTTP/1.1\r\nContent-Length: "
      "1\r\n\r\nB"));
  auto a = c.read_response();
  auto b = c.read_response();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->body(), "A");
  EXPECT_EQ(b->body(), "B");
  // "Connection: close" is honoured.
  auto last = c.request("GET", "/health", "", "Connection: close\r\n");
  ASSERT_TRUE(last);
  EXPECT_FALSE(last->keep_alive());
  EXPECT_TRUE(c.wait_closed());
}

TEST_F(HttpTest, ConcurrentClients) {
  start();
  constexpr int kClients = 8, kRequests = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kClients; ++t) {
    threads.emplace_back([&, t] {
      Client c(port_);
      for (int i = 0; i < kRequests; ++i) {
        const std::string body = std::to_string(t) + "/" + std::to_string(i);
        auto r = c.request("POST", "/echo", body);
        if (r && r->body() == body) ++ok;
      }
    });
  }
  // Streams in parallel with the plain requests.
  Client s(port_);
  ASSERT_TRUE(s.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n"));
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok, kClients * kRequests);
  EXPECT_TRUE(s.read_until("data: [DONE]\n\n"));
}

TEST_F(HttpTest, SlowReaderGetsEverythingAndTheProducerIsHeldBack) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /big HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::this_thread::sleep_for(700ms);
  // 40 MB cannot fit in the socket buffers plus the few MB the writer may queue.
  EXPECT_FALSE(producer_done_);
  auto r = c.read_response(20s);
  ASSERT_TRUE(r);
  EXPECT_TRUE(producer_done_);
  const std::string& body = r->body();
  const size_t per_event = 6 + kBigEvent + 2;  // "data: " + payload + "\n\n"
  ASSERT_EQ(body.size(), per_event * kBigEvents);
  for (int i = 0; i < kBigEvents; i += 97) {
    char num[8];
    std::snprintf(num, sizeof num, "%06d", i);
    EXPECT_EQ(body.compare(i * per_event, 12, std::string("data: ") + num), 0) << i;
  }
}

TEST_F(HttpTest, StopWhileStreamingEndsCleanly) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /forever HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_until("data: tick 1\n\n"));
  Client idle(port_);
  ASSERT_EQ(status_of(idle.request("GET", "/health")), 200);
  const auto t0 = Clock::now();
  server_->stop();
  EXPECT_LT(Clock::now() - t0, 9s);
  EXPECT_TRUE(idle.wait_closed(1s));
  EXPECT_TRUE(c.wait_closed(1s));
  EXPECT_TRUE(eventually([&] { return producer_done_.load(); }, 2s));
  EXPECT_TRUE(saw_closed_);
  server_->wait();  // returns at once after stop()
  server_->stop();  // and a second stop is harmless
}

TEST_F(HttpTest, StopWithOnlyIdleConnectionsIsQuick) {
  start();
  Client a(port_), b(port_);
  ASSERT_EQ(status_of(a.request("GET", "/health")), 200);
  ASSERT_TRUE(b.connected());
  std::thread waiter([this] { server_->wait(); });
  const auto t0 = Clock::now();
  server_->stop();
  waiter.join();
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_TRUE(a.wait_closed(1s));
  EXPECT_TRUE(b.wait_closed(1s));
  Client late(port_);
  EXPECT_FALSE(late.connected() && late.request("GET", "/health").has_value());
}

// ---- keepalives on silent event streams ------------------------------------------------

// The blocks of an SSE body, each without its blank line; false if the body does not end with
// one (a block cut short).
bool sse_blocks(const std::string& body, std::vector<std::string>* out) {
  size_t at = 0;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2)
    out->push_back(body.substr(at, end - at));
  return at == body.size();
}

size_t count(const std::string& s, std::string_view needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) n++;
  return n;
}

// A producer that is silent (a prefill chunk that takes an hour) still has its stream say the
// keepalive at the interval, from the connection's timer; once it writes again they stop.
TEST_F(HttpTest, ASilentStreamSaysItsKeepaliveAtTheInterval) {
  Options o = options();
  o.keepalive = 250ms;
  start(std::move(o));
  quiet_ = 1300ms;
  const std::string ping = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
  Client c(port_);
  ASSERT_TRUE(c.send("GET /quiet HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_until("data: first\n\n"));
  const Clock::time_point first = Clock::now();
  while (c.buf.find("data: second\n\n") == std::string::npos)
    ASSERT_TRUE(c.recv_some(Clock::now() + kWait));
  // The silence as this side saw it (a loaded machine stretches the sleep, and delivery shifts
  // either end): about one keepalive per interval of it, timers allowing, and never one ahead.
  const double intervals = std::chrono::duration<double>(Clock::now() - first) / 250ms;
  ASSERT_TRUE(c.read_until("\r\n0\r\n\r\n"));
  const size_t pings = count(c.buf, ping);
  EXPECT_GE((double)pings, intervals / 2 - 1) << intervals << " intervals";
  EXPECT_GE(pings, 1u);
  EXPECT_LE((double)pings, intervals + 2) << intervals << " intervals";
  // Whole blocks: the events, with the pings between them, and nothing after the last event.
  auto r = c.read_one(Clock::now() + kWait);
  ASSERT_TRUE(r);
  std::vector<std::string> blocks;
  ASSERT_TRUE(sse_blocks(r->body(), &blocks)) << r->body();
  ASSERT_EQ(blocks.size(), pings + 2);
  EXPECT_EQ(blocks.front(), "event: message\ndata: first");
  EXPECT_EQ(blocks.back(), "event: message\ndata: second");
  for (size_t i = 1; i + 1 < blocks.size(); i++)
    EXPECT_EQ(blocks[i], "event: ping\ndata: {\"type\":\"ping\"}");
}

// However often the keepalive is due, it goes out between two events, never inside one.
TEST_F(HttpTest, KeepalivesNeverLandInsideAnEvent) {
  Options o = options();
  o.keepalive = 1ms;
  start(std::move(o));
  Client c(port_);
  ASSERT_TRUE(c.send("GET /chatty HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response(20s);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->chunked());
  std::vector<std::string> blocks;
  ASSERT_TRUE(sse_blocks(r->body(), &blocks));
  int next = 0, keepalives = 0;
  for (const std::string& b : blocks) {
    if (b == ": keepalive") {
      keepalives++;
      continue;
    }
    ASSERT_LT(next, kChattyEvents);
    std::string want;
    const std::string event = chatty_event(next++);
    for (size_t at = 0, end = 0; end != std::string::npos; at = end + 1) {
      end = event.find('\n', at);
      want += (want.empty() ? "" : "\n") + std::string("data: ") + event.substr(at, end - at);
    }
    ASSERT_EQ(b, want) << "event " << next - 1;
  }
  EXPECT_EQ(next, kChattyEvents);
  EXPECT_GT(keepalives, 0);
}

// A plain response, however long its handler takes, is the response alone; so is a HEAD of a
// stream.
TEST_F(HttpTest, PlainResponsesGetNoKeepalive) {
  Options o = options();
  o.keepalive = 50ms;
  start(std::move(o));
  Client c(port_);
  ASSERT_TRUE(c.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::this_thread::sleep_for(400ms);
  held(0)->send(200, "text/plain", "done");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body(), "done");
  EXPECT_EQ(c.interim, 0);
  EXPECT_TRUE(c.buf.empty()) << c.buf;

  quiet_ = 400ms;
  Client h(port_);
  ASSERT_TRUE(h.send("HEAD /quiet HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(h.read_until("\r\n\r\n"));
  std::this_thread::sleep_for(600ms);  // the stream ended meanwhile
  h.recv_some(Clock::now() + 100ms);
  EXPECT_EQ(h.buf.find("ping"), std::string::npos) << h.buf;
  EXPECT_EQ(h.buf.size(), h.buf.find("\r\n\r\n") + 4) << h.buf;
  std::lock_guard lk(mutex_);
  held_.clear();
}

// A client that closes its socket while the stream is silent sends a FIN, which says no more than
// "no more requests"; the keepalive's write is what finds it gone (the kernel answers it with a
// reset), within an interval, so the producer learns of it before it next writes.
TEST_F(HttpTest, AKeepaliveWriteFindsAClientThatLeftASilentStream) {
  Options o = options();
  o.keepalive = 200ms;
  start(std::move(o));
  Client c(port_);
  ASSERT_TRUE(c.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  std::shared_ptr<ResponseWriter> w = held(0);
  ASSERT_TRUE(w->start_events(kComment));
  ASSERT_TRUE(c.read_until("\r\n\r\n"));
  c.close();
  const auto t0 = Clock::now();
  EXPECT_TRUE(eventually([&] { return w->closed(); }, 3s));
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_FALSE(w->event("late"));
  std::lock_guard lk(mutex_);
  held_.clear();
}

// ---- keep-alive, pipelining and half-closes ----------------------------------------------

// Requests sent back to back on one connection, answered later from other threads or at once,
// are all answered, in order.
TEST_F(HttpTest, PipelinedRequestsAreAllAnsweredInOrder) {
  start();
  Client c(port_);
  ASSERT_TRUE(
      c.send("GET /later?a HTTP/1.1\r\nHost: x\r\n\r\n"
             "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
             "POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
             "GET /later?b HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto a = c.read_response();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->body(), "later a");
  auto h = c.read_response();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->body(), R"({"status":"ok"})");
  auto e = c.read_response();
  ASSERT_TRUE(e);
  EXPECT_EQ(e->body(), "abc");
  auto b = c.read_response();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->body(), "later b");
}

// A stray CRLF after a body (some clients send one) neither loses the answer nor the next one.
TEST_F(HttpTest, AStrayCrlfAfterABodyIsHarmless) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body(), "hi");
  EXPECT_EQ(status_of(c.request("GET", "/health")), 200);
}

// The next request sent while a stream runs waits for the stream, which ends whole.
TEST_F(HttpTest, ARequestSentDuringAStreamWaitsForIt) {
  start();
  Client c(port_);
  ASSERT_TRUE(c.send("GET /sse HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_until("data: {\"n\":0}"));
  ASSERT_TRUE(c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto sse = c.read_response();
  ASSERT_TRUE(sse);
  EXPECT_NE(sse->body().find("data: [DONE]"), std::string::npos) << sse->body();
  auto h = c.read_response();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->result_int(), 200);
}

// HTTP lets a client close its sending side once the request is out; it still gets its answer,
// whether the handler answers at once or later.
TEST_F(HttpTest, AHalfClosedClientGetsItsResponse) {
  start();
  for (int i = 0; i < 100; ++i) {
    Client c(port_);
    const char* target = i % 2 ? "/health" : "/later?h";
    ASSERT_TRUE(c.send(std::string("GET ") + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    c.half_close();
    auto r = c.read_response();
    ASSERT_TRUE(r) << "round " << i;
    EXPECT_EQ(r->result_int(), 200) << "round " << i;
    EXPECT_TRUE(c.wait_closed()) << "round " << i;  // nothing more can come: the server closes
  }
  // HTTP/1.0, which has no interim responses, too.
  Client c(port_);
  ASSERT_TRUE(c.send("GET /later?old HTTP/1.0\r\n\r\n"));
  c.half_close();
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body(), "later old");
  EXPECT_EQ(c.interim, 0);
}

TEST_F(HttpTest, ARequestThatStallsGets408) {
  Options o = options();
  o.read_timeout = 300ms;
  start(o);
  Client c(port_);
  ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc"));
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 408);
  auto e = parse_error(r->body());
  ASSERT_TRUE(e) << r->body();
  EXPECT_EQ(e->code, "request_timeout");
  EXPECT_TRUE(c.wait_closed());
  // An idle connection just closes, with nothing to say.
  Client idle(port_);
  EXPECT_TRUE(idle.wait_closed(3s));
  EXPECT_TRUE(idle.buf.empty());
}

// At the limit with every connection busy, a newcomer is told so; once one is idle, the newcomer
// takes its place.
TEST_F(HttpTest, ConnectionsOverTheLimitAreRefusedClearly) {
  start_with_limit(3);
  std::vector<std::unique_ptr<Client>> open;
  for (size_t i = 0; i < 3; ++i) {
    open.push_back(std::make_unique<Client>(port_));
    ASSERT_TRUE(open.back()->send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
    // One at a time, so held(i) is open[i]'s writer (two I/O threads may take them in any order).
    ASSERT_TRUE(eventually([&] { return held_count() == i + 1; }));
  }
  Client extra(port_);
  auto r = extra.request("GET", "/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->result_int(), 503);
  auto e = parse_error(r->body());
  ASSERT_TRUE(e) << r->body();
  EXPECT_EQ(e->code, "too_many_connections");
  EXPECT_EQ(field(*r, "Retry-After"), "1");
  EXPECT_EQ(server_->stats().idle_connections_evicted, 0u);
  // One is answered and waits for its next request: a newcomer is served in its place.
  ASSERT_TRUE(held(0)->send(200, "text/plain", "done"));
  auto done = open[0]->read_response();
  ASSERT_TRUE(done);
  EXPECT_EQ(done->body(), "done");
  // It is idle once its answer is written, just after it is read.
  EXPECT_TRUE(eventually([&] { return newcomer_is_served(); }));
  EXPECT_TRUE(open[0]->wait_closed());
  EXPECT_EQ(server_->stats().idle_connections_evicted, 1u);
}

// A connection that ends gives its place back: with room for one, a client that asked to close
// after its answer is followed by another that is served, with no eviction needed.
TEST_F(HttpTest, AClosedConnectionGivesItsPlaceBack) {
  start_with_limit(1);
  Client first(port_);
  ASSERT_TRUE(first.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_EQ(status_of(first.read_response()), 200);
  EXPECT_TRUE(first.wait_closed());
  // A closing connection is never evicted, so until the server has let go of it a newcomer is
  // refused; once it has, the newcomer takes the freed place.
  EXPECT_TRUE(eventually([&] { return newcomer_is_served(); }));
  EXPECT_EQ(server_->stats().idle_connections_evicted, 0u);
}

// At the limit, the connection idle the longest is closed for a newcomer, whether it is between
// requests or never sent one.
TEST_F(HttpTest, AtTheLimitTheLongestIdleConnectionMakesWay) {
  start_with_limit(3);
  Client busy(port_);
  ASSERT_TRUE(busy.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  Client silent(port_);  // never sends a request
  ASSERT_TRUE(silent.connected());
  Client between(port_);  // idle after a request
  ASSERT_EQ(status_of(between.request("GET", "/health")), 200);
  Client first(port_);
  EXPECT_EQ(status_of(first.request("GET", "/health")), 200);
  EXPECT_TRUE(silent.wait_closed());
  EXPECT_TRUE(silent.buf.empty());
  Client second(port_);
  EXPECT_EQ(status_of(second.request("GET", "/health")), 200);
  EXPECT_TRUE(between.wait_closed());
  EXPECT_EQ(server_->stats().idle_connections_evicted, 2u);
  // The busy one was never taken, and the newest idle one still serves.
  ASSERT_TRUE(held(0)->send(200, "text/plain", "kept"));
  auto kept = busy.read_response();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->body(), "kept");
  EXPECT_EQ(status_of(second.request("GET", "/health")), 200);
}

// Idle connections cannot lock clients out: with the limit held by 600 idle ones, /health answers
// every probe at once, and nothing in flight is cut (a stream, a handler still answering, a
// request half received).
TEST_F(HttpTest, IdleConnectionsCannotLockClientsOut) {
  constexpr int kIdle = 600;
  ASSERT_TRUE(allow_descriptors(2 * (kIdle + 64))) << "too few file descriptors for the test";
  start();  // the default limit
  const size_t limit = options().max_connections;
  ASSERT_EQ(limit, 512u);
  Client stream(port_);
  ASSERT_TRUE(stream.send("GET /ticks HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(stream.read_until("data: tick 1\n\n"));
  Client busy(port_);
  ASSERT_TRUE(busy.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(eventually([&] { return held_count() == 1; }));
  Client partial(port_);
  ASSERT_TRUE(partial.send("GET /health HTTP/1.1\r\n"));

  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<Client>(port_));
    ASSERT_TRUE(idle.back()->connected()) << i;
    if (i % 2 == 0) {
      ASSERT_EQ(status_of(idle.back()->request("GET", "/health")), 200) << i;
    }
  }
  const uint64_t over = 3 + kIdle - limit;
  EXPECT_TRUE(eventually([&] { return server_->stats().idle_connections_evicted >= over; }));
  EXPECT_EQ(server_->stats().idle_connections_evicted, over);
  EXPECT_TRUE(idle.front()->wait_closed());                           // the longest idle
  EXPECT_EQ(status_of(idle.back()->request("GET", "/health")), 200);  // the newest

  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    Client probe(port_);
    EXPECT_EQ(status_of(probe.request("GET", "/health")), 200) << i;
    EXPECT_LT(Clock::now() - t0, 200ms) << i;
  }

  ASSERT_TRUE(partial.send("Host: x\r\n\r\n"));
  EXPECT_EQ(status_of(partial.read_response()), 200);
  ASSERT_TRUE(held(0)->send(200, "text/plain", "answered"));
  auto answered = busy.read_response();
  ASSERT_TRUE(answered);
  EXPECT_EQ(answered->body(), "answered");
  release_ = true;
  auto streamed = stream.read_response();
  ASSERT_TRUE(streamed);
  const std::string& body = streamed->body();
  std::string whole;
  for (size_t i = 0, at = 0; (at = body.find("data: tick", at)) != std::string::npos; ++i, ++at)
    whole += "data: tick " + std::to_string(i) + "\n\n";
  EXPECT_EQ(body, whole + "data: [DONE]\n\n");
}

// ---- access: Host names and content types --------------------------------------------------

TEST_F(HttpTest, OnlyAllowedHostNamesAreServed) {
  Options o = options();
  o.allowed_hosts = {"localhost", "127.0.0.1", "::1"};
  start(o);
  auto ask = [&](const std::string& host_line) {
    Client c(port_);
    c.send("GET /health HTTP/1.1\r\n" + host_line + "\r\n");
    return c.read_response();
  };
  EXPECT_EQ(status_of(ask("Host: localhost:8000\r\n")), 200);
  EXPECT_EQ(status_of(ask("Host: LOCALHOST\r\n")), 200);
  EXPECT_EQ(status_of(ask("Host: 127.0.0.1:1234\r\n")), 200);
  EXPECT_EQ(status_of(ask("Host: [::1]:8000\r\n")), 200);
  auto bad = ask("Host: rebind.example.com:8000\r\n");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->result_int(), 403);
  auto e = parse_error(bad->body());
  ASSERT_TRUE(e) << bad->body();
  EXPECT_EQ(e->code, "host_not_allowed");
  EXPECT_NE(e->message.find("rebind.example.com"), std::string::npos);
}

TEST_F(HttpTest, CrossSiteFormPostsAreRefused) {
  Options o = options();
  o.cors_origins = {"http://app.example"};
  start(o);
  auto post = [&](const std::string& headers) {
    Client c(port_);
    return c.request("POST", "/echo", "{}", headers);
  };
  EXPECT_EQ(status_of(post("Content-Type: application/json\r\n")), 200);
  EXPECT_EQ(status_of(post("Content-Type: application/json; charset=utf-8\r\n")), 200);
  EXPECT_EQ(status_of(post("")), 200);  // no type at all: not a browser's form
  auto form = post("Content-Type: text/plain\r\nOrigin: http://evil.example\r\n");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->result_int(), 415);
  auto e = parse_error(form->body());
  ASSERT_TRUE(e) << form->body();
  EXPECT_EQ(e->code, "unsupported_media_type");
  EXPECT_EQ(status_of(post("Content-Type: application/x-www-form-urlencoded\r\n")), 415);
  // An origin CORS lets in may send what it likes.
  EXPECT_EQ(status_of(post("Content-Type: text/plain\r\nOrigin: http://app.example\r\n")), 200);
}

TEST_F(HttpTest, BindFailureIsAClearError) {
  start();
  Options o = options();
  o.port = port_;
  Server second(o);
  try {
    second.start();
    FAIL() << "binding a port in use must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(port_)), std::string::npos) << e.what();
  }
}

TEST_F(HttpTest, HostNamesResolveLocally) {
  Options o = options();
  o.host = "localhost";
  Server s(o);
  s.start();
  Client c(s.port());
  ASSERT_TRUE(c.connected());
  EXPECT_EQ(status_of(c.request("GET", "/nothing")), 404);
}

}  // namespace
}  // namespace waste::http
