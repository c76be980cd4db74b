#include "tests/http_client.h"

#include <gtest/gtest.h>
#include <cmath>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <thread>

#include "tests/test_util.h"

namespace waste::test {

namespace {

int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  timeval tv{300, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    ssize_t n = send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may refuse early (413): read its answer anyway
    at += (size_t)n;
  }
}

std::string request_text(const std::string& method, const std::string& path,
                         const std::string& body,
                         const std::map<std::string, std::string>& headers) {
  std::string r = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
  bool has_type = false;
  for (auto& [k, v] : headers) {
    r += k + ": " + v + "\r\n";
    if (k == "Content-Type") has_type = true;
  }
  if (!body.empty() && !has_type) r += "Content-Type: application/json\r\n";
  if (method == "POST") r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::string dechunk(const std::string& b) {
  std::string out;
  size_t at = 0;
  while (at < b.size()) {
    size_t eol = b.find("\r\n", at);
    if (eol == std::string::npos) break;
    size_t n = std::stoul(b.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    out += b.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  return out;
}

}  // namespace

std::vector<std::string> HttpResponse::events() const {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

double metric_value(const std::string& metrics, const std::string& name) {
  const size_t at = metrics.find("\n" + name + " ");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(metrics.c_str() + at + name.size() + 2, nullptr);
}

HttpResponse http_request(int port, const std::string& method, const std::string& path,
                          const std::string& body,
                          const std::map<std::string, std::string>& headers) {
  int fd = connect_loopback(port);
  send_all(fd, request_text(method, path, body, headers));
  std::string raw;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, (size_t)n);
  close(fd);
  HttpResponse r;
  size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos) return r;
  std::string head = raw.substr(0, head_end);
  r.status = std::stoi(head.substr(9, 3));
  size_t line = head.find("\r\n");
  while (line != std::string::npos) {
    size_t next = head.find("\r\n", line + 2);
    std::string h =
        head.substr(line + 2, next == std::string::npos ? std::string::npos : next - line - 2);
    size_t colon = h.find(':');
    if (colon != std::string::npos) {
      std::string k = h.substr(0, colon);
      std::transform(k.begin(), k.end(), k.begin(), ::tolower);
      r.headers[k] = h.substr(h.find_first_not_of(' ', colon + 1));
    }
    line = next;
  }
  r.body = raw.substr(head_end + 4);
  if (r.headers["transfer-encoding"] == "chunked") r.body = dechunk(r.body);
  return r;
}

std::string http_request_then_hang_up(int port, const std::string& path, const std::string& body,
                                      size_t bytes, bool reset, std::chrono::milliseconds wait) {
  int fd = connect_loopback(port);
  send_all(fd, request_text("POST", path, body, {}));
  std::string raw;
  char buf[4096];
  ssize_t n;
  while (raw.size() < bytes && (n = recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, (size_t)n);
  std::this_thread::sleep_for(wait);
  if (reset) {
    linger abort{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  }
  close(fd);
  return raw;
}

std::string http_exchange(int port, const std::string& bytes, bool half_close, double seconds) {
  int fd = connect_loopback(port);
  send_all(fd, bytes);
  if (half_close) shutdown(fd, SHUT_WR);
  std::string raw;
  char buf[65536];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd pf{fd, POLLIN, 0};
    if (poll(&pf, 1, 100) <= 0) continue;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    raw.append(buf, (size_t)n);
  }
  close(fd);
  return raw;
}

Daemon::Daemon(const std::vector<std::string>& args,
               const std::map<std::string, std::string>& env) {
  int p[2];
  if (pipe(p) != 0) throw std::runtime_error("pipe");
  pid_ = fork();
  if (pid_ == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    close(p[0]);
    // Tests share containers of the same seeds, so a disk tier in the user's cache folder would
    // carry one test's snapshots into the next: it is off unless a test asks for it.
    setenv("WASTE_PROMPT_CACHE_DIR", "off", 1);
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> all = {waste_binary().string(), "serve"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(p[1]);
  out_fd_ = p[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  std::regex re("listening on http://[^:]+:([0-9]+)");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    drain(0.1);
    std::smatch m;
    if (std::regex_search(log_, m, re)) {
      port_ = std::stoi(m[1]);
      return;
    }
  }
  throw std::runtime_error("the daemon did not start listening: " + log_);
}

Daemon::~Daemon() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
}

void Daemon::drain(double seconds) {
  pollfd pf{out_fd_, POLLIN, 0};
  if (poll(&pf, 1, (int)(seconds * 1000)) <= 0) return;
  char buf[4096];
  ssize_t n;
  while ((n = read(out_fd_, buf, sizeof buf)) > 0) log_.append(buf, (size_t)n);
}

const std::string& Daemon::log() {
  drain(0);
  return log_;
}

bool Daemon::wait_ready(double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (http_request(port_, "GET", "/health").status == 200) return true;
    drain(0.05);
  }
  return false;
}

void Daemon::signal(int sig) {
  kill(pid_, sig);
}

int Daemon::terminate(double seconds) {
  kill(pid_, SIGTERM);
  return wait_exit(seconds);
}

int Daemon::wait_exit(double seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
      pid_ = -1;
      drain(0);
      return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    }
    drain(0.05);
  }
  return -1;
}

std::unique_ptr<Daemon> start_daemon(std::vector<std::string> args,
                                     const std::map<std::string, std::string>& env) {
  args.insert(args.end(), {"--port", "0", "--threads", "2"});
  auto d = std::make_unique<Daemon>(args, env);
  EXPECT_TRUE(d->wait_ready()) << d->log();
  return d;
}

}  // namespace waste::test
