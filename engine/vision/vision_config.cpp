#include "engine/vision/vision_config.h"

#include <cmath>

#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "engine/base/error.h"
#include "engine/base/json_fields.h"
#include "engine/format/container.h"

namespace waste {

namespace {

constexpr int64_t kMaxDim = 1 << 16;

// image_mean / image_std: three finite numbers. The release's values are 0.5; a missing key
// falls back to them loudly, since WASTE once served a day of wrong colours from a silent default.
std::array<float, 3> read_rgb(const json::element& root, const char* key, const std::string& where,
                              bool positive) {
  std::array<float, 3> v = {0.5f, 0.5f, 0.5f};
  if (!json::has_value(root, key)) {
    spdlog::warn("{}: {} is missing; using the release's 0.5 for every channel", where, key);
    return v;
  }
  json::element arr = json::get_array(root, key, where);
  std::string w = fmt::format("{}.{}", where, key);
  if (json::items(arr).size() != 3) fail("{}: must hold 3 numbers (R, G, B)", w);
  int i = 0;
  for (json::element e : json::items(arr)) {
    if (!e.is_number()) fail("{}[{}]: must be a number", w, i);
    double d = e.is_double()  ? e.get_double().value_unsafe()
               : e.is_int64() ? (double)e.get_int64().value_unsafe()
                              : (double)e.get_uint64().value_unsafe();
    if (!std::isfinite(d) || std::fabs(d) > 1e6)
      fail("{}[{}]: must be finite and within +-1e6", w, i);
    if (positive && !(d > 0)) fail("{}[{}]: must be greater than 0, not {}", w, i, d);
    v[i++] = (float)d;
  }
  return v;
}

// Keys that name a variant the engine does not implement: refuse rather than compute something
// else.
void check_variants(const json::element& root, const std::string& where) {
  auto mode = json::get_string_opt(root, "pos_emb_interpolation_mode", where);
  if (mode && *mode != "bilinear")
    fail("{}.pos_emb_interpolation_mode: '{}' is not supported (only bilinear)", where, *mode);
  if (json::has_value(root, "merge_kernel_size")) {
    json::element m = json::get_array(root, "merge_kernel_size", where);
    std::string w = where + ".merge_kernel_size";
    int n = 0;
    for (json::element e : json::items(m)) {
      json::as_int(e, w + "[]", kVisionMerge, kVisionMerge);
      n++;
    }
    if (n != 2) fail("{}: must be [2, 2]", w);
  }
}

}  // namespace

VisionConfig parse_vision_config(std::string_view text, const std::string& where,
                                 const ModelConfig& lm) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  json::element root = json::parse(parser, padded, where);
  if (!root.is_object()) fail("{}: must be a JSON object", where);
  VisionConfig v;
  v.hidden = (int)json::get_int_or(root, "vt_hidden_size", where, 1, kMaxDim, v.hidden);
  v.heads = (int)json::get_int_or(root, "vt_num_attention_heads", where, 1, 1024, v.heads);
  v.qkv_hidden = (int)json::get_int_or(root, "qkv_hidden_size", where, 1, kMaxDim, v.qkv_hidden);
  v.intermediate =
      (int)json::get_int_or(root, "vt_intermediate_size", where, 1, 1 << 20, v.intermediate);
  v.layers = (int)json::get_int_or(root, "vt_num_hidden_layers", where, 1, 256, v.layers);
  v.pos_h = (int)json::get_int_or(root, "init_pos_emb_height", where, 1, 1024, v.pos_h);
  v.pos_w = (int)json::get_int_or(root, "init_pos_emb_width", where, 1, 1024, v.pos_w);
  v.text_hidden = (int)json::get_int(root, "text_hidden_size", where, 1, 1 << 20);
  v.patch = (int)json::get_int_or(root, "patch_size", where, 1, 1024, v.patch);
  v.placeholder_id =
      json::get_int_or(root, "media_placeholder_token_id", where, 0, INT32_MAX, v.placeholder_id);
  v.max_patches = json::get_int_or(root, "max_patches", where, 4, kMaxImagePatches, v.max_patches);
  v.in_patch_limit =
      json::get_int_or(root, "in_patch_limit", where, 4, INT32_MAX, v.in_patch_limit);
  v.patch_limit_on_one_side = json::get_int_or(root, "patch_limit_on_one_side", where, 2, INT32_MAX,
                                               v.patch_limit_on_one_side);
  v.image_mean = read_rgb(root, "image_mean", where, false);
  v.image_std = read_rgb(root, "image_std", where, true);
  check_variants(root, where);

  if (v.qkv_hidden % v.heads != 0)
    fail("{}.qkv_hidden_size: {} is not a multiple of vt_num_attention_heads ({})", where,
         v.qkv_hidden, v.heads);
  if (v.head_dim() % 4 != 0)
    fail("{}.qkv_hidden_size: the head width {} must be a multiple of 4 (2D rotary pairs)", where,
         v.head_dim());
  if (v.text_hidden != lm.hidden)
    fail("{}.text_hidden_size: {} does not match the language model's hidden_size {}", where,
         v.text_hidden, lm.hidden);
  if (v.patch != 14) fail("{}.patch_size: {} is not supported (must be 14)", where, v.patch);
  if (v.placeholder_id >= lm.vocab)
    fail("{}.media_placeholder_token_id: {} is not a token id (vocabulary has {})", where,
         v.placeholder_id, lm.vocab);
  return v;
}

VisionConfig vision_config_of(const Container& c) {
  if (!c.vision_json())
    fail<UsageError>("{}: images are not supported: the container has no vision.json",
                     c.dir().string());
  return parse_vision_config(*c.vision_json(), (c.dir() / "vision.json").string(), c.config());
}

}  // namespace waste
