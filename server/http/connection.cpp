#include "server/http/connection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/read.hpp>
#include <cctype>
#include <ctime>
#include <string_view>

#include "engine/base/platform.h"
#include "server/http/percent_decoding.h"

namespace waste::http::detail {

namespace bhttp = beast::http;

namespace {

// While a response is produced the socket is read only to notice the client leaving; bytes
// that arrive instead are the start of the next request and stay in the buffer.
constexpr size_t kPeekChunk = 16 * 1024;

std::string_view sv(beast::string_view s) {
  return {s.data(), s.size()};
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return lower(a) == lower(b);
}

std::string endpoint_string(const tcp::endpoint& ep) {
  const std::string addr = ep.address().to_string();
  if (ep.address().is_v6()) return fmt::format("[{}]:{}", addr, ep.port());
  return fmt::format("{}:{}", addr, ep.port());
}

// RFC 9110 IMF-fixdate, built by hand so that the process locale cannot change it.
std::string http_date() {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::time_t now = std::time(nullptr);
  std::tm t{};
  gmtime_r(&now, &t);
  return fmt::format("{}, {:02} {} {} {:02}:{:02}:{:02} GMT", kDays[t.tm_wday], t.tm_mday,
                     kMonths[t.tm_mon], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s) {
    if (std::isalnum(c)) continue;
    if (std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) == std::string_view::npos)
      return false;
  }
  return true;
}

bool is_header_value(std::string_view s) {
  return s.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

// Adds a handler's own headers, refusing the ones that would break message framing or the
// header block itself.
void append_extra(std::string* h, const std::map<std::string, std::string>& extra) {
  for (const auto& [name, value] : extra) {
    const std::string n = lower(name);
    if (n == "content-length" || n == "transfer-encoding" || n == "connection") continue;
    if (!is_token(name) || !is_header_value(value)) {
      spdlog::warn("http: dropping invalid response header '{}'", name);
      continue;
    }
    *h += fmt::format("{}: {}\r\n", name, value);
  }
}

// One SSE field per line of `data`, so that embedded newlines cannot end the event early.
std::string sse_text(std::string_view prefix, std::string_view data) {
  std::string out;
  out.reserve(data.size() + prefix.size() + 2);
  size_t start = 0;
  for (;;) {
    const size_t end = data.find_first_of("\r\n", start);
    out += prefix;
    out += data.substr(start, end == std::string_view::npos ? end : end - start);
    out += '\n';
    if (end == std::string_view::npos) break;
    start = end + (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n' ? 2 : 1);
  }
  out += '\n';
  return out;
}

std::string named_sse_text(std::string_view name, std::string_view data) {
  return fmt::format("event: {}\n{}", name, sse_text("data: ", data));
}

std::string keepalive_text(const Keepalive& k) {
  return k.event.empty() ? sse_text(": ", k.data) : named_sse_text(k.event, k.data);
}

std::string chunk(std::string_view payload) {
  return fmt::format("{:x}\r\n{}\r\n", payload.size(), payload);
}

const std::string* header(const Request& r, const char* name) {
  auto it = r.headers.find(name);
  return it == r.headers.end() ? nullptr : &it->second;
}

void disarm(net::steady_timer& t) {
  t.expires_at(net::steady_timer::time_point::max());
}

const char* kJson = "application/json";

}  // namespace

std::string ServerShared::error_body(const std::string& path, int status,
                                     const std::string& message, const std::string& code) const {
  return opt.error_format(path, Refusal{status, message, code});
}

bool ServerShared::evict_idle(std::shared_ptr<Connection>* victim) {
  for (;;) {
    ConnectionSlot* oldest = nullptr;
    int64_t since = 0;
    for (auto& [id, slot] : conns) {
      const int64_t t = slot.idle_since.load();
      if (slot.admitted && t >= 0 && (!oldest || t < since)) {
        oldest = &slot;
        since = t;
      }
    }
    if (!oldest) return false;
    // Lost only to that connection beginning a request (or idling anew) since the scan.
    if (!oldest->idle_since.compare_exchange_strong(since, ConnectionSlot::kEvicted)) continue;
    oldest->admitted = false;
    *victim = oldest->conn.lock();
    return true;
  }
}

bool ServerShared::on_io_thread() const {
  return std::find(io_threads.begin(), io_threads.end(), std::this_thread::get_id()) !=
         io_threads.end();
}

void Exchange::mark_closed() {
  {
    std::lock_guard lk(m);
    closed = true;
  }
  cv.notify_all();
}

void Exchange::drained(size_t n) {
  {
    std::lock_guard lk(m);
    queued -= std::min(queued, n);
  }
  cv.notify_all();
}

// The ResponseWriter handed to route handlers. It never touches the socket: every call
// checks the exchange state and posts an operation onto the connection's strand, under the
// exchange lock so that calls from several threads keep their order.
class Writer final : public ResponseWriter {
 public:
  Writer(std::weak_ptr<Connection> conn, std::shared_ptr<Exchange> ex,
         std::shared_ptr<ServerShared> shared, std::string path)
      : conn_(std::move(conn)),
        ex_(std::move(ex)),
        shared_(std::move(shared)),
        path_(std::move(path)) {}

  // A handler that drops its writer without answering still gets its client an answer.
  ~Writer() override {
    switch (state()) {
      case State::kNone:
        send(500, kJson, shared_->error_body(path_, 500, "the server produced no response"));
        break;
      case State::kStreaming:
        finish();
        break;
      case State::kDone:
        break;
    }
  }

  bool send(int status, const std::string& content_type, std::string body,
            const std::map<std::string, std::string>& extra = {}) override {
    if (!wait_for_room()) return false;
    const size_t credit = body.size();
    PlainResponse r{status, content_type, std::move(body), extra};
    return submit(State::kNone, State::kDone, credit,
                  [r = std::move(r)](Connection& c, const std::shared_ptr<Exchange>& ex) mutable {
                    c.on_response(ex, std::move(r));
                  });
  }

  bool start_events(Keepalive keepalive) override {
    return submit(State::kNone, State::kStreaming, 0,
                  [k = keepalive_text(keepalive)](Connection& c,
                                                  const std::shared_ptr<Exchange>& ex) mutable {
                    c.on_events_start(ex, std::move(k));
                  });
  }

  bool event(const std::string& data) override { return stream_text(sse_text("data: ", data)); }
  bool named_event(const std::string& name, const std::string& data) override {
    return stream_text(named_sse_text(name, data));
  }

  void finish() override {
    submit(State::kStreaming, State::kDone, 0,
           [](Connection& c, const std::shared_ptr<Exchange>& ex) { c.on_events_end(ex); });
  }

  bool closed() const override {
    std::lock_guard lk(ex_->m);
    return ex_->closed;
  }

  // After a handler threw: answer if nothing was sent yet, else end the stream.
  void fail(const std::string& message) {
    if (state() == State::kNone)
      send(500, kJson, shared_->error_body(path_, 500, message));
    else
      finish();
  }

 private:
  using State = Exchange::State;

  State state() const {
    std::lock_guard lk(ex_->m);
    return ex_->state;
  }

  bool stream_text(std::string text) {
    if (!wait_for_room()) return false;
    const size_t credit = text.size();
    return submit(
        State::kStreaming, State::kStreaming, credit,
        [t = std::move(text)](Connection& c, const std::shared_ptr<Exchange>& ex) mutable {
          c.on_event(ex, std::move(t));
        });
  }

  // Backpressure: a producer thread waits while the client is behind. An I/O thread never
  // waits, since it may be the very thread that has to drain the queue.
  bool wait_for_room() {
    if (shared_->on_io_thread()) return true;
    std::unique_lock lk(ex_->m);
    ex_->cv.wait(lk, [&] { return ex_->closed || ex_->queued <= kHighWater; });
    return !ex_->closed;
  }

  template <class Op>
  bool submit(State from, State to, size_t credit, Op op) {
    // The gate keeps the io_context alive while we post; the strong reference is declared
    // after it and released before it, outside the exchange lock, because dropping the last
    // reference runs ~Connection, which takes that lock.
    std::shared_lock gate(shared_->gate_mutex);
    if (!shared_->gate_open) return false;
    std::shared_ptr<Connection> conn;
    std::lock_guard lk(ex_->m);
    if (ex_->closed || ex_->state != from) return false;
    conn = conn_.lock();
    if (!conn) {
      ex_->closed = true;
      return false;
    }
    ex_->state = to;
    ex_->queued += credit;
    net::post(conn->executor(), [conn, ex = ex_, op = std::move(op)]() mutable { op(*conn, ex); });
    return true;
  }

  std::weak_ptr<Connection> conn_;
  std::shared_ptr<Exchange> ex_;
  std::shared_ptr<ServerShared> shared_;
  std::string path_;  // the request's, for the shape of errors
};

Connection::Connection(tcp::socket socket, std::shared_ptr<ServerShared> shared)
    : shared_(std::move(shared)),
      socket_(std::move(socket)),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      probe_timer_(socket_.get_executor()),
      keepalive_timer_(socket_.get_executor()) {
  beast::error_code ec;
  const tcp::endpoint ep = socket_.remote_endpoint(ec);
  remote_ = ec ? std::string("?") : endpoint_string(ep);
  // Each SSE event is a small write that must leave at once, not wait for an ACK.
  socket_.set_option(tcp::no_delay(true), ec);
}

Connection::~Connection() {
  if (slot_) {
    {
      std::lock_guard lk(shared_->conn_mutex);
      if (slot_->admitted) shared_->admitted--;
      shared_->conns.erase(id_);
    }
    shared_->conn_cv.notify_all();
  }
  // Producers blocked on backpressure must not wait for a connection that is gone.
  if (exchange_) exchange_->mark_closed();
  for (const Out& o : queue_)
    if (o.credit_to) o.credit_to->mark_closed();
  for (const Out& o : inflight_)
    if (o.credit_to) o.credit_to->mark_closed();
}

void Connection::start() {
  {
    std::lock_guard lk(shared_->conn_mutex);
    shared_->starting++;
  }
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->do_start(); });
}

void Connection::request_stop() {
  net::post(socket_.get_executor(), [self = shared_from_this()] {
    // A response in progress gets its grace period; response_done() closes afterwards.
    if (self->phase_ != Phase::kResponding) self->close_now();
  });
}

void Connection::force_close() {
  net::post(socket_.get_executor(), [self = shared_from_this()] { self->close_now(); });
}

void Connection::do_start() {
  std::shared_ptr<Connection> evicted;  // released after the lock: ~Connection takes it
  bool admitted = false;
  {
    std::lock_guard lk(shared_->conn_mutex);
    shared_->starting--;
    if (shared_->stopping) {
      shared_->conn_cv.notify_all();  // stop() may be waiting for this one to start
      return close_now();
    }
    id_ = ++shared_->next_conn_id;
    slot_ = &shared_->conns[id_];
    slot_->conn = weak_from_this();
    admitted = shared_->admitted < shared_->opt.max_connections;
    if (admitted)
      shared_->admitted++;
    else
      admitted = shared_->evict_idle(&evicted);  // idle connections cannot lock clients out
    slot_->admitted = admitted;
  }
  if (evicted) {
    if (shared_->evictions++ % 1000 == 0)
      spdlog::warn(
          "http: {} connections are open (--max-connections): closing the longest idle for {}; "
          "{} so far",
          shared_->opt.max_connections, remote_, shared_->evictions.load());
    evicted->force_close();
  }
  if (!admitted) {
    if (shared_->refusals++ % 1000 == 0)  // a flood is logged, not every one of it
      spdlog::warn("http: refusing {}: {} connections are open (--max-connections); {} so far",
                   remote_, shared_->opt.max_connections, shared_->refusals.load());
    return refuse(503,
                  fmt::format("the server has {} connections open, its limit; retry shortly",
                              shared_->opt.max_connections),
                  "too_many_connections");
  }
  read_request(true);
}

void Connection::arm(net::steady_timer& t, std::chrono::steady_clock::duration d) {
  t.expires_after(d);
  t.async_wait([self = shared_from_this(), &t](beast::error_code ec) {
    // A wait that had already fired when the timer was re-armed or disarmed completes
    // without error; only a deadline that is really past counts.
    if (ec || t.expiry() > std::chrono::steady_clock::now()) return;
    self->on_deadline(t);
  });
}

// A request that stalled part-way is told so (408); an idle connection or a stalled write
// just closes.
void Connection::on_deadline(const net::steady_timer& t) {
  if (&t == &read_timer_ && phase_ == Phase::kReading && parser_ && parser_->got_some()) {
    // The read still pending is stopped first; its completion answers (on_read_error).
    timed_out_ = true;
    beast::error_code ec;
    socket_.cancel(ec);
    return;
  }
  close_now();
}

// `fresh`: a new wait for a request begins (its deadline with it); else more of its first bytes
// came.
void Connection::read_request(bool fresh) {
  phase_ = Phase::kReading;
  if (fresh) arm(read_timer_, shared_->opt.read_timeout);
  // Empty lines before a request line are ignored (RFC 9112 §2.2): some clients end a body
  // with a CRLF it does not count.
  const std::string_view b(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.consume(std::min(b.find_first_not_of("\r\n"), b.size()));
  if (buffer_.size() == 0) {
    if (peer_eof_ || !become_idle()) return close_now();
    return watch_peer();  // the request's first bytes are read raw, so empty lines can go
  }
  parser_.emplace();
  parser_->body_limit(shared_->opt.max_body_bytes);
  parser_->header_limit(kHeaderLimit);
  bhttp::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) return on_read_error(ec);
  if (parser_->is_done()) return dispatch();
  const auto& req = parser_->get();
  // curl and others hold back large uploads until told to go on (or a second passes).
  if (req.version() >= 11 && iequals(sv(req[bhttp::field::expect]), "100-continue"))
    enqueue(Out("HTTP/1.1 100 Continue\r\n\r\n"));
  arm(read_timer_, shared_->opt.read_timeout);
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code e, size_t) { self->on_body(e); });
}

void Connection::on_body(beast::error_code ec) {
  if (phase_ == Phase::kClosed) return;
  if (ec) return on_read_error(ec);
  dispatch();
}

void Connection::on_read_error(beast::error_code ec) {
  disarm(read_timer_);
  if (timed_out_)
    return refuse(408,
                  fmt::format("the request was not received in full within {} ms",
                              shared_->opt.read_timeout.count()),
                  "request_timeout");
  if (ec == bhttp::error::body_limit) {
    return refuse(413,
                  fmt::format("request body is larger than the limit of {} bytes",
                              shared_->opt.max_body_bytes),
                  "request_too_large");
  }
  if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
    return refuse(431, "request header fields are too large", "");
  const bool parse_error =
      ec.category() == bhttp::make_error_code(bhttp::error::bad_method).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
  if (parse_error) return refuse(400, "malformed HTTP request: " + ec.message(), "");
  close_now();  // the client left or the socket failed: nobody to answer
}

bool Connection::become_idle() {
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  int64_t was = slot_->idle_since.load();
  do {
    if (was == ConnectionSlot::kEvicted) return false;
  } while (!slot_->idle_since.compare_exchange_weak(was, now));
  return true;
}

bool Connection::become_busy() {
  return slot_->idle_since.exchange(ConnectionSlot::kBusy) != ConnectionSlot::kEvicted;
}

// Answers a request that will not be read to its end, then closes the connection.
void Connection::refuse(int status, const std::string& message, const std::string& code) {
  phase_ = Phase::kResponding;
  exchange_.reset();
  keep_alive_ = false;
  status_ = status;
  started_ = std::chrono::steady_clock::now();
  cors_headers_.clear();
  if (parser_ && parser_->got_some()) {  // a refused request's header may be partly parsed
    const auto& req = parser_->get();
    request_.method = std::string(sv(req.method_string()));
    request_.path = std::string(sv(req.target()));
    const std::string origin(sv(req[bhttp::field::origin]));
    cors_headers_ = shared_->policy.cors_headers(&origin);
  }
  const std::string body = shared_->error_body(request_.path, status, message, code);
  std::string h = head(status);
  h += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\n", kJson, body.size());
  h += cors_headers_;
  if (status == 503) h += "Retry-After: 1\r\n";
  h += "Connection: close\r\n\r\n";
  if (request_.method != "HEAD") h += body;
  enqueue(Out(std::move(h), nullptr, 0, true));
}

void Connection::dispatch() {
  disarm(read_timer_);  // a response may take as long as the model needs
  phase_ = Phase::kResponding;
  started_ = std::chrono::steady_clock::now();
  status_ = 0;
  bytes_out_ = 0;
  auto msg = parser_->release();
  parser_.reset();

  request_ = Request{};
  request_.method = std::string(sv(msg.method_string()));
  const std::string_view target = sv(msg.target());
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) request_.query = std::string(target.substr(q + 1));
  for (const auto& f : msg) {
    std::string& v = request_.headers[lower(sv(f.name_string()))];
    if (!v.empty()) v += ", ";
    v += sv(f.value());
  }
  request_.body = std::move(msg.body());
  request_.remote = remote_;
  keep_alive_ = msg.keep_alive() && !shared_->stopping;
  http10_ = msg.version() < 11;
  head_ = request_.method == "HEAD";
  close_delimited_ = false;

  cors_headers_ = shared_->policy.cors_headers(header(request_, "origin"));

  exchange_ = std::make_shared<Exchange>();
  started_response_ = false;
  responding_ = shared_from_this();
  // Keep a read pending so that closed() turns true as soon as the client leaves, even
  // while the handler is still working and nothing is being written; what arrives instead is
  // the next request, kept in the buffer.
  watch_peer();
  route(std::make_shared<Writer>(weak_from_this(), exchange_, shared_, request_.path));
}

namespace {

// The exact route for `path`, else the longest prefix route (a key ending in '/') below it.
RouteTable::const_iterator find_route(const RouteTable& routes, const std::string& path) {
  if (auto it = routes.find(path); it != routes.end()) return it;
  for (size_t end = path.size(); end > 1;) {
    end = path.rfind('/', end - 2);
    if (end == std::string::npos || end == 0) break;
    if (auto it = routes.find(path.substr(0, end + 1)); it != routes.end()) return it;
  }
  return routes.end();
}

// The methods a path takes, for Allow: HEAD wherever GET is.
std::string allowed_methods(const std::map<std::string, Handler>& handlers) {
  std::string out;
  for (const auto& [m, h] : handlers) {
    out += (out.empty() ? "" : ", ") + m;
    if (m == "GET" && !handlers.contains("HEAD")) out += ", HEAD";
  }
  return out;
}

// The handler for `method`; a HEAD is GET's, whose body the connection leaves out.
const Handler* find_handler(const std::map<std::string, Handler>& handlers,
                            const std::string& method) {
  auto it = handlers.find(method);
  if (it == handlers.end() && method == "HEAD") it = handlers.find("GET");
  return it == handlers.end() ? nullptr : &it->second;
}

}  // namespace

void Connection::route(const std::shared_ptr<Writer>& w) {
  std::optional<std::string> path = percent_decoded(request_.path);
  if (!path) {
    w->send(400, kJson,
            shared_->error_body(request_.path, 400,
                                fmt::format("bad %-escape in the request path {}: '%' must be "
                                            "followed by two hexadecimal digits",
                                            request_.path),
                                ""));
    return;
  }
  request_.path = std::move(*path);
  const Request& r = request_;
  const auto path_it = find_route(shared_->routes, r.path);

  const std::string methods =
      path_it == shared_->routes.end() ? "" : allowed_methods(path_it->second);
  if (std::optional<PolicyAnswer> a = shared_->policy.check(r, methods)) {
    if (a->refusal)
      w->send(a->status, kJson,
              shared_->error_body(r.path, a->status, a->refusal->message, a->refusal->code),
              a->headers);
    else
      w->send(a->status, "", "", a->headers);
    return;
  }

  if (path_it == shared_->routes.end()) {
    w->send(404, kJson,
            shared_->error_body(r.path, 404, fmt::format("Invalid URL ({} {})", r.method, r.path),
                                "not_found"));
    return;
  }
  const Handler* handler = find_handler(path_it->second, r.method);
  if (!handler) {
    w->send(405, kJson,
            shared_->error_body(
                r.path, 405,
                fmt::format("Method {} is not allowed on {}; use {}", r.method, r.path, methods),
                "method_not_allowed"),
            {{"Allow", methods}});
    return;
  }

  try {
    (*handler)(r, w);
  } catch (const std::exception& e) {
    spdlog::error("http: handler for {} {} threw: {}", r.method, r.path, e.what());
    w->fail(fmt::format("internal error: {}", e.what()));
  } catch (...) {
    spdlog::error("http: handler for {} {} threw", r.method, r.path);
    w->fail("internal error");
  }
}

void Connection::watch_peer() {
  if (watching_ || peer_eof_ || buffer_.size() >= kPeekLimit) return;
  watching_ = true;
  socket_.async_read_some(
      buffer_.prepare(kPeekChunk),
      [self = shared_from_this()](beast::error_code ec, size_t n) { self->on_peer_read(ec, n); });
}

void Connection::on_peer_read(beast::error_code ec, size_t n) {
  watching_ = false;
  if (phase_ == Phase::kClosed) return;
  if (ec == net::error::operation_aborted) {
    // response_done() stopped the watch to parse the request already in the buffer.
    if (phase_ == Phase::kReading) read_request(true);
    return;
  }
  if (ec == net::error::eof) return on_peer_eof();
  if (ec) {
    if (phase_ == Phase::kResponding) log_request("client left");
    return close_now();  // a reset or a failed socket: the client is gone
  }
  buffer_.commit(n);
  switch (phase_) {
    case Phase::kResponding:
      return watch_peer();  // the next request has begun: the client is present
    case Phase::kClosing:
      buffer_.consume(buffer_.size());
      return watch_peer();
    case Phase::kReading:
      if (!become_busy()) return close_now();  // its place went to a newcomer just now
      return read_request(false);              // the next request has begun
    case Phase::kClosed:
      return;
  }
}

// The client has finished sending. It may only have half-closed (HTTP allows it) and still wait
// for its answer, so the response goes on; whether it is really there shows when a write fails,
// and, while nothing is written, by probing: an HTTP/1.1 client must accept an interim 1xx
// response at any time, and a client that has closed its socket answers one with a reset.
void Connection::on_peer_eof() {
  peer_eof_ = true;
  if (phase_ != Phase::kResponding) return close_now();  // idle or closing: it is done
  if (!http10_ && !started_response_) enqueue(Out("HTTP/1.1 102 Processing\r\n\r\n"));
  probe_peer();
}

void Connection::probe_peer() {
  probe_timer_.expires_after(kProbeInterval);
  probe_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->phase_ != Phase::kResponding) return;
    if (tcp_peer_gone(self->socket_.native_handle())) {
      self->log_request("client left");
      return self->close_now();
    }
    self->probe_peer();
  });
}

bool Connection::current(const std::shared_ptr<Exchange>& ex) const {
  return phase_ == Phase::kResponding && ex == exchange_;
}

std::string Connection::head(int status) const {
  const auto reason = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return fmt::format("HTTP/1.1 {} {}\r\nServer: waste\r\nDate: {}\r\n", status, sv(reason),
                     http_date());
}

void Connection::on_response(const std::shared_ptr<Exchange>& ex, PlainResponse r) {
  const size_t credit = r.body.size();
  if (!current(ex)) return ex->drained(credit);
  status_ = r.status;
  started_response_ = true;
  const bool no_body = r.status == 204 || r.status == 304 || r.status < 200;
  std::string h = head(r.status);
  if (!r.content_type.empty() && is_header_value(r.content_type))
    h += fmt::format("Content-Type: {}\r\n", r.content_type);
  if (!no_body) h += fmt::format("Content-Length: {}\r\n", r.body.size());
  h += cors_headers_;
  append_extra(&h, r.extra);
  if (!keep_alive_) h += "Connection: close\r\n";
  h += "\r\n";
  if (no_body || head_) r.body.clear();
  enqueue(Out(std::move(h)));
  enqueue(Out(std::move(r.body), ex, credit, true));
}

void Connection::on_events_start(const std::shared_ptr<Exchange>& ex, std::string keepalive) {
  if (!current(ex)) return;
  status_ = 200;
  started_response_ = true;
  // HTTP/1.0 has no chunked encoding: the end of the stream is the end of the connection.
  close_delimited_ = http10_;
  if (close_delimited_) keep_alive_ = false;
  std::string h = head(200);
  h += "Content-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  h += cors_headers_;
  if (!close_delimited_) h += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive_) h += "Connection: close\r\n";
  h += "\r\n";
  enqueue(Out(std::move(h)));
  last_event_ = std::chrono::steady_clock::now();
  if (head_ || shared_->opt.keepalive.count() <= 0) return;
  keepalive_ = std::move(keepalive);
  wait_keepalive(++stream_);
}

// The keepalive runs on the connection's strand, like every event, so it is queued between two
// events and never inside one; it needs no thread of its own, only this timer.
void Connection::wait_keepalive(uint64_t stream) {
  keepalive_timer_.expires_at(last_event_ + shared_->opt.keepalive);
  keepalive_timer_.async_wait([self = shared_from_this(), stream](beast::error_code ec) {
    Connection& c = *self;
    if (ec || stream != c.stream_ || c.keepalive_.empty() || c.phase_ != Phase::kResponding) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - c.last_event_ >= c.shared_->opt.keepalive) {
      // Bytes still queued or being written are not silence: a client slow to read gets no
      // more of them (a write that stalls has kWriteTimeout).
      if (!c.writing_ && c.queue_.empty())
        c.enqueue(Out(c.close_delimited_ ? c.keepalive_ : chunk(c.keepalive_)));
      c.last_event_ = now;
    }
    c.wait_keepalive(stream);
  });
}

void Connection::on_event(const std::shared_ptr<Exchange>& ex, std::string text) {
  const size_t credit = text.size();
  if (!current(ex) || head_) return ex->drained(credit);
  last_event_ = std::chrono::steady_clock::now();
  enqueue(Out(close_delimited_ ? std::move(text) : chunk(text), ex, credit));
}

void Connection::on_events_end(const std::shared_ptr<Exchange>& ex) {
  if (!current(ex)) return;
  keepalive_.clear();
  keepalive_timer_.cancel();
  const bool last_chunk = !close_delimited_ && !head_;
  enqueue(Out(last_chunk ? std::string("0\r\n\r\n") : std::string(), ex, 0, true));
}

void Connection::enqueue(Out out) {
  if (phase_ == Phase::kClosed) return;
  queue_.push_back(std::move(out));
  if (!writing_) write_next();
}

// Everything queued goes out in one gathered write, so a burst of small events costs one
// system call.
void Connection::write_next() {
  inflight_.assign(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  std::vector<net::const_buffer> bufs;
  bufs.reserve(inflight_.size());
  for (const Out& o : inflight_)
    if (!o.bytes.empty()) bufs.push_back(net::buffer(o.bytes));
  writing_ = true;
  arm(write_timer_, kWriteTimeout);
  net::async_write(socket_, bufs, [self = shared_from_this()](beast::error_code ec, size_t) {
    self->on_written(ec);
  });
}

void Connection::on_written(beast::error_code ec) {
  writing_ = false;
  disarm(write_timer_);
  bool ended = false;
  for (const Out& o : inflight_) {
    if (o.credit_to) o.credit_to->drained(o.credit);
    ended = ended || o.ends_response;
    bytes_out_ += o.bytes.size();
  }
  inflight_.clear();
  if (phase_ == Phase::kClosed) return;
  if (ec) return close_now();
  if (!queue_.empty()) write_next();
  if (ended) response_done();
}

// Debug level only: the engine logs the request line that matters.
void Connection::log_request(const char* note) const {
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_)
          .count();
  spdlog::debug("http {} \"{} {}\" {} {}B {:.1f}ms{}{}", remote_, request_.method, request_.path,
                status_, bytes_out_, ms, *note ? " " : "", note);
}

void Connection::response_done() {
  log_request("");
  exchange_.reset();  // the writer keeps its own reference and now refuses further calls
  request_ = Request{};
  probe_timer_.cancel();
  auto hold = std::move(responding_);  // released at the end of this call
  // Stopping: request_stop() may have run while this response was still being written.
  if (shared_->stopping) return close_now();
  if (!keep_alive_) return peer_eof_ ? close_now() : linger_close();
  if (watching_ && buffer_.size() == 0) {
    // The pending watch brings the next request's first bytes; until then the connection is
    // idle and the idle deadline applies.
    phase_ = Phase::kReading;
    if (!become_idle()) return close_now();
    arm(read_timer_, shared_->opt.read_timeout);
    return;
  }
  if (watching_) {
    // The next request is (partly) in the buffer: it is parsed once the watch has stopped.
    phase_ = Phase::kReading;
    beast::error_code ec;
    socket_.cancel(ec);
    return;
  }
  read_request(true);
}

// Closes our side and drains what the client still sends for a moment: closing a socket
// with unread input makes the kernel send a reset, which can destroy the response in flight.
void Connection::linger_close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosing;
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  buffer_.consume(buffer_.size());
  arm(read_timer_, kLingerTimeout);
  watch_peer();
}

void Connection::close_now() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  if (slot_) become_busy();  // ending anyway: not one to evict
  beast::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  disarm(read_timer_);
  disarm(write_timer_);
  probe_timer_.cancel();
  keepalive_timer_.cancel();
  if (exchange_) exchange_->mark_closed();
  for (const Out& o : queue_)
    if (o.credit_to) o.credit_to->mark_closed();
  queue_.clear();
  responding_.reset();  // may be the last reference: nothing may follow in this call
}

}  // namespace waste::http::detail
