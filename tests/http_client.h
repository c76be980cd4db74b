// Test support: a blocking HTTP/1.1 client on loopback and a daemon started as a child process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace waste::test {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
  // Server-sent events: the data of each "data:" line, in order.
  std::vector<std::string> events() const;
};

// One request on a fresh connection (Connection: close); reads the whole response.
HttpResponse http_request(int port, const std::string& method, const std::string& path,
                          const std::string& body = "",
                          const std::map<std::string, std::string>& headers = {});

// The value of series `name` (no labels) in a /metrics body; NaN when it is absent.
double metric_value(const std::string& metrics, const std::string& name);

// Opens a streaming request and closes the socket after `bytes` bytes of the response arrived
// and `wait` more passed (a client that goes away mid-stream). Returns what was read. With
// `reset` the close is abortive (a reset, as from a killed process), which the daemon notices at
// once, not at its next write.
std::string http_request_then_hang_up(int port, const std::string& path, const std::string& body,
                                      size_t bytes, bool reset = false,
                                      std::chrono::milliseconds wait = {});

// Sends `bytes` as they are on a fresh connection (then closes our sending side when
// `half_close`) and returns everything the server sent until it closed (or `seconds` passed).
std::string http_exchange(int port, const std::string& bytes, bool half_close, double seconds = 30);

// `waste serve ARGS...` as a child process; the port is read from its "listening on" log line.
class Daemon {
 public:
  explicit Daemon(const std::vector<std::string>& args,
                  const std::map<std::string, std::string>& env = {});
  ~Daemon();  // SIGKILL if still running
  int port() const { return port_; }
  // Polls GET /health until 200 (or the timeout); returns whether it became ready.
  bool wait_ready(double seconds = 30);
  // Sends SIGTERM and waits; returns the exit status (or -1 on timeout).
  int terminate(double seconds = 20);
  void signal(int sig);
  // Waits for the daemon to exit; its exit status, or -1 when it is still running.
  int wait_exit(double seconds);
  const std::string& log();  // everything the daemon printed so far

 private:
  void drain(double seconds);
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int port_ = 0;
  std::string log_;
};

// `waste serve ARGS... --port 0 --threads 2`, waited on until ready (a test failure, with the
// daemon's log, if it never is).
std::unique_ptr<Daemon> start_daemon(std::vector<std::string> args,
                                     const std::map<std::string, std::string>& env = {});

}  // namespace waste::test
