// `waste serve`: the daemon. Binds first (so /health answers 503 while the model loads), loads
// in the background, serves until SIGTERM or SIGINT, then stops accepting, lets the running
// request end and exits 0.
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "config/serve_options.h"
#include "engine/base/error.h"
#include "server/api/api.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/cli/model_args.h"
#include "server/http/http.h"

namespace waste::cli {

namespace {

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
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  http::Options ho;
  ho.host = opt.host;
  ho.port = opt.port;
  ho.max_body_bytes = opt.max_body;
  ho.api_key = opt.api_key;
  ho.cors_origins = opt.cors;
  ho.error_format = api_error_body;
  http::Server server(ho);
  Api api(opt);
  api.register_routes(server);
  server.start();
  spdlog::info(
      "listening on http://{}:{} (try: curl http://{}:{}/v1/chat/completions -H "
      "'Content-Type: application/json' -d '{{\"messages\":[{{\"role\":\"user\",\"content\":"
      "\"Hello\"}}]}}')",
      opt.host, server.port(), opt.host, server.port());
  api.start_loading([](const std::string&) { kill(getpid(), SIGTERM); });
  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("{}: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
  server.stop();
  api.shutdown();
  server.wait();
  return api.ready() ? 0 : 1;
}

}  // namespace waste::cli
