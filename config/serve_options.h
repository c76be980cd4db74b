// Every option of `waste serve`: its default, its environment variable and config-file key, and
// its validation. Precedence: defaults < config file < environment < command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "config/engine_options.h"

namespace waste {

struct ServeOptions {
  std::string model;  // empty: the built-in demo container
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  EngineOptions engine;           // budget, ctx, threads, chunk, lookahead, I/O, policy, verify
  int parallel = 0;               // conversations at once (0: as many as the RAM plan fits)
  int64_t step_tokens = 0;        // prompt tokens per shared step (0: the prefill window)
  size_t queue = 16;              // waiting requests beyond the running ones
  uint64_t max_body = 32u << 20;  // request body bytes
  int64_t max_tokens = 0;         // cap on max_tokens (0: the context is the cap)
  int64_t default_max_tokens = 4096;
  int max_n = 8;  // replies per request (OpenAI's n)
  // The sampler's seed when a request gives none; unset: a fresh random seed per request.
  std::optional<uint64_t> seed;
  uint64_t snapshot_bytes = 2ull << 30;
  // The prompt cache's disk tier: its folder ("off": none; empty: default_prompt_cache_dir())
  // and the most bytes it may hold.
  std::string prompt_cache_dir;
  uint64_t prompt_cache_disk = 32ull << 30;
  // Warm the expert cache at start from the demand counts kept in the cache folder.
  bool warm_start = true;
  std::vector<std::string> cors;           // allowed origins; "*" for any
  std::vector<std::string> allowed_hosts;  // Host names served; empty: the default (serve.cpp)
  int http_threads = 2;
  size_t max_connections = 512;
  std::chrono::seconds shutdown_grace{30};
  bool thinking = true;                    // thinking when the request does not say
  bool thinking_allowed = true;            // false keeps thinking off whatever it says
  std::string effort = "max";              // K3: thinking effort when the request does not say
  bool allow_remote_images = false;        // fetch http(s) image URLs (the server makes requests)
  bool allow_private_image_hosts = false;  // ... also from loopback, link-local, private hosts
  uint64_t max_image_bytes = 20u << 20;    // one image's file, i.e. a data URL after base64
  uint64_t max_image_pixels = 40'000'000;
  size_t max_images = 8;          // per request
  int64_t max_image_patches = 0;  // per image; 0: the container's vision.json max_patches
  bool allow_tga_psd = false;     // TGA (declared as image/x-tga) and PSD images
  std::string model_name;         // id reported by /v1/models; default: the folder name
  // Other names requests may give the served model (an agent's "claude-..." or "gpt-..."); the
  // alias kAnyModel lets every name through. A reply carries the name its request gave.
  std::vector<std::string> model_aliases;
  std::string log_level = "info";
};

// The model alias that answers any model name (agents change theirs from version to version).
inline constexpr char kAnyModel[] = "*";

// $XDG_CACHE_HOME/waste, else ~/.cache/waste; empty when neither variable is set.
std::string default_prompt_cache_dir();

// The table of options, for --help and the docs: flag, env, config key, description.
const std::vector<OptionDoc>& serve_option_docs();

// Applies the sources in order. `args` are the words after "serve"; `env` maps variable names to
// values (the caller passes the process environment). A boolean option given alone on the
// command line (`--verify`) is true; it also takes a value (`--verify=false`, `--verify off`).
// Throws UsageError naming the option, the source and the problem.
ServeOptions load_serve_options(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env);

}  // namespace waste
