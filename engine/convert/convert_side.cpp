#include "engine/convert/convert_side.h"

#include <algorithm>

#include <simdjson.h>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/format/container.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxSide = 64 << 20;

void copy_atomic(const fs::path& from, const fs::path& to) {
  write_file_atomic(to, read_small_file(from, kMaxSide));
}

std::string specials_json(std::vector<SpecialToken> t) {
  std::sort(t.begin(), t.end(), [](auto& a, auto& b) { return a.id < b.id; });
  std::string s = "[\n";
  for (size_t i = 0; i < t.size(); i++)
    s += fmt::format(" {{\"id\": {}, \"text\": {}}}{}\n", t[i].id, json_quote(t[i].text),
                     i + 1 < t.size() ? "," : "");
  return s + "]\n";
}

// vision.json: the release's vision_config (keys without a leading '_') plus the engine's keys.
std::string vision_json(const ConvertPlan& p, const fs::path& src,
                        const std::function<void(const std::string&)>& log) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(p.outer_json);
  simdjson::dom::element root = parser.parse(padded).value();
  std::vector<std::pair<std::string, std::string>> keys;
  auto put = [&](const std::string& k, const std::string& v) {
    for (auto& kv : keys)
      if (kv.first == k) {
        kv.second = v;
        return;
      }
    keys.emplace_back(k, v);
  };
  simdjson::dom::object vc;
  if (!root["vision_config"].get_object().get(vc))
    for (auto f : vc)
      if (!f.key.starts_with("_")) put(std::string(f.key), simdjson::minify(f.value));
  put("vt_rms_eps", "1.1920928955078125e-07");
  simdjson::dom::element id;
  if (!root["media_placeholder_token_id"].get(id))
    put("media_placeholder_token_id", simdjson::minify(id));
  put("max_patches", "1024");
  fs::path pre = src / "preprocessor_config.json";
  simdjson::dom::parser pp;
  simdjson::padded_string ptext;
  simdjson::dom::element cfg;
  bool have = fs::exists(pre);
  if (have) {
    ptext = simdjson::padded_string(read_small_file(pre, kMaxSide));
    have = !pp.parse(ptext).get(cfg) && !cfg["media_proc_cfg"].get(cfg);
  }
  if (!have) {
    log(fmt::format("{}: missing or without media_proc_cfg; vision.json assumes mean/std 0.5",
                    pre.string()));
    put("image_mean", "[0.5,0.5,0.5]");
    put("image_std", "[0.5,0.5,0.5]");
  } else {
    for (const char* k :
         {"image_mean", "image_std", "patch_size", "in_patch_limit", "patch_limit_on_one_side"}) {
      simdjson::dom::element v;
      if (!cfg[k].get(v)) put(k, simdjson::minify(v));
    }
  }
  std::string s = "{\n";
  for (size_t i = 0; i < keys.size(); i++)
    s += fmt::format(" {}: {}{}\n", json_quote(keys[i].first), keys[i].second,
                     i + 1 < keys.size() ? "," : "");
  return s + "}\n";
}

}  // namespace

void write_side_files(const fs::path& src, const fs::path& out, const ConvertPlan& plan,
                      const SpecialsReader& read_specials,
                      const std::function<void(const std::string&)>& log) {
  if (fs::exists(src / "tiktoken.model"))
    copy_atomic(src / "tiktoken.model", out / "tokenizer.model");
  else if (fs::exists(src / "tokenizer.model"))
    copy_atomic(src / "tokenizer.model", out / "tokenizer.model");
  else
    log(fmt::format("{}: no tiktoken.model or tokenizer.model; the container has no tokenizer",
                    src.string()));
  fs::path tc = src / "tokenizer_config.json";
  if (fs::exists(tc) && read_specials)
    write_file_atomic(out / "specials.json", specials_json(read_specials(tc.string())));
  else
    log(fmt::format("{}: no specials read; the container has no specials.json", tc.string()));
  if (fs::exists(src / "chat_template.jinja"))
    copy_atomic(src / "chat_template.jinja", out / "chat_template.jinja");
  if (plan.nested && plan.outer_json.find("\"vision_config\"") != std::string::npos)
    write_file_atomic(out / "vision.json", vision_json(plan, src, log));
}

}  // namespace waste
