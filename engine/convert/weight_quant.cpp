#include "engine/convert/weight_quant.h"

#include <simdjson.h>

#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "engine/base/json_fields.h"

namespace waste {

namespace {

void read_fp8(const json::element& q, WeightQuant* w) {
  if (auto fmt = json::get_string_opt(q, "fmt", w->where); fmt && *fmt != "e4m3")
    fail("{}.fmt: '{}' is not e4m3, the only fp8 format read", w->where, *fmt);
  if (!json::has_value(q, "weight_block_size")) return;
  json::element a = json::get_array(q, "weight_block_size", w->where);
  int64_t v[2], n = 0;
  for (json::element d : json::items(a)) {
    if (n == 2) break;
    v[n] = json::as_int(d, w->where + ".weight_block_size", 1, 1 << 20);
    n++;
  }
  if (n != 2 || json::items(a).size() != 2)
    fail("{}.weight_block_size: must be [rows, cols]", w->where);
  w->fp8 = {v[0], v[1]};
}

// compressed-tensors: the config groups stored pack-quantized (the group's own `format`, else the
// top level's) must hold symmetric int4 weights in groups of one size; other groups are not read.
void read_pack_quantized(const json::element& q, WeightQuant* w) {
  const std::string top = json::get_string_opt(q, "format", w->where).value_or("");
  json::element groups = json::get_object(q, "config_groups", w->where);
  int found = 0;
  for (auto g : json::fields(groups)) {
    const std::string group_at = w->where + ".config_groups." + std::string(g.key);
    if (json::get_string_opt(g.value, "format", group_at).value_or(top) != "pack-quantized")
      continue;
    const std::string at = group_at + ".weights";
    json::element wt = json::get_object(g.value, "weights", group_at);
    if (json::get_int(wt, "num_bits", at, 1, 64) != 4)
      fail("{}.num_bits: only 4-bit pack-quantized weights are read", at);
    if (json::get_string(wt, "type", at) != "int")
      fail("{}.type: only integer pack-quantized weights are read", at);
    if (!json::get_bool_or(wt, "symmetric", at, false))
      fail("{}.symmetric: must be true (a zero point is not read)", at);
    if (json::get_string(wt, "strategy", at) != "group")
      fail("{}.strategy: only group-wise scales are read", at);
    if (auto order = json::get_string_opt(wt, "actorder", at); order)
      fail("{}.actorder: '{}' reorders columns, which is not read", at, *order);
    int g_size = (int)json::get_int(wt, "group_size", at, 8, 1 << 16);
    if (g_size % 8) fail("{}.group_size: {} is not a multiple of 8", at, g_size);
    if (found++ && g_size != w->int4_group)
      fail("{}: config groups with different group sizes are not read", w->where);
    w->int4_group = g_size;
  }
}

}  // namespace

WeightQuant read_weight_quant(const std::filesystem::path& config) {
  WeightQuant w;
  w.where = config.string() + ": quantization_config";
  if (!std::filesystem::exists(config)) return w;
  simdjson::dom::parser parser;
  simdjson::padded_string text(read_small_file(config, 16 << 20));
  json::element root = json::parse(parser, text, config.string());
  json::element q;
  if (json::has_value(root, "quantization_config")) {
    q = json::get_object(root, "quantization_config", config.string());
  } else if (json::has_value(root, "text_config") &&
             json::has_value(root["text_config"].value_unsafe(), "quantization_config")) {
    w.where = config.string() + ": text_config.quantization_config";
    q = json::get_object(root["text_config"].value_unsafe(), "quantization_config",
                         config.string() + ": text_config");
  } else {
    return w;
  }
  std::string method = json::get_string_opt(q, "quant_method", w.where).value_or("");
  if (method == "fp8") read_fp8(q, &w);
  if (method == "compressed-tensors") read_pack_quantized(q, &w);
  return w;
}

}  // namespace waste
