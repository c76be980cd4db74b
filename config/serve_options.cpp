#include "config/serve_options.h"

#include <cstdint>
#include <cstdlib>
#include <functional>

#include <fmt/format.h>
#include <simdjson.h>

#include "config/option_values.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/experts/ram_budget.h"

namespace waste {

namespace {

using ServeOption = Option<ServeOptions>;

// The engine's options, set on ServeOptions::engine.
std::vector<ServeOption> engine_options() {
  std::vector<ServeOption> out;
  for (const Option<EngineOptions>& e : engine_option_table()) {
    auto set = e.set;
    out.push_back(
        {e.doc, [set](ServeOptions& o, const std::string& v) { set(o.engine, v); }, e.boolean});
  }
  return out;
}

const std::vector<ServeOption>& options() {
  static const std::vector<ServeOption> kOptions = [] {
    std::vector<ServeOption> table = {
        {{"--host", "WASTE_HOST", "host", "address to bind (default 127.0.0.1: this machine only)"},
         [](ServeOptions& o, const std::string& v) {
           if (v.empty()) fail<UsageError>("must not be empty");
           o.host = v;
         }},
        {{"--port", "WASTE_PORT", "port", "TCP port (default 8000; 0 picks a free one)"},
         [](ServeOptions& o, const std::string& v) { o.port = (int)option_int(v, 0, 65535); }},
        {{"--api-key", "WASTE_API_KEY", "api_key", "require 'Authorization: Bearer KEY' on /v1"},
         [](ServeOptions& o, const std::string& v) { o.api_key = v; }},
    };
    for (ServeOption& e : engine_options()) table.push_back(std::move(e));
    std::vector<ServeOption> rest = {
        {{"--parallel", "WASTE_PARALLEL", "parallel",
          "conversations run at once, sharing each step's expert reads (default: as many as "
          "the RAM plan fits beside the budget, at most 4)"},
         [](ServeOptions& o, const std::string& v) { o.parallel = (int)option_int(v, 1, 256); }},
        {{"--step-tokens", "WASTE_STEP_TOKENS", "step_tokens",
          "prompt tokens one shared step takes, beside every conversation's next token "
          "(default: the prefill window)"},
         [](ServeOptions& o, const std::string& v) { o.step_tokens = option_int(v, 1, 1 << 20); }},
        {{"--queue", "WASTE_QUEUE", "queue",
          "requests that may wait for a slot (default 16; more get 429)"},
         [](ServeOptions& o, const std::string& v) { o.queue = (size_t)option_int(v, 0, 100000); }},
        {{"--max-body", "WASTE_MAX_BODY", "max_body", "largest request body (default 32M)"},
         [](ServeOptions& o, const std::string& v) { o.max_body = parse_bytes(v); }},
        {{"--max-tokens", "WASTE_MAX_TOKENS", "max_tokens", "cap on a request's max_tokens"},
         [](ServeOptions& o, const std::string& v) { o.max_tokens = option_int(v, 0, 1 << 24); }},
        {{"--default-max-tokens", "WASTE_DEFAULT_MAX_TOKENS", "default_max_tokens",
          "max_tokens when a request gives none (default 4096)"},
         [](ServeOptions& o, const std::string& v) {
           o.default_max_tokens = option_int(v, 1, 1 << 24);
         }},
        {{"--max-n", "WASTE_MAX_N", "max_n", "most replies one request may ask for (n; default 8)"},
         [](ServeOptions& o, const std::string& v) { o.max_n = (int)option_int(v, 1, 1024); }},
        {{"--seed", "WASTE_SEED", "seed",
          "sampler seed for requests that give none (default: a random seed per request); "
          "the same request then gets the same reply"},
         [](ServeOptions& o, const std::string& v) {
           o.seed = (uint64_t)option_int(v, 0, INT64_MAX);
         }},
        {{"--snapshot-memory", "WASTE_SNAPSHOT_MEMORY", "snapshot_memory",
          "RAM for prompt-prefix snapshots (default 2G)"},
         [](ServeOptions& o, const std::string& v) { o.snapshot_bytes = parse_bytes(v); }},
        {{"--prompt-cache-dir", "WASTE_PROMPT_CACHE_DIR", "prompt_cache_dir",
          "folder of the prompt cache's disk tier, one subfolder per model ('off': none; "
          "default $XDG_CACHE_HOME/waste, else ~/.cache/waste)"},
         [](ServeOptions& o, const std::string& v) {
           if (v.empty()) fail<UsageError>("must be a folder or 'off'");
           o.prompt_cache_dir = v;
         }},
        {{"--prompt-cache-disk", "WASTE_PROMPT_CACHE_DISK", "prompt_cache_disk",
          "most bytes the prompt cache keeps on disk (default 32G; never more than the free "
          "space allows)"},
         [](ServeOptions& o, const std::string& v) { o.prompt_cache_disk = parse_bytes(v); }},
        {{"--warm-start", "WASTE_WARM_START", "warm_start",
          "at start, read the experts earlier runs used most into the expert cache, in the "
          "background (default on; the counts are kept in the prompt cache's folder)"},
         [](ServeOptions& o, const std::string& v) { o.warm_start = parse_bool(v); }},
        {{"--allowed-hosts", "WASTE_ALLOWED_HOSTS", "allowed_hosts",
          "Host names served, comma-separated ('*': any; default: loopback names and --host, or "
          "any when bound to every interface)"},
         [](ServeOptions& o, const std::string& v) { o.allowed_hosts = option_list(v); }},
        {{"--http-threads", "WASTE_HTTP_THREADS", "http_threads",
          "threads that move HTTP bytes (default 2); parsing and decoding run elsewhere"},
         [](ServeOptions& o, const std::string& v) { o.http_threads = (int)option_int(v, 1, 64); }},
        {{"--max-connections", "WASTE_MAX_CONNECTIONS", "max_connections",
          "open connections (default 512); at the cap the longest idle one goes, else 503"},
         [](ServeOptions& o, const std::string& v) {
           o.max_connections = (size_t)option_int(v, 1, 1000000);
         }},
        {{"--shutdown-grace", "WASTE_SHUTDOWN_GRACE", "shutdown_grace",
          "seconds a running reply may take to finish after SIGTERM (default 30)"},
         [](ServeOptions& o, const std::string& v) {
           o.shutdown_grace = std::chrono::seconds(option_int(v, 0, 86400));
         }},
        {{"--cors", "WASTE_CORS", "cors", "allowed browser origins, comma-separated ('*': any)"},
         [](ServeOptions& o, const std::string& v) { o.cors = option_list(v); }},
        {{"--thinking", "WASTE_THINKING", "thinking",
          "a model with a think channel (K3, K2-Thinking) thinks when a request does not say "
          "(default true); false: only when it asks; "
          "never: not even then"},
         [](ServeOptions& o, const std::string& v) {
           o.thinking_allowed = v != "never";
           if (!o.thinking_allowed) {
             o.thinking = false;
             return;
           }
           try {
             o.thinking = parse_bool(v);
           } catch (const UsageError&) {
             fail<UsageError>("'{}' is not true, false or never", v);
           }
         }},
        {{"--effort", "WASTE_EFFORT", "effort", "K3 thinking effort by default: low, high, max"},
         [](ServeOptions& o, const std::string& v) {
           if (v != "low" && v != "high" && v != "max")
             fail<UsageError>("'{}' is not low, high or max", v);
           o.effort = v;
         }},
        {{"--allow-remote-images", "WASTE_ALLOW_REMOTE_IMAGES", "allow_remote_images",
          "fetch http(s) image URLs (default false: only data: URLs); the server then makes "
          "requests on clients' behalf, to any host they name"},
         [](ServeOptions& o, const std::string& v) { o.allow_remote_images = parse_bool(v); }},
        {{"--allow-private-image-hosts", "WASTE_ALLOW_PRIVATE_IMAGE_HOSTS",
          "allow_private_image_hosts",
          "with --allow-remote-images: also fetch from loopback, link-local and private "
          "addresses (default false)"},
         [](ServeOptions& o, const std::string& v) {
           o.allow_private_image_hosts = parse_bool(v);
         }},
        {{"--max-image-bytes", "WASTE_MAX_IMAGE_BYTES", "max_image_bytes",
          "largest image file, checked before base64 decoding (default 20M)"},
         [](ServeOptions& o, const std::string& v) {
           o.max_image_bytes = parse_bytes(v);
           if (o.max_image_bytes < 64) fail<UsageError>("must be at least 64 bytes");
         }},
        {{"--max-image-pixels", "WASTE_MAX_IMAGE_PIXELS", "max_image_pixels",
          "largest image, width x height before decoding (default 40000000)"},
         [](ServeOptions& o, const std::string& v) {
           o.max_image_pixels = (uint64_t)option_int(v, 1, int64_t{16384} * 16384);
         }},
        {{"--max-images", "WASTE_MAX_IMAGES", "max_images", "images per request (default 8)"},
         [](ServeOptions& o, const std::string& v) {
           o.max_images = (size_t)option_int(v, 0, 1024);
         }},
        {{"--max-image-patches", "WASTE_MAX_IMAGE_PATCHES", "max_image_patches",
          "patch budget per image, 4..65536 (default: the model's vision.json, 1024; tokens are "
          "a quarter of the patches)"},
         [](ServeOptions& o, const std::string& v) {
           o.max_image_patches = option_int(v, 4, 65536);
         }},
        {{"--allow-tga-psd", "WASTE_ALLOW_TGA_PSD", "allow_tga_psd",
          "also decode PSD and TGA (declared image/x-tga) images; stb's record on them is poor"},
         [](ServeOptions& o, const std::string& v) { o.allow_tga_psd = parse_bool(v); }},
        {{"--model-name", "WASTE_MODEL_NAME", "model_name", "model id in /v1/models"},
         [](ServeOptions& o, const std::string& v) { o.model_name = v; }},
        {{"--model-alias", "WASTE_MODEL_ALIAS", "model_alias",
          "another name requests may use for the model (repeatable, or comma-separated); '*' "
          "answers any name. Replies carry the name the request gave"},
         [](ServeOptions& o, const std::string& v) {
           for (std::string& a : option_list(v)) o.model_aliases.push_back(std::move(a));
         }},
        {{"--log-level", "WASTE_LOG_LEVEL", "log_level", "debug, info, warn or error"},
         [](ServeOptions& o, const std::string& v) {
           if (v != "debug" && v != "info" && v != "warn" && v != "error")
             fail<UsageError>("'{}' is not debug, info, warn or error", v);
           o.log_level = v;
         }},
    };
    for (ServeOption& r : rest) table.push_back(std::move(r));
    return table;
  }();
  return kOptions;
}

const ServeOption* by(const std::string& what, const std::string OptionDoc::*field) {
  for (const ServeOption& o : options())
    if (o.doc.*field == what) return &o;
  return nullptr;
}

void apply(const ServeOption& o, ServeOptions& s, const std::string& value,
           const std::string& source) {
  try {
    o.set(s, value);
  } catch (const UsageError& e) {
    fail<UsageError>("{} ({}): {}", source, o.doc.flag, e.what());
  }
}

std::string json_scalar(const simdjson::dom::element& e, const std::string& where) {
  if (e.is_string()) return std::string(std::string_view(e.get_string()));
  if (e.is_bool()) return bool(e.get_bool()) ? "true" : "false";
  if (e.is_int64()) return std::to_string(int64_t(e.get_int64()));
  if (e.is_array()) {  // lists, e.g. cors origins
    std::string out;
    simdjson::dom::array a = e.get_array();
    for (simdjson::dom::element x : a) {
      if (!out.empty()) out += ',';
      out += json_scalar(x, where);
    }
    return out;
  }
  fail<UsageError>("{}: must be a string, number, boolean or list", where);
}

void apply_file(const std::string& path, ServeOptions& s) {
  std::string text = read_small_file(path, 1 << 20);
  simdjson::dom::parser p;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  if (p.parse(padded).get(root) || !root.is_object())
    fail<UsageError>("{}: must be a JSON object of options", path);
  simdjson::dom::object obj = root.get_object();
  for (auto [k, v] : obj) {
    std::string key(k);
    if (key == "model") {
      s.model = json_scalar(v, path + ": model");
      continue;
    }
    const ServeOption* o = by(key, &OptionDoc::key);
    if (!o) fail<UsageError>("{}: unknown option '{}'", path, key);
    apply(*o, s, json_scalar(v, path + ": " + key), path + ": " + key);
  }
}

}  // namespace

std::string default_prompt_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/waste";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/waste";
  return "";
}

const std::vector<OptionDoc>& serve_option_docs() {
  static const std::vector<OptionDoc> docs = [] {
    std::vector<OptionDoc> d;
    for (const ServeOption& o : options()) d.push_back(o.doc);
    d.push_back({"--config", "WASTE_CONFIG", "", "JSON file of options (keys as in this table)"});
    return d;
  }();
  return docs;
}

ServeOptions load_serve_options(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  ServeOptions s;
  // The config file comes first in precedence order, wherever --config stands.
  std::string config;
  if (auto it = env.find("WASTE_CONFIG"); it != env.end()) config = it->second;
  for (size_t i = 0; i < args.size(); i++)
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) fail<UsageError>("--config needs a file");
      config = args[i + 1];
    } else if (args[i].rfind("--config=", 0) == 0) {
      config = args[i].substr(9);
    }
  if (!config.empty()) apply_file(config, s);
  for (const ServeOption& o : options())
    if (auto it = env.find(o.doc.env); it != env.end()) apply(o, s, it->second, o.doc.env);
  for (size_t i = 0; i < args.size(); i++) {
    std::string a = args[i], value;
    if (a.rfind("--", 0) != 0) {
      if (!s.model.empty() && s.model != a) fail<UsageError>("more than one MODEL given ('{}')", a);
      s.model = a;
      continue;
    }
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    if (a == "--config") {
      if (eq == std::string::npos) i++;
      continue;
    }
    const ServeOption* o = by(a, &OptionDoc::flag);
    if (!o) fail<UsageError>("unknown option {}", a);
    if (eq == std::string::npos) {
      // A boolean flag stands alone unless a true/false word follows it.
      if (o->boolean && (i + 1 >= args.size() || !is_bool_word(args[i + 1])))
        value = "true";
      else if (i + 1 < args.size())
        value = args[++i];
      else
        fail<UsageError>("{} needs a value", a);
    }
    apply(*o, s, value, "command line");
  }
  return s;
}

}  // namespace waste
