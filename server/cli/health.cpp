// `waste health [URL]`: asks a running daemon's /health and exits 0 only if it answers 200 — a
// probe for container HEALTHCHECKs and scripts, in images that carry no curl.
#include <fmt/format.h>

#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/hub/hub_client.h"

namespace waste::cli {

int cmd_health(int argc, char** argv) {
  Args a(argc, argv, 2, {"--timeout"}, {});
  if (a.positional().size() > 1) throw UsageFailure{"expected at most one URL"};
  const std::string url =
      a.positional().empty() ? "http://127.0.0.1:8000/health" : a.positional()[0];
  hub::Url u;
  try {
    u = hub::parse_url(url);
  } catch (const std::exception& e) {
    throw UsageFailure{e.what()};
  }
  hub::ClientOptions o;
  o.connect_timeout = o.idle_timeout =
      std::chrono::milliseconds(1000 * a.get_int("--timeout", 5, 1, 3600));
  o.user_agent = "waste-health";
  try {
    hub::HttpClient client(o);
    hub::Response r = client.request("GET", u, {}, false);
    fmt::print("{} {}\n", r.status, r.body);
    return r.status == 200 ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "waste health: {}: {}\n", url, e.what());
    return 1;
  }
}

}  // namespace waste::cli
