// `waste serve`: the daemon. Binds first (so /health answers 503 while the model loads), loads
// in the background (telling systemd READY=1 when done), serves until SIGTERM, SIGINT or
// SIGQUIT, then stops accepting, answers queued requests 503, gives the running replies
// --shutdown-grace to finish (else cuts them with an error event), and exits 0, or 3 if a reply
// was cut.
#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/serve_options.h"
#include "engine/base/error.h"
#include "engine/base/platform.h"
#include "server/api/api.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"
#include "server/http/http.h"

namespace waste::cli {

namespace {

// Exit code when the shutdown grace ran out and a reply was cut (0: nothing was cut; 1: the model
// did not load; 2: a bad command line).
constexpr int kExitCut = 3;

// The name of each signal the daemon waits for, without "SIG" (glibc's sigabbrev_np, which macOS
// lacks).
const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "TERM";
    case SIGINT:
      return "INT";
    case SIGQUIT:
      return "QUIT";
    case SIGHUP:
      return "HUP";
    case SIGUSR1:
      return "USR1";
    case SIGUSR2:
      return "USR2";
    default:
      return "?";
  }
}

// Waits for SIGTERM, SIGINT or SIGQUIT; the others are logged and ignored. Returns the grace a
// running reply gets: none after SIGQUIT, which asks for a quick stop.
std::chrono::milliseconds wait_for_stop(const sigset_t& signals, std::chrono::seconds grace) {
  for (;;) {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGHUP || sig == SIGUSR1 || sig == SIGUSR2) {
      spdlog::info("SIG{}: ignored (waste reloads nothing; restart it to change its options)",
                   signal_name(sig));
      continue;
    }
    if (sig == SIGQUIT) grace = std::chrono::seconds(0);
    spdlog::info("SIG{}: stopping: no new requests; running replies have {} s to finish",
                 signal_name(sig), grace.count());
    return grace;
  }
}

// A daemon bound to loopback answers only loopback Host names (and its --host), so a web page
// cannot reach it through a DNS name that rebinds to 127.0.0.1; bound to every interface it
// answers any name, as clients there may use one it cannot know.
std::vector<std::string> allowed_hosts(const ServeOptions& o) {
  if (!o.allowed_hosts.empty()) {
    for (const std::string& h : o.allowed_hosts)
      if (h == "*") return {};
    return o.allowed_hosts;
  }
  if (o.host == "0.0.0.0" || o.host == "::" || o.host == "[::]") return {};
  return {"localhost", "127.0.0.1", "::1", o.host};
}

http::Options http_options(const ServeOptions& o) {
  http::Options ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.max_body_bytes = o.max_body;
  ho.api_key = o.api_key;
  ho.cors_origins = o.cors;
  ho.allowed_hosts = allowed_hosts(o);
  ho.io_threads = o.http_threads;
  ho.max_connections = o.max_connections;
  ho.error_format = api_error_body;
  return ho;
}

// Best effort: a service manager that cannot be told is not an error of the daemon's.
void notify_service(const std::string& state) {
  if (std::string err = notify_service_manager(state); !err.empty())
    spdlog::warn("could not tell the service manager '{}': {}", state, err);
}

void print_help() {
  fmt::print("usage: waste serve [MODEL] [options]\n\n");
  for (const OptionDoc& d : serve_option_docs())
    fmt::print("  {:<24} {:<26} {}\n", d.flag, d.env, d.help);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") {
      print_help();
      return 0;
    }
  ServeOptions opt;
  try {
    opt = load_serve_options(args, environment());
  } catch (const UsageError& e) {
    throw UsageFailure{e.what()};
  }
  spdlog::set_level(spdlog::level::from_str(opt.log_level));

  // Signals are taken by sigwait on this thread; every thread started below inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGTERM, SIGINT, SIGQUIT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  http::Server server(http_options(opt));
  Api api(opt);
  api.register_routes(server);
  server.start();
  spdlog::info(
      "listening on http://{}:{} (try: curl http://{}:{}/v1/chat/completions -H "
      "'Content-Type: application/json' -d '{{\"messages\":[{{\"role\":\"user\",\"content\":"
      "\"Hello\"}}]}}')",
      opt.host, server.port(), opt.host, server.port());
  api.start_loading([] { notify_service("READY=1"); },
                    [](const std::string&) { kill(getpid(), SIGTERM); });
  const std::chrono::milliseconds grace = wait_for_stop(signals, opt.shutdown_grace);
  notify_service("STOPPING=1");
  server.stop_accepting();
  const size_t cut = api.shutdown(grace);
  server.stop(std::chrono::seconds(2));  // the last bytes of the answers still go out
  server.wait();
  if (!api.ready()) return 1;
  if (cut > 0) {
    spdlog::warn("stopped; {} {} cut short by the shutdown (exit code {})", cut,
                 cut == 1 ? "reply was" : "replies were", kExitCut);
    return kExitCut;
  }
  spdlog::info("stopped");
  return 0;
}

}  // namespace waste::cli
