// `waste download`: the command line of the downloader (server/hub/downloader.h).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "server/cli/args.h"
#include "server/cli/commands.h"
#include "server/hub/downloader.h"

namespace waste::cli {
namespace {

using hub::Settings;
using std::chrono::milliseconds;

constexpr int kExitNoSpace = 3;  // distinct from 1 (network or verification failure)

Settings parse(int argc, char** argv) {
  Args a(argc, argv, 2, {"--repo", "--dest", "--revision", "--endpoint", "--retries", "--timeout"},
         {"--dry-run"});
  if (!a.positional().empty()) throw UsageFailure{"unexpected argument " + a.positional()[0]};
  if (!a.has("--repo") || !a.has("--dest")) throw UsageFailure{"--repo and --dest are required"};
  Settings s;
  s.repo = *a.get("--repo");
  bool repo_ok = !s.repo.empty() && s.repo.find("..") == std::string::npos &&
                 std::count(s.repo.begin(), s.repo.end(), '/') <= 1 && s.repo[0] != '/' &&
                 s.repo.back() != '/';
  for (char c : s.repo) repo_ok = repo_ok && (std::isalnum((uint8_t)c) || strchr("-_./", c));
  if (!repo_ok) throw UsageFailure{"--repo: '" + s.repo + "' is not a repository id (owner/name)"};
  s.dest = *a.get("--dest");
  s.revision = a.get_or("--revision", "main");
  s.dry_run = a.has("--dry-run");
  const char* env_endpoint = std::getenv("HF_ENDPOINT");
  try {
    s.endpoint = hub::parse_url(
        a.get_or("--endpoint", env_endpoint ? env_endpoint : "https://huggingface.co"));
  } catch (const UsageError& e) {
    throw UsageFailure{std::string("--endpoint: ") + e.what()};
  }
  s.retries = (int)a.get_int("--retries", 8, 0, 1000);
  const double timeout = a.get_number("--timeout", 120, 0.001, 3600);
  s.client.idle_timeout = s.client.connect_timeout = milliseconds((int64_t)(timeout * 1000));
  if (const char* tok = std::getenv("HF_TOKEN")) s.client.token = tok;
  // Tests shrink the waits; a user never needs to.
  if (const char* b = std::getenv("WASTE_DOWNLOAD_BACKOFF_MS")) {
    s.backoff_base = milliseconds(std::max(1ll, std::atoll(b)));
    s.backoff_cap = s.backoff_base * 64;
  }
  return s;
}

}  // namespace

int cmd_download(int argc, char** argv) {
  return hub::download(parse(argc, argv)) == hub::DownloadOutcome::kDone ? 0 : kExitNoSpace;
}

}  // namespace waste::cli
