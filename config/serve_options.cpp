#include "config/serve_options.h"

#include <functional>
#include <sstream>

#include <fmt/format.h>
#include <simdjson.h>

#include "engine/container.h"
#include "engine/error.h"
#include "engine/ram_budget.h"

namespace waste {

namespace {

using Setter = std::function<void(ServeOptions&, const std::string&)>;

struct Option {
  OptionDoc doc;
  Setter set;
  bool is_flag = false;  // takes no value on the command line
};

int64_t to_int(const std::string& v, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (...) {
    used = 0;
  }
  if (used == 0 || used != v.size()) fail<UsageError>("'{}' is not an integer", v);
  if (n < lo || n > hi) fail<UsageError>("{} is out of range ({}..{})", n, lo, hi);
  return n;
}

bool to_bool(const std::string& v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  fail<UsageError>("'{}' is not true or false", v);
}

std::vector<std::string> to_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

const std::vector<Option>& options() {
  static const std::vector<Option> kOptions = {
      {{"--host", "WASTE_HOST", "host", "address to bind (default 127.0.0.1: this machine only)"},
       [](ServeOptions& o, const std::string& v) {
         if (v.empty()) fail<UsageError>("must not be empty");
         o.host = v;
       }},
      {{"--port", "WASTE_PORT", "port", "TCP port (default 8000; 0 picks a free one)"},
       [](ServeOptions& o, const std::string& v) { o.port = (int)to_int(v, 0, 65535); }},
      {{"--api-key", "WASTE_API_KEY", "api_key", "require 'Authorization: Bearer KEY' on /v1"},
       [](ServeOptions& o, const std::string& v) { o.api_key = v; }},
      {{"--budget", "WASTE_BUDGET", "budget", "RAM budget, e.g. 48G (default: planned)"},
       [](ServeOptions& o, const std::string& v) { o.budget = parse_bytes(v); }},
      {{"--ctx", "WASTE_CTX", "ctx", "positions per conversation (default 4096)"},
       [](ServeOptions& o, const std::string& v) { o.ctx = to_int(v, 16, 1 << 24); }},
      {{"--threads", "WASTE_THREADS", "threads", "compute threads (default: all cores)"},
       [](ServeOptions& o, const std::string& v) { o.threads = (int)to_int(v, 0, 1024); }},
      {{"--chunk", "WASTE_CHUNK", "chunk", "prompt tokens per prefill pass (default 64)"},
       [](ServeOptions& o, const std::string& v) { o.chunk = (int)to_int(v, 1, 4096); }},
      {{"--lookahead", "WASTE_LOOKAHEAD", "lookahead", "experts prefetched per layer (default 6)"},
       [](ServeOptions& o, const std::string& v) { o.lookahead = (int)to_int(v, 0, 64); }},
      {{"--io-threads", "WASTE_IO_THREADS", "io_threads", "expert reader threads (default 4)"},
       [](ServeOptions& o, const std::string& v) { o.io_threads = (int)to_int(v, 0, 64); }},
      {{"--queue", "WASTE_QUEUE", "queue", "requests that may wait (default 16; more get 429)"},
       [](ServeOptions& o, const std::string& v) { o.queue = (size_t)to_int(v, 0, 100000); }},
      {{"--max-body", "WASTE_MAX_BODY", "max_body", "largest request body (default 32M)"},
       [](ServeOptions& o, const std::string& v) { o.max_body = parse_bytes(v); }},
      {{"--max-tokens", "WASTE_MAX_TOKENS", "max_tokens", "cap on a request's max_tokens"},
       [](ServeOptions& o, const std::string& v) { o.max_tokens = to_int(v, 0, 1 << 24); }},
      {{"--default-max-tokens", "WASTE_DEFAULT_MAX_TOKENS", "default_max_tokens",
        "max_tokens when a request gives none (default 4096)"},
       [](ServeOptions& o, const std::string& v) { o.default_max_tokens = to_int(v, 1, 1 << 24); }},
      {{"--snapshot-memory", "WASTE_SNAPSHOT_MEMORY", "snapshot_memory",
        "RAM for prompt-prefix snapshots (default 2G)"},
       [](ServeOptions& o, const std::string& v) { o.snapshot_bytes = parse_bytes(v); }},
      {{"--cors", "WASTE_CORS", "cors", "allowed browser origins, comma-separated ('*': any)"},
       [](ServeOptions& o, const std::string& v) { o.cors = to_list(v); }},
      {{"--thinking", "WASTE_THINKING", "thinking", "K3 thinks unless a request says (default on)"},
       [](ServeOptions& o, const std::string& v) { o.thinking = to_bool(v); }},
      {{"--effort", "WASTE_EFFORT", "effort", "K3 thinking effort by default: low, high, max"},
       [](ServeOptions& o, const std::string& v) {
         if (v != "low" && v != "high" && v != "max")
           fail<UsageError>("'{}' is not low, high or max", v);
         o.effort = v;
       }},
      {{"--allow-remote-images", "WASTE_ALLOW_REMOTE_IMAGES", "allow_remote_images",
        "fetch http(s) image URLs (default false: only data: URLs); the server then makes "
        "requests on clients' behalf, to any host they name"},
       [](ServeOptions& o, const std::string& v) { o.allow_remote_images = to_bool(v); }},
      {{"--max-image-bytes", "WASTE_MAX_IMAGE_BYTES", "max_image_bytes",
        "largest image file, checked before base64 decoding (default 20M)"},
       [](ServeOptions& o, const std::string& v) {
         o.max_image_bytes = parse_bytes(v);
         if (o.max_image_bytes < 64) fail<UsageError>("must be at least 64 bytes");
       }},
      {{"--max-image-pixels", "WASTE_MAX_IMAGE_PIXELS", "max_image_pixels",
        "largest image, width x height before decoding (default 40000000)"},
       [](ServeOptions& o, const std::string& v) {
         o.max_image_pixels = (uint64_t)to_int(v, 1, int64_t{16384} * 16384);
       }},
      {{"--max-images", "WASTE_MAX_IMAGES", "max_images", "images per request (default 8)"},
       [](ServeOptions& o, const std::string& v) { o.max_images = (size_t)to_int(v, 0, 1024); }},
      {{"--max-image-patches", "WASTE_MAX_IMAGE_PATCHES", "max_image_patches",
        "patch budget per image, 4..65536 (default: the model's vision.json, 1024; tokens are "
        "a quarter of the patches)"},
       [](ServeOptions& o, const std::string& v) { o.max_image_patches = to_int(v, 4, 65536); }},
      {{"--allow-tga-psd", "WASTE_ALLOW_TGA_PSD", "allow_tga_psd",
        "also decode PSD and TGA (declared image/x-tga) images; stb's record on them is poor"},
       [](ServeOptions& o, const std::string& v) { o.allow_tga_psd = to_bool(v); }},
      {{"--model-name", "WASTE_MODEL_NAME", "model_name", "model id in /v1/models"},
       [](ServeOptions& o, const std::string& v) { o.model_name = v; }},
      {{"--log-level", "WASTE_LOG_LEVEL", "log_level", "debug, info, warn or error"},
       [](ServeOptions& o, const std::string& v) {
         if (v != "debug" && v != "info" && v != "warn" && v != "error")
           fail<UsageError>("'{}' is not debug, info, warn or error", v);
         o.log_level = v;
       }},
  };
  return kOptions;
}

const Option* by(const std::string& what, const std::string OptionDoc::*field) {
  for (const Option& o : options())
    if (o.doc.*field == what) return &o;
  return nullptr;
}

void apply(const Option& o, ServeOptions& s, const std::string& value, const std::string& source) {
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
    const Option* o = by(key, &OptionDoc::key);
    if (!o) fail<UsageError>("{}: unknown option '{}'", path, key);
    apply(*o, s, json_scalar(v, path + ": " + key), path + ": " + key);
  }
}

}  // namespace

const std::vector<OptionDoc>& serve_option_docs() {
  static const std::vector<OptionDoc> docs = [] {
    std::vector<OptionDoc> d;
    for (const Option& o : options()) d.push_back(o.doc);
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
  for (const Option& o : options())
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
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      fail<UsageError>("{} needs a value", a);
    }
    if (a == "--config") continue;
    const Option* o = by(a, &OptionDoc::flag);
    if (!o) fail<UsageError>("unknown option {}", a);
    apply(*o, s, value, "command line");
  }
  return s;
}

}  // namespace waste
