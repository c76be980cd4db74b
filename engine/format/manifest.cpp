#include "engine/format/manifest.h"

#include <simdjson.h>

#include "engine/base/error.h"
#include "engine/base/json_fields.h"

namespace waste {

namespace {

constexpr int64_t kMaxTensorDim = 1 << 26;

TensorFormat parse_format(int64_t v, const std::string& where) {
  switch (v) {
    case 0:
      return TensorFormat::kF32;
    case 2:
      return TensorFormat::kQ8G;
    case 3:
      return TensorFormat::kQ4G;
    default:
      fail("{}.fmt: trunk format {} is not supported (F32=0, Q8G=2, Q4G=3)", where, v);
  }
}

TrunkEntry parse_trunk_entry(const json::element& e, const std::string& where) {
  if (!e.is_object()) fail("{}: must be an object", where);
  TrunkEntry t;
  t.name = json::get_string(e, "name", where);
  std::string w = where + " (" + t.name + ")";
  t.fmt = parse_format(json::get_int(e, "fmt", w, 0, 255), w);
  json::element shape = json::get_array(e, "shape", w);
  for (json::element d : json::items(shape))
    t.shape.push_back(json::as_int(d, w + ".shape[]", 1, kMaxTensorDim));
  if (t.shape.empty() || t.shape.size() > 4) fail("{}.shape: must have 1 to 4 dimensions", w);
  if (t.elements() > (int64_t{1} << 40)) fail("{}.shape: too many elements", w);
  t.off = (uint64_t)json::get_int(e, "off", w, 0, int64_t{1} << 50);
  t.bytes = (uint64_t)json::get_int(e, "bytes", w, 0, int64_t{1} << 50);
  if (t.fmt != TensorFormat::kF32) {
    t.group = json::get_int(e, "group", w, 1, 1 << 20);
    if (t.group != kQuantGroup) fail("{}.group: {} is not supported (only 128)", w, t.group);
    t.scale_off = (uint64_t)json::get_int(e, "scale_off", w, 0, int64_t{1} << 50);
  }
  return t;
}

ExpertQuant parse_quant(const json::element& q, const std::string& where) {
  ExpertQuant x;
  x.fmt = json::get_string_opt(q, "fmt", where).value_or("");
  x.stages = (int)json::get_int(q, "stages", where, 1, 8);
  x.vec_dim = (int)json::get_int(q, "vec_dim", where, 1, 64);
  x.entries = (int)json::get_int(q, "entries", where, 1, 256);
  x.index_block = (int)json::get_int_or(q, "index_block", where, 0, 1 << 16, 64);
  x.index_bits = (int)json::get_int_or(q, "index_bits", where, 0, 64, 8);
  x.bits_per_weight = json::get_double_or(q, "bits_per_weight", where, 0);
  if (x.index_bits == 6 && !(x.stages == 4 && x.entries == 64))
    fail("{}.index_bits: 6-bit indices need exactly 4 stages of 64 entries", where);
  if (x.index_bits != 8 && x.index_bits != 6) fail("{}.index_bits: must be 8 or 6", where);
  // What this engine's kernels compute; refuse the rest by name rather than misread it.
  if (x.index_bits == 6) fail("{}: VQ4P (6-bit packed indices) is not supported yet", where);
  if (x.vec_dim != 8) fail("{}.vec_dim: {} is not supported (only 8)", where, x.vec_dim);
  return x;
}

BankEntry parse_bank(const json::element& b, int layer, const ModelConfig& c,
                     const std::string& where) {
  if (!b.is_object()) fail("{}: must be an object", where);
  BankEntry e;
  e.layer = layer;
  e.file = json::get_string(b, "file", where);
  if (e.file.empty() || e.file.find('/') != std::string::npos || e.file == "." || e.file == "..")
    fail("{}.file: '{}' must be a plain file name inside the container", where, e.file);
  e.experts = json::get_int(b, "experts", where, 1, 1 << 20);
  e.bytes = (uint64_t)json::get_int(b, "bytes", where, 1, int64_t{1} << 50);
  e.codebook_base = json::get_int(b, "codebook_base", where, 0, 1 << 30);
  if (e.experts != c.n_experts)
    fail("{}.experts: {} does not match config.num_experts {}", where, e.experts, c.n_experts);
  if (e.bytes % (uint64_t)e.experts != 0)
    fail("{}.bytes: {} is not a whole number of {} records", where, e.bytes, e.experts);
  if (e.stride() % 4096 != 0)
    fail("{}.bytes: record stride {} is not a multiple of 4096", where, e.stride());
  return e;
}

void parse_banks(const json::element& layers, Manifest* m, const std::string& where) {
  const ModelConfig& c = m->config;
  for (auto [key, value] : json::fields(layers)) {
    std::string w = fmt::format("{}.\"{}\"", where, std::string(key));
    int layer = -1;
    std::string k(key);
    if (k.empty() || k.size() > 4 || k.find_first_not_of("0123456789") != std::string::npos)
      fail("{}: layer key must be a decimal layer index", w);
    layer = std::stoi(k);
    if (!c.is_moe_layer(layer) || layer >= c.n_layers)
      fail("{}: layer {} is not a MoE layer of this model", w, layer);
    m->banks[layer] = parse_bank(value, layer, c, w);
  }
  for (int l = 0; l < c.n_layers; l++)
    if (c.is_moe_layer(l) && !m->banks.count(l))
      fail("{}: MoE layer {} has no expert bank entry", where, l);
}

// The converter flattens K3's nested text_config; a raw nested one is accepted as the original
// does (docs/FORMAT.md §2).
json::element text_config(const json::element& root, std::string* prefix, bool has_prefix,
                          const std::string& where) {
  json::element cfg = json::get_object(root, "config", where);
  if (json::has_value(cfg, "text_config")) {
    if (!has_prefix) *prefix = "language_model.";
    return json::get_object(cfg, "text_config", where + ".config");
  }
  return cfg;
}

}  // namespace

int64_t TrunkEntry::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

uint64_t TrunkEntry::payload_bytes() const {
  Matrix m{fmt, rows(), cols(), nullptr, nullptr};
  return (uint64_t)(m.row_bytes() * rows());
}

uint64_t TrunkEntry::scale_bytes() const {
  if (fmt == TensorFormat::kF32) return 0;
  return (uint64_t)(rows() * ((cols() + kQuantGroup - 1) / kQuantGroup) * 2);
}

const TrunkEntry* Manifest::find(std::string_view name) const {
  for (const TrunkEntry& t : trunk)
    if (t.name.size() == tensor_prefix.size() + name.size() &&
        std::string_view(t.name).substr(0, tensor_prefix.size()) == tensor_prefix &&
        std::string_view(t.name).substr(tensor_prefix.size()) == name)
      return &t;
  return nullptr;
}

Manifest parse_manifest(std::string_view text, const std::string& where) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  json::element root = json::parse(parser, padded, where);
  if (!root.is_object()) fail("{}: must be a JSON object", where);

  Manifest m;
  if (!json::has_value(root, "format_version")) fail("{}: format_version missing", where);
  int64_t version = json::get_int(root, "format_version", where, INT64_MIN, INT64_MAX);
  if (version != 0)
    fail("{}: format_version {} is not supported (this engine reads format 0)", where, version);
  m.arch = json::get_string_opt(root, "arch", where).value_or("");
  bool has_prefix = json::has_value(root, "tensor_prefix");
  m.tensor_prefix = json::get_string_opt(root, "tensor_prefix", where).value_or("");
  json::element cfg = text_config(root, &m.tensor_prefix, has_prefix, where);
  m.config = parse_model_config(cfg, where + ": config");
  m.config_json = simdjson::minify(cfg);
  if (m.config.n_experts > 0) {
    m.quant = parse_quant(json::get_object(root, "expert_quant", where), where + ": expert_quant");
    parse_banks(json::get_object(root, "layers", where), &m, where + ": layers");
  }
  json::element trunk = json::get_array(root, "trunk", where);
  size_t i = 0;
  for (json::element e : json::items(trunk))
    m.trunk.push_back(parse_trunk_entry(e, fmt::format("{}: trunk[{}]", where, i++)));
  return m;
}

}  // namespace waste
