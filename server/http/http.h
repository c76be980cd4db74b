// The HTTP layer of the daemon (Boost.Beast over Asio): connections, limits, access (CORS and the
// API key, access_policy.h), and a response writer that any thread may use, including for
// server-sent events. Routes are plain functions; nothing here knows about models or any API's
// JSON (errors it answers itself are written by the Options' ErrorFormatter).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace waste::http {

struct Request {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // target without the query, %XX decoded
  std::string query;                           // after '?', undecoded
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string remote;  // peer address, for logs
};

// What an event stream writes when it has been silent for Options::keepalive, so that clients
// and proxies that give up on a quiet stream keep waiting (each API says what its protocol
// allows). The connection writes it whole between two events, never inside one.
struct Keepalive {
  std::string event;  // a named event; empty: an SSE comment
  std::string data;   // the event's data, or the comment's text
};

// Delivers one response. Thread-safe: the engine worker writes SSE events from its own thread.
// Every method returns false once the client has gone away (or the write failed); callers use
// that to cancel work.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  // A complete response. `extra` headers are added as given.
  virtual bool send(int status, const std::string& content_type, std::string body,
                    const std::map<std::string, std::string>& extra = {}) = 0;
  // Starts a text/event-stream response (status 200) that says `keepalive` after each
  // Options::keepalive of silence until it ends. The connection's own timer writes it, whatever
  // the producer is doing; if that write fails, closed() turns true as for any failed write.
  virtual bool start_events(Keepalive keepalive) = 0;
  // Writes "data: <data>\n\n".
  virtual bool event(const std::string& data) = 0;
  // Writes "event: <name>\ndata: <data>\n\n" (Anthropic's streams name every event).
  virtual bool named_event(const std::string& name, const std::string& data) = 0;
  // Ends the event stream (the connection may then serve the next request).
  virtual void finish() = 0;
  // True once the peer closed the connection.
  virtual bool closed() const = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<ResponseWriter>)>;

// An answer the HTTP layer gives by itself: a malformed or refused request, an unknown route, a
// missing API key, a handler that failed or gave no answer.
struct Refusal {
  int status = 400;
  std::string message;
  std::string code;  // machine-readable ("invalid_api_key"); may be empty
};

// Writes a refusal as a JSON body in the error shape of the API that `path` belongs to; the
// layer itself knows no API's shapes.
using ErrorFormatter = std::function<std::string(const std::string& path, const Refusal&)>;

struct Options {
  std::string host = "127.0.0.1";
  int port = 8000;
  uint64_t max_body_bytes = 32u << 20;  // larger bodies get 413 before they are read whole
  std::string api_key;  // when set, /v1/ and /metrics need "Authorization: Bearer" or x-api-key
  std::vector<std::string> cors_origins;  // empty: no CORS headers; "*" allows any origin
  // Host header values served (without the port; case-insensitive); empty serves any. A
  // daemon on loopback serves only loopback names, so a web page cannot reach it through a
  // rebinding DNS name.
  std::vector<std::string> allowed_hosts;
  int io_threads = 2;
  // At the cap a newcomer takes the place of the longest-idle connection (one waiting for a
  // request with nothing of it received), which is closed; with none idle it is answered 503.
  size_t max_connections = 512;
  // A request not received in full this long after it began (or an idle connection) ends:
  // with 408 for a request half received.
  std::chrono::milliseconds read_timeout{60000};
  // An event stream silent this long writes its Keepalive (and again each time it stays silent
  // this long); zero: never.
  std::chrono::milliseconds keepalive{5000};
  ErrorFormatter error_format;  // required
};

// What the server has done so far, for the daemon's /metrics.
struct ServerStats {
  uint64_t idle_connections_evicted = 0;  // closed at the connection cap to admit a newcomer
};

class Server {
 public:
  explicit Server(Options opt);
  ~Server();
  // Routes are matched on method and exact path, or for a path ending in '/' (a prefix route,
  // "/v1/models/") on any longer path that starts with it, the longest such prefix winning;
  // unknown paths get 404, a known path with another method gets 405. A HEAD goes to the path's GET
  // route, and every HEAD is answered with the headers (Content-Length included) and no body.
  // Handlers run on an I/O thread and must not block: hand long work to another thread and answer
  // through the writer.
  void route(const std::string& method, const std::string& path, Handler h);
  // Binds and starts serving; throws with a clear message if the address cannot be bound.
  void start();
  int port() const;           // the bound port (useful with port 0)
  ServerStats stats() const;  // from any thread
  // Stops accepting and closes idle connections; responses in progress go on, and their
  // connections close once they end.
  void stop_accepting();
  // stop_accepting(), then waits up to `grace` for the responses in progress, closes what is
  // left and ends the I/O threads.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  void wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace waste::http
