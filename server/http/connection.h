// One HTTP/1.1 connection of the server in http.h: reads requests with limits and deadlines,
// routes them, and writes the responses that handlers hand to a ResponseWriter from any thread.
// Internal to server/; routes only see http.h.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/http/access_policy.h"
#include "server/http/http.h"

namespace waste::http::detail {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;

class Connection;
class Writer;

// Time limits. Reads have a deadline (Options::read_timeout) only while a request is being
// received (or the connection idles between requests); a response may take as long as the
// model needs.
// A single socket write that makes no progress for this long means the client stopped reading.
inline constexpr std::chrono::seconds kWriteTimeout{60};
// How long a refused request's unread upload is drained before the socket closes, so that
// the client reads our error instead of a reset.
inline constexpr std::chrono::seconds kLingerTimeout{2};
// What stop() grants responses that are still being written.
inline constexpr std::chrono::seconds kStopGrace{5};
// After the client's EOF, how often the socket is checked for a reset (a client that left).
inline constexpr std::chrono::milliseconds kProbeInterval{200};
// While a response is produced, bytes of the next request are buffered up to this much.
inline constexpr size_t kPeekLimit = 1u << 20;
inline constexpr uint32_t kHeaderLimit = 64 * 1024;
// Writers on non-I/O threads wait while more than this is queued on one connection.
inline constexpr size_t kHighWater = 4u << 20;

// path -> method -> handler
using RouteTable = std::map<std::string, std::map<std::string, Handler>>;

// One open connection as the server keeps track of it (ServerShared::conns); read and written
// under conn_mutex but for `idle_since`.
struct ConnectionSlot {
  static constexpr int64_t kBusy = -1;     // reading or answering a request, closing, or new
  static constexpr int64_t kEvicted = -2;  // its place went to a newcomer: it must close
  std::weak_ptr<Connection> conn;
  bool admitted = false;  // counted against Options::max_connections
  // While the connection waits for a request with nothing of it received: since when
  // (steady-clock ticks); else kBusy or kEvicted. The connection writes it on its strand; a
  // newcomer at the cap claims the oldest one with a compare-and-swap, so a connection that has
  // just begun a request is never taken.
  std::atomic<int64_t> idle_since{kBusy};
};

// What one server's connections and writers share. Every connection and writer holds it, so
// it outlives the io_context and anything a handler thread keeps.
struct ServerShared {
  Options opt;
  AccessPolicy policy{opt};
  RouteTable routes;                        // fixed once serving
  std::vector<std::thread::id> io_threads;  // fixed once serving
  std::atomic<bool> stopping{false};

  // Writers post onto connection strands only while the gate is open; stop() closes it
  // after the I/O threads are gone, so nothing reaches a destroyed io_context.
  std::shared_mutex gate_mutex;
  bool gate_open = true;

  // Live connections, so stop() can reach them and wait for them to end.
  std::mutex conn_mutex;
  std::condition_variable conn_cv;
  std::map<uint64_t, ConnectionSlot> conns;
  uint64_t next_conn_id = 0;
  // Accepted connections whose start has not run yet: stop() waits for them too, or one accepted
  // just before it would keep its socket open in a handler the stopped threads never run.
  size_t starting = 0;
  size_t admitted = 0;                // connections being served (refused ones are in `conns` only)
  std::atomic<uint64_t> refusals{0};  // connections refused for the limit
  std::atomic<uint64_t> evictions{0};  // idle connections closed at the limit for a newcomer

  bool on_io_thread() const;
  // Under conn_mutex, at the limit: passes the admission of the longest-idle connection to a
  // newcomer, and gives that connection (null if it is already ending) to be closed outside the
  // lock. False when no connection is idle.
  bool evict_idle(std::shared_ptr<Connection>* victim);
  // A refusal's JSON body, in the shape of the API that `path` belongs to.
  std::string error_body(const std::string& path, int status, const std::string& message,
                         const std::string& code = "") const;
};

// The state of one response, shared by the connection (on its strand) and the writer (on
// any thread).
struct Exchange {
  enum class State { kNone, kStreaming, kDone };
  std::mutex m;
  std::condition_variable cv;  // signalled when bytes drain or the connection closes
  State state = State::kNone;
  bool closed = false;  // the peer left, a write failed, or the server closed the connection
  size_t queued = 0;    // payload bytes posted but not yet written

  void mark_closed();
  void drained(size_t n);
};

// A complete response as a handler gave it; the connection adds framing headers.
struct PlainResponse {
  int status = 200;
  std::string content_type;
  std::string body;
  std::map<std::string, std::string> extra;
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, std::shared_ptr<ServerShared> shared);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // These three may be called from any thread; they hop onto the strand.
  void start();
  void request_stop();  // close when idle, or once the current response is written
  void force_close();
  // Closes on the calling thread; only for stop(), once no thread runs the io_context.
  void close_stopped() { close_now(); }

  net::any_io_executor executor() { return socket_.get_executor(); }

  // Called on the strand, in the order the writer produced them.
  void on_response(const std::shared_ptr<Exchange>& ex, PlainResponse r);
  // `keepalive`: the SSE text written after each Options::keepalive of silence.
  void on_events_start(const std::shared_ptr<Exchange>& ex, std::string keepalive);
  void on_event(const std::shared_ptr<Exchange>& ex, std::string text);
  void on_events_end(const std::shared_ptr<Exchange>& ex);

 private:
  enum class Phase { kReading, kResponding, kClosing, kClosed };

  // One buffer of the outgoing byte stream.
  struct Out {
    explicit Out(std::string b, std::shared_ptr<Exchange> to = nullptr, size_t c = 0,
                 bool end = false)
        : bytes(std::move(b)), credit_to(std::move(to)), credit(c), ends_response(end) {}
    std::string bytes;
    std::shared_ptr<Exchange> credit_to;  // gets `credit` back once written (backpressure)
    size_t credit = 0;
    bool ends_response = false;
  };

  void do_start();
  void read_request(bool fresh);
  void on_header(beast::error_code ec);
  void on_body(beast::error_code ec);
  void on_read_error(beast::error_code ec);
  // Moves `idle_since` of the slot; false once the connection was evicted (it must close).
  bool become_idle();
  bool become_busy();
  void dispatch();
  void route(const std::shared_ptr<Writer>& w);
  void watch_peer();
  void on_peer_read(beast::error_code ec, size_t n);
  void on_peer_eof();
  void probe_peer();
  // While an event stream is open: waits until it has been silent for Options::keepalive, then
  // writes its keepalive. `stream` is the stream it was started for; a later one has its own.
  void wait_keepalive(uint64_t stream);
  void enqueue(Out out);
  void write_next();
  void on_written(beast::error_code ec);
  void response_done();
  void log_request(const char* note) const;
  void refuse(int status, const std::string& message, const std::string& code);
  void linger_close();
  void close_now();
  void arm(net::steady_timer& t, std::chrono::steady_clock::duration d);
  void on_deadline(const net::steady_timer& t);
  bool current(const std::shared_ptr<Exchange>& ex) const;
  std::string head(int status) const;

  std::shared_ptr<ServerShared> shared_;
  uint64_t id_ = 0;
  ConnectionSlot* slot_ = nullptr;  // in shared_->conns from do_start() until ~Connection
  tcp::socket socket_;
  net::steady_timer read_timer_;
  net::steady_timer write_timer_;
  net::steady_timer probe_timer_;  // after the peer's EOF: is it still there?
  net::steady_timer keepalive_timer_;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<beast::http::request_parser<beast::http::string_body>> parser_;
  Request request_;
  Phase phase_ = Phase::kReading;
  bool watching_ = false;          // a read is pending to notice the client leaving
  bool peer_eof_ = false;          // the client has finished sending (a half-close, or it left)
  bool timed_out_ = false;         // the read deadline passed with a request half received
  bool started_response_ = false;  // the status line of the current response is queued
  // Held while a response is produced, so a connection whose handler answers later from
  // another thread lives until it has (nothing else may be pending on it meanwhile).
  std::shared_ptr<Connection> responding_;
  bool keep_alive_ = false;
  bool http10_ = false;
  // A HEAD request: its response has the headers GET's would have, Content-Length included, and
  // no body, so the next response on the connection is read from its first byte.
  bool head_ = false;
  bool close_delimited_ = false;  // an event stream to an HTTP/1.0 client ends with the socket
  // The open event stream's keepalive (empty when none is open), which stream it is (counted
  // per connection, so a wait left from an earlier stream ends itself), and when it last queued
  // bytes.
  std::string keepalive_;
  uint64_t stream_ = 0;
  std::chrono::steady_clock::time_point last_event_;
  std::string cors_headers_;  // added to every response to the current request
  std::shared_ptr<Exchange> exchange_;
  std::deque<Out> queue_;
  std::vector<Out> inflight_;
  bool writing_ = false;
  // For the debug log line.
  int status_ = 0;
  uint64_t bytes_out_ = 0;
  std::chrono::steady_clock::time_point started_;
};

}  // namespace waste::http::detail
