#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "server/http/connection.h"
#include "server/http/http.h"

namespace waste::http {

using detail::Connection;
using detail::tcp;
namespace net = detail::net;
namespace beast = detail::beast;

struct Server::Impl {
  enum class State { kNew, kRunning, kStopped };

  std::shared_ptr<detail::ServerShared> shared = std::make_shared<detail::ServerShared>();
  // Declared before everything that uses it, so it is destroyed last: its destructor
  // releases the handlers still queued, and with them the last connections.
  std::optional<net::io_context> ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<net::steady_timer> accept_retry;
  std::optional<std::latch> ready;  // I/O threads wait on it until their ids are recorded
  std::vector<std::thread> threads;
  int port = 0;

  std::mutex state_mutex;
  std::condition_variable state_cv;
  State state = State::kNew;
  std::mutex stop_mutex;  // one stop() at a time

  tcp::endpoint endpoint();
  void bind();
  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  void run_io();
  std::vector<std::shared_ptr<Connection>> live();
  bool wait_idle(std::chrono::steady_clock::duration d);
  void stop_accepting();
  void stop(std::chrono::milliseconds grace);
};

namespace {

std::string host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

}  // namespace

// A literal address is used as given; a name such as "localhost" is resolved, preferring
// IPv4 because that is what most clients try first.
tcp::endpoint Server::Impl::endpoint() {
  const Options& o = shared->opt;
  beast::error_code ec;
  const auto addr = net::ip::make_address(o.host, ec);
  if (!ec) return {addr, static_cast<unsigned short>(o.port)};
  tcp::resolver resolver(*ioc);
  const auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
  if (ec || results.empty()) {
    throw std::runtime_error(fmt::format("cannot listen on {}: cannot resolve '{}': {}",
                                         host_port(o.host, o.port), o.host,
                                         ec ? ec.message() : "no address"));
  }
  for (const auto& r : results)
    if (r.endpoint().address().is_v4()) return r.endpoint();
  return results.begin()->endpoint();
}

void Server::Impl::bind() {
  const tcp::endpoint ep = endpoint();
  acceptor.emplace(net::make_strand(*ioc));
  beast::error_code ec;
  auto fail = [&](const char* what) {
    throw std::runtime_error(fmt::format("cannot listen on {}: {} failed: {}",
                                         host_port(shared->opt.host, shared->opt.port), what,
                                         ec.message()));
  };
  if (acceptor->open(ep.protocol(), ec)) fail("socket");
  // Lets a restarted daemon bind at once while old connections sit in TIME_WAIT; on Linux
  // it does not let two servers share a listening port.
  if (acceptor->set_option(net::socket_base::reuse_address(true), ec)) fail("setsockopt");
  if (acceptor->bind(ep, ec)) fail("bind");
  if (acceptor->listen(net::socket_base::max_listen_connections, ec)) fail("listen");
  port = acceptor->local_endpoint().port();
  accept_retry.emplace(acceptor->get_executor());
}

void Server::Impl::accept() {
  acceptor->async_accept(net::make_strand(*ioc), [this](beast::error_code ec, tcp::socket s) {
    on_accept(ec, std::move(s));
  });
}

void Server::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor->is_open()) return;
  if (ec) {
    // Usually out of file descriptors: pause instead of spinning on the same error.
    if (ec != net::error::connection_aborted) spdlog::warn("http: accept failed: {}", ec.message());
    accept_retry->expires_after(std::chrono::milliseconds(50));
    accept_retry->async_wait([this](beast::error_code e) {
      if (!e && acceptor->is_open()) accept();
    });
    return;
  }
  std::make_shared<Connection>(std::move(socket), shared)->start();
  accept();
}

void Server::Impl::run_io() {
  ready->wait();
  for (;;) {
    try {
      ioc->run();
      return;
    } catch (const std::exception& e) {
      // Handlers catch what routes throw; anything here is a bug, but one request's bug
      // should not take the daemon down.
      spdlog::error("http: unexpected exception on an I/O thread: {}", e.what());
    }
  }
}

std::vector<std::shared_ptr<Connection>> Server::Impl::live() {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard lk(shared->conn_mutex);
  for (const auto& [id, slot] : shared->conns)
    if (auto c = slot.conn.lock()) out.push_back(std::move(c));
  return out;  // released by the caller outside the lock: ~Connection takes it
}

bool Server::Impl::wait_idle(std::chrono::steady_clock::duration d) {
  std::unique_lock lk(shared->conn_mutex);
  return shared->conn_cv.wait_for(lk, d,
                                  [&] { return shared->conns.empty() && shared->starting == 0; });
}

void Server::Impl::stop_accepting() {
  {
    std::lock_guard lk(state_mutex);
    if (state != State::kRunning) return;
  }
  {
    std::lock_guard lk(shared->conn_mutex);
    if (shared->stopping) return;
    shared->stopping = true;  // under the lock, so no connection registers after live()
  }
  net::post(acceptor->get_executor(), [this] {
    beast::error_code ec;
    acceptor->close(ec);
    accept_retry->cancel();
  });
  for (const auto& c : live()) c->request_stop();
}

void Server::Impl::stop(std::chrono::milliseconds grace) {
  std::lock_guard serial(stop_mutex);
  {
    std::lock_guard lk(state_mutex);
    if (state == State::kStopped) return;
    if (state == State::kNew) {
      state = State::kStopped;
      state_cv.notify_all();
      return;
    }
  }
  if (shared->on_io_thread())
    throw std::logic_error("http::Server::stop() must not be called from an I/O thread");
  stop_accepting();
  if (!wait_idle(grace)) {
    for (const auto& c : live()) c->force_close();
    wait_idle(std::chrono::seconds(1));
  }
  ioc->stop();
  for (std::thread& t : threads) t.join();
  threads.clear();
  // Handlers still queued when the threads stopped (an accept that had completed, the
  // acceptor's posted close, a connection's start) run once here, on this thread: otherwise a
  // socket they hold stays open until the io_context is destroyed, and its client never hears
  // that the server stopped.
  ioc->restart();
  ioc->poll();
  // A connection whose close was still queued when the threads stopped: release its
  // producers now rather than when the io_context is destroyed.
  for (const auto& c : live()) c->close_stopped();
  {
    std::unique_lock gate(shared->gate_mutex);
    shared->gate_open = false;
  }
  {
    std::lock_guard lk(state_mutex);
    state = State::kStopped;
  }
  state_cv.notify_all();
}

Server::Server(Options opt) : impl_(std::make_unique<Impl>()) {
  impl_->shared->opt = std::move(opt);
}

Server::~Server() {
  try {
    impl_->stop(detail::kStopGrace);
  } catch (const std::exception& e) {
    spdlog::error("http: stopping the server failed: {}", e.what());
  }
}

void Server::route(const std::string& method, const std::string& path, Handler h) {
  std::lock_guard lk(impl_->state_mutex);
  if (impl_->state != Impl::State::kNew)
    throw std::logic_error("http::Server::route() must be called before start()");
  impl_->shared->routes[path][method] = std::move(h);
}

void Server::start() {
  Impl& m = *impl_;
  std::lock_guard lk(m.state_mutex);
  if (m.state != Impl::State::kNew)
    throw std::logic_error("http::Server::start() may be called once");
  const Options& o = m.shared->opt;
  if (o.port < 0 || o.port > 65535)
    throw std::invalid_argument(fmt::format("port {} is out of range", o.port));
  if (!o.error_format) throw std::invalid_argument("http::Options::error_format is required");
  const int n = std::max(1, o.io_threads);
  m.ioc.emplace(n);
  m.bind();
  m.accept();
  m.ready.emplace(1);
  for (int i = 0; i < n; ++i) m.threads.emplace_back([&m] { m.run_io(); });
  for (const std::thread& t : m.threads) m.shared->io_threads.push_back(t.get_id());
  m.state = Impl::State::kRunning;
  m.ready->count_down();
}

int Server::port() const {
  return impl_->port;
}

ServerStats Server::stats() const {
  return {impl_->shared->evictions.load()};
}

void Server::stop_accepting() {
  impl_->stop_accepting();
}

void Server::stop(std::chrono::milliseconds grace) {
  impl_->stop(grace);
}

void Server::wait() {
  std::unique_lock lk(impl_->state_mutex);
  impl_->state_cv.wait(lk, [&] { return impl_->state != Impl::State::kRunning; });
}

}  // namespace waste::http
