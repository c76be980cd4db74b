#include "engine/convert/convert_plan.h"

#include <charconv>

#include <fmt/ranges.h>
#include <simdjson.h>

#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/base/json_fields.h"
#include "engine/format/container.h"
#include "engine/format/tensor_specs.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

int64_t product(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// The engine reads the patch kernel [out, in, kh, kw] as [out, in*kh*kw] and the position grid
// [h, w, D] as [h*w, D] (what the original's requant_vision.py writes).
std::vector<int64_t> vision_shape(const std::vector<int64_t>& s) {
  if (s.size() == 4) return {s[0], s[1] * s[2] * s[3]};
  if (s.size() == 3) return {s[0] * s[1], s[2]};
  return s;
}

uint64_t quantized_bytes(TensorFormat f, int64_t rows, int64_t cols, uint64_t* scale_bytes) {
  Matrix m{f, rows, cols, nullptr, nullptr};
  *scale_bytes = (uint64_t)(rows * m.groups() * 2);
  return (uint64_t)(rows * m.row_bytes());
}

std::string entry_json(const TrunkTensor& t) {
  std::string shape;
  for (int64_t d : t.shape) shape += fmt::format("{}{}", shape.empty() ? "" : ",", d);
  std::string s = fmt::format("{{\"name\":{},\"fmt\":{},\"off\":{},\"shape\":[{}]",
                              json_quote(t.name), (int)t.fmt, t.off, shape);
  if (t.fmt != TensorFormat::kF32) s += fmt::format(",\"group\":128,\"scale_off\":{}", t.scale_off);
  return s + fmt::format(",\"bytes\":{}}}", t.bytes);
}

std::string hf_arch(simdjson::dom::element root) {
  simdjson::dom::array a;
  if (root["architectures"].get_array().get(a)) return "";
  for (auto e : a) {
    std::string_view s;
    if (!e.get_string().get(s)) return std::string(s);
    break;
  }
  return "";
}

// DeepSeek's spellings of the MoE keys the engine reads, added under the engine's names when
// absent (docs/MODEL.md §1.1): a DeepSeek config read as it is would load no experts.
// `moe_renormalize` counts by presence, so it is written only when `norm_topk_prob` is true.
std::string normalised_keys(simdjson::dom::element text) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {"num_experts", "n_routed_experts"},
      {"num_experts_per_token", "num_experts_per_tok"},
      {"num_shared_experts", "n_shared_experts"}};
  std::string out;
  for (auto [ours, theirs] : kAliases)
    if (!json::has(text, ours) && json::has(text, theirs))
      out += fmt::format(",{}:{}", json_quote(ours), simdjson::minify(text[theirs].value_unsafe()));
  bool norm = false;
  if (!json::has(text, "moe_renormalize") && !text["norm_topk_prob"].get(norm) && norm)
    out += ",\"moe_renormalize\":true";
  return out;
}

// The manifest's `config`: the text config verbatim plus the normalised keys; for the nested
// (K3) layout plus `_outer` with every other top-level key (docs/FORMAT.md §2).
std::string manifest_config(simdjson::dom::element root, bool nested) {
  simdjson::dom::element tc = nested ? root["text_config"].value_unsafe() : root;
  std::string text = simdjson::minify(tc);
  std::string extra = normalised_keys(tc);
  text.pop_back();  // the closing brace
  if (!extra.empty()) text += text.size() > 1 ? extra : extra.substr(1);
  if (!nested) return text + "}";
  std::string outer;
  for (auto f : json::fields(root)) {
    if (f.key == "text_config") continue;
    outer += fmt::format("{}{}:{}", outer.empty() ? "" : ",", json_quote(f.key),
                         simdjson::minify(f.value));
  }
  if (text.size() > 1) text += ',';
  text += "\"_outer\":{";
  text += outer;
  text += "}}";
  return text;
}

// Layer number of a per-layer tensor name (after the prefix), or -1. A number past the
// config's layers and DeepSeek's prediction layers is refused: a config that lists too few
// layers must not drop the rest silently.
int layer_of(std::string_view name, const ConvertPlan& p, const std::string& index) {
  std::string_view head = "model.layers.";
  if (!name.starts_with(p.prefix) || !name.substr(p.prefix.size()).starts_with(head)) return -1;
  std::string_view digits = name.substr(p.prefix.size() + head.size());
  unsigned l = 0;  // unsigned: from_chars takes no sign
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), l);
  if (end == digits.data()) return -1;
  const int limit = p.config.n_layers + p.predict_layers;
  if (ec != std::errc() || l >= (unsigned)limit)
    fail(
        "{}: tensor {} is in layer {}, past num_hidden_layers ({}) + num_nextn_predict_layers ({})",
        index, name, digits.substr(0, (size_t)(end - digits.data())), p.config.n_layers,
        p.predict_layers);
  return (int)l;
}

// What makes a config another family than DeepSeek-V3 (ModelConfig::arch).
std::string not_deepseek_v3(const ModelConfig& c) {
  std::vector<std::string> why;
  if (c.latent > 0) why.push_back("routed_expert_hidden_size is set (K3's latent experts)");
  if (c.attn_res_block > 0) why.push_back("attention residuals are on (K3)");
  if (c.n_kda_layers() > 0)
    why.push_back(
        fmt::format("{} of {} layers are KDA (kda_layers)", c.n_kda_layers(), c.n_layers));
  if (!c.rope.on) why.push_back("MLA has no rotation (mla_use_nope, or qk_rope_head_dim 0)");
  return fmt::format("{}", fmt::join(why, "; "));
}

void plan_trunk(Checkpoint& ck, ConvertPlan* p) {
  uint64_t off = 0;
  const std::string index = (ck.dir() / "model.safetensors.index.json").string();
  for (const auto& [name, shard] : ck.weight_map()) {  // byte order of names, as the original
    if (is_expert_tensor(name) || Checkpoint::is_companion(name)) continue;
    // A multi-token-prediction layer past the last (DeepSeek-V3's layer 61) is not run.
    if (layer_of(name, *p, index) >= p->config.n_layers) continue;
    TrunkTensor t;
    t.name = name;
    t.shard = shard;
    std::vector<int64_t> src = ck.shape(name);
    if (src.empty()) fail("{}: tensor {} is a scalar; the trunk holds 1-4 dims", shard, name);
    bool vision = is_vision_tensor(name);
    t.fmt = trunk_format(name, src, vision);
    t.shape = vision ? vision_shape(src) : src;
    t.cols = t.shape.back();
    t.rows = t.cols ? product(t.shape) / t.cols : 0;
    t.off = off;
    if (t.fmt == TensorFormat::kF32) {
      t.bytes = (uint64_t)product(t.shape) * 4;
    } else {
      uint64_t sb = 0;
      uint64_t pb = quantized_bytes(t.fmt, t.rows, t.cols, &sb);
      t.scale_off = off + pb;
      t.bytes = pb + sb;
    }
    off += t.bytes;
    for (const std::string& f : ck.shards_of(name)) p->trunk_shards.insert(f);
    p->trunk_index += fmt::format("{}{}", p->trunk_index.empty() ? "" : ",\n  ", entry_json(t));
    p->trunk.push_back(std::move(t));
  }
  p->trunk_bytes = off;
  p->trunk_index = "[\n  " + p->trunk_index + "]";
}

// Every tensor the engine will look for must be in the index, before hours of work start.
void check_required(const Checkpoint& ck, const ConvertPlan& p) {
  for (const TensorSpec& s : text_tensor_specs(p.config)) {
    if (s.optional) continue;
    std::string name = p.prefix + s.name;
    if (!ck.weight_map().count(name))
      fail("{}: tensor {} is required by the engine but not in the index",
           (ck.dir() / "model.safetensors.index.json").string(), name);
  }
}

void plan_experts(Checkpoint& ck, ConvertPlan* p) {
  const ModelConfig& c = p->config;
  const RecordGeometry& g = p->geometry;
  for (int l = c.first_dense; l < c.n_layers && c.n_experts > 0; l++) {
    ExpertLayer x;
    x.layer = l;
    x.codebook_base = (int64_t)p->layers.size() * 3 * p->recipe.stages;
    for (int e = 0; e < c.n_experts; e++)
      for (int k = 0; k < 3; k++) {
        std::string n = p->expert_tensor(l, e, k);
        if (!ck.has(n))
          fail("{}: routed expert tensor {} is not in the index",
               (ck.dir() / "model.safetensors.index.json").string(), n);
        for (const std::string& f : ck.shards_of(n)) x.shards.insert(f);
        // Shapes come from the headers alone: a bad one is refused before any encoding.
        std::vector<int64_t> s = ck.shape(n);
        int64_t rows = k == 2 ? g.width : g.inter, cols = k == 2 ? g.inter : g.width;
        if (s.size() != 2 || s[0] != rows || s[1] != cols)
          fail("{}: tensor {} has shape [{}], expected [{}, {}]", ck.shard_of(n), n,
               fmt::join(s, ", "), rows, cols);
      }
    p->layers.push_back(std::move(x));
  }
}

}  // namespace

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += (char)ch;
    } else if (ch < 0x20) {
      out += fmt::format("\\u{:04x}", ch);
    } else {
      out += (char)ch;
    }
  }
  return out + "\"";
}

bool is_vision_tensor(std::string_view name) {
  return name.starts_with("vision_tower.") || name.starts_with("mm_projector.");
}

bool is_expert_tensor(std::string_view name) {
  return name.find(".experts.") != std::string_view::npos;
}

TensorFormat trunk_format(std::string_view name, const std::vector<int64_t>& shape, bool vision) {
  if (shape.size() == 1 || product(shape) < kTrunkF32Below) return TensorFormat::kF32;
  if (vision) return TensorFormat::kQ8G;  // 4 bits damage the tower (docs/CONVERTER.md §1.5)
  if (name.ends_with("embed_tokens.weight") || name.ends_with("lm_head.weight"))
    return TensorFormat::kQ8G;
  return TensorFormat::kQ4G;
}

std::string expert_tensor_name(std::string_view prefix, int layer, int expert, int kind) {
  static const char* kNames[3] = {"w1", "w3", "w2"};
  return fmt::format("{}model.layers.{}.block_sparse_moe.experts.{}.{}.weight", prefix, layer,
                     expert, kNames[kind]);
}

std::string ConvertPlan::expert_tensor(int layer, int expert, int kind) const {
  return expert_tensor_name(prefix, layer, expert, kind);
}

ConvertPlan make_plan(Checkpoint& ck, const std::string& arch, const VqRecipe& recipe) {
  fs::path cfg_path = ck.dir() / "config.json";
  if (!fs::exists(cfg_path)) fail<IoError>("{}: missing", cfg_path.string());
  ConvertPlan p;
  p.recipe = recipe;
  p.outer_json = read_small_file(cfg_path, 16 << 20);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(p.outer_json);
  json::element root = json::parse(parser, padded, cfg_path.string());
  if (!root.is_object()) fail("{}: must be a JSON object", cfg_path.string());
  p.nested = json::has(root, "text_config");
  if (arch == "k3" && !p.nested)
    fail<UsageError>("--arch k3: {} has no text_config (a Kimi-Linear release?)",
                     cfg_path.string());
  if (arch == "kimi-linear" && p.nested)
    fail<UsageError>("--arch kimi-linear: {} nests a text_config (a K3 release?)",
                     cfg_path.string());
  if (arch != "auto" && arch != "k3" && arch != "kimi-linear" && arch != "deepseek-v3")
    fail<UsageError>("--arch: '{}' is not auto, k3, kimi-linear or deepseek-v3", arch);
  if (arch == "deepseek-v3" && p.nested)
    fail<UsageError>("--arch deepseek-v3: {} nests a text_config (a K3 release?)",
                     cfg_path.string());
  p.prefix = p.nested ? "language_model." : "";
  std::string hf = hf_arch(root);
  p.arch = hf == "KimiK3ForConditionalGeneration" ? "kimi-k3"
           : hf == "KimiLinearForCausalLM"        ? "kimi-linear"
           : hf == "DeepseekV3ForCausalLM"        ? "deepseek-v3"
                                                  : hf;
  p.config_json = manifest_config(root, p.nested);
  simdjson::dom::parser cparser;
  simdjson::padded_string cpadded(p.config_json);
  json::element text = cparser.parse(cpadded).value();
  p.config = parse_model_config(text, cfg_path.string());
  const ModelConfig& c = p.config;
  if (arch == "deepseek-v3" && c.arch() != Arch::kDeepSeekV3)
    fail<UsageError>("--arch deepseek-v3: {} is not a DeepSeek-V3 config: {}", cfg_path.string(),
                     not_deepseek_v3(c));
  p.predict_layers =
      (int)json::get_int_or(text, "num_nextn_predict_layers", cfg_path.string(), 0, 128, 0);
  p.geometry.inter = c.moe_inter;
  p.geometry.width = c.expert_in();
  p.geometry.stages = recipe.stages;
  p.geometry.entries = recipe.entries;
  p.geometry.stride = (p.geometry.used_bytes() + 4095) / 4096 * 4096;
  check_required(ck, p);
  plan_trunk(ck, &p);
  plan_experts(ck, &p);
  return p;
}

}  // namespace waste
