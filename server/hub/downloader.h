// The downloader behind `waste download`: fetches a model repository from the hub into a folder,
// resumably (docs/CONVERTER.md §5). The revision is pinned to one commit, each file lands in
// DIR/.download/FILE.part, is resumed with a range request, checked against its size and (for
// LFS files) the SHA-256 the hub publishes, then fsynced and renamed into place and recorded in
// DIR/.download/state. A kill at any point loses at most the bytes not yet written; a rerun
// skips recorded files without a request.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>

#include "server/hub/hub_client.h"

namespace waste::hub {

// What to fetch and how hard to try.
struct Settings {
  using milliseconds = std::chrono::milliseconds;

  std::string repo, revision;
  std::filesystem::path dest;
  bool dry_run = false;
  Url endpoint;
  ClientOptions client;
  int retries = 8;  // consecutive failed tries without progress before giving up on a file
  milliseconds backoff_base{5'000}, backoff_cap{320'000};
};

enum class DownloadOutcome { kDone, kNoSpace };

// Downloads (or with dry_run, lists) `s.repo` into `s.dest`. Throws for network and
// verification failures that retries did not cure.
DownloadOutcome download(const Settings& s);

}  // namespace waste::hub
