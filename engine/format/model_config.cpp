#include "engine/format/model_config.h"

#include <algorithm>
#include <climits>

#include "engine/base/error.h"
#include "engine/base/json_fields.h"

namespace waste {

namespace {

constexpr int64_t kMaxDim = 1 << 20;

std::string architecture_of(const json::element& cfg, const std::string& where) {
  for (const char* holder : {"_outer", ""}) {
    json::element obj = cfg;
    if (*holder) {
      if (!json::has(cfg, holder) || !cfg[holder].value_unsafe().is_object()) continue;
      obj = cfg[holder].value_unsafe();
    }
    if (!json::has(obj, "architectures")) continue;
    json::element arr = obj["architectures"].value_unsafe();
    if (!arr.is_array()) fail("{}.architectures: must be an array", where);
    for (json::element a : json::items(arr)) {
      if (a.is_string()) return std::string(a.get_string().value_unsafe());
      break;
    }
  }
  return "";
}

void read_kda(const json::element& cfg, const std::string& where, ModelConfig* c) {
  c->is_kda.assign(c->n_layers, false);
  if (!json::has_value(cfg, "linear_attn_config")) return;
  std::string w = where + ".linear_attn_config";
  json::element la = json::get_object(cfg, "linear_attn_config", where);
  c->kda_heads = (int)json::get_int_or(la, "num_heads", w, 0, 1 << 16, 0);
  c->kda_dim = (int)json::get_int_or(la, "head_dim", w, 0, 1 << 16, 0);
  c->conv_k = (int)json::get_int_or(la, "short_conv_kernel_size", w, 1, 64, 4);
  c->kda_full_rank_gate = json::has(la, "use_full_rank_gate");
  c->gate_lower_bound = (float)json::get_double_or(la, "gate_lower_bound", w, 0.0);
  if (c->gate_lower_bound > 0) fail("{}.gate_lower_bound: must be zero or negative", w);
  if (!json::has_value(la, "kda_layers")) return;
  json::element list = json::get_array(la, "kda_layers", w);
  for (json::element e : json::items(list)) {
    // 1-based, as the release writes it.
    int64_t l = json::as_int(e, w + ".kda_layers[]", 1, c->n_layers);
    c->is_kda[l - 1] = true;
  }
}

// `mla_use_nope` by value, not presence (unlike the other switches): misreading it costs the order
// of the sequence. The rotation follows the release's YaRN: `rope_scaling` absent, null or {}
// means plain RoPE.
void read_rope(const json::element& cfg, const std::string& where, ModelConfig* c) {
  MlaRope& r = c->rope;
  r.on = !json::get_bool_or(cfg, "mla_use_nope", where, false) && c->qk_rope > 0;
  r.theta = json::get_double_or(cfg, "rope_theta", where, 10000.0);
  if (!(r.theta > 1)) fail("{}.rope_theta: must be greater than 1", where);
  if (!json::has_value(cfg, "rope_scaling")) return;
  std::string w = where + ".rope_scaling";
  json::element rs = json::get_object(cfg, "rope_scaling", where);
  if (json::fields(rs).size() == 0) return;
  auto type = json::get_string_opt(rs, "type", w);
  if (!type) type = json::get_string_opt(rs, "rope_type", w);  // the newer spelling
  if (type != "yarn") fail("{}.type: '{}' is not implemented (only yarn)", w, type.value_or(""));
  r.factor = json::get_double_or(rs, "factor", w, 1.0);
  if (r.factor <= 1) {  // YaRN's ramp is the identity and both mscales are 1
    r.factor = 1;
    return;
  }
  r.beta_fast = json::get_double_or(rs, "beta_fast", w, 32.0);
  r.beta_slow = json::get_double_or(rs, "beta_slow", w, 1.0);
  r.original_max = json::get_double_or(rs, "original_max_position_embeddings", w, 4096.0);
  if (!(r.beta_fast > 0 && r.beta_slow > 0 && r.original_max >= 1))
    fail("{}: beta_fast, beta_slow and original_max_position_embeddings must be positive", w);
  double mscale = json::get_double_or(rs, "mscale", w, 1.0);
  r.mscale_all_dim = json::get_double_or(rs, "mscale_all_dim", w, 0.0);
  // Unequal values put a ratio on cos/sin that the releases never need.
  if (mscale != r.mscale_all_dim)
    fail("{}: mscale {} differs from mscale_all_dim {}, which is not implemented", w, mscale,
         r.mscale_all_dim);
}

// The router's score function and grouping; Kimi's and DeepSeek's spellings both.
void read_router(const json::element& cfg, const std::string& where, ModelConfig* c) {
  for (const char* key : {"moe_router_activation_func", "scoring_func"}) {
    auto f = json::get_string_opt(cfg, key, where);
    if (f && *f != "sigmoid")
      fail("{}.{}: '{}' is not implemented (the router is a sigmoid)", where, key, *f);
  }
  const char* group_key = json::has_value(cfg, "n_group") ? "n_group" : "num_expert_group";
  c->n_group = (int)json::get_int_or(cfg, group_key, where, 1, 1024, 1);
  c->topk_group = (int)json::get_int_or(cfg, "topk_group", where, 1, 1024, c->n_group);
  // Groups are ranked by their two best scores (DeepSeek-V3's rule); another method only
  // matters when some group is left out.
  auto method = json::get_string_opt(cfg, "topk_method", where);
  if (method && *method != "noaux_tc" && c->topk_group < c->n_group)
    fail("{}.topk_method: '{}' with grouped top-k is not implemented (only noaux_tc)", where,
         *method);
}

void check_products(const ModelConfig& c, const std::string& where) {
  auto bounded = [&](int64_t a, int64_t b, const char* what) {
    if (a * b > INT_MAX) fail("{}: {} ({} x {}) is too large", where, what, a, b);
  };
  bounded(c.vocab, c.hidden, "vocab_size x hidden_size");
  bounded(c.n_experts, c.hidden, "num_experts x hidden_size");
  bounded(c.moe_inter, c.expert_in(), "moe_intermediate_size x expert width");
  bounded(c.dense_inter, c.hidden, "intermediate_size x hidden_size");
  bounded(c.kda_channels(), c.hidden, "KDA channels x hidden_size");
  bounded((int64_t)c.n_heads * (c.qk_nope + c.v_head), std::max(c.kv_lora, c.hidden),
          "MLA heads x head dims");
  bounded((int64_t)c.kda_dim * c.kda_dim, c.kda_heads, "KDA state");
}

void check_sanity(const ModelConfig& c, const std::string& where) {
  if (c.n_experts > 0) {
    if (c.top_k < 1 || c.top_k > std::min(c.n_experts, 64))
      fail("{}.num_experts_per_token: {} must be between 1 and min(num_experts, 64)", where,
           c.top_k);
    if (c.moe_inter < 1) fail("{}.moe_intermediate_size: required with experts", where);
    if (c.moe_inter % 8 != 0 || c.expert_in() % 8 != 0)
      fail("{}: expert widths ({} and {}) must be multiples of 8 for VQ", where, c.moe_inter,
           c.expert_in());
    if (c.n_experts % c.n_group != 0 || c.topk_group > c.n_group)
      fail("{}: {} experts in n_group/num_expert_group {} with topk_group {} do not divide evenly",
           where, c.n_experts, c.n_group, c.topk_group);
    if (c.top_k > c.topk_group * (c.n_experts / c.n_group))
      fail("{}.topk_group: {} groups hold fewer than num_experts_per_token experts", where,
           c.topk_group);
  }
  if ((c.n_experts == 0 || c.first_dense > 0) && c.dense_inter < 1)
    fail("{}.intermediate_size: required for dense layers", where);
  if (c.first_dense > c.n_layers)
    fail("{}.first_k_dense_replace: exceeds num_hidden_layers", where);
  if (c.attn_res_block > c.n_layers)
    fail("{}.attn_res_block_size: exceeds num_hidden_layers", where);
  if (c.n_kda_layers() > 0 && (c.kda_heads < 1 || c.kda_dim < 1))
    fail("{}.linear_attn_config: num_heads and head_dim are required with KDA layers", where);
  if (c.n_mla_layers() > 0 &&
      (c.n_heads < 1 || c.kv_lora < 1 || c.qk_nope < 1 || c.v_head < 1 || c.qk_rope < 0))
    fail("{}: MLA layers need num_attention_heads, kv_lora_rank, qk_nope_head_dim, v_head_dim",
         where);
  if (c.n_mla_layers() > 0 && c.rope.on && c.qk_rope % 2 != 0)
    fail("{}.qk_rope_head_dim: {} is odd, and the rotation turns pairs", where, c.qk_rope);
  check_products(c, where);
}

}  // namespace

int ModelConfig::n_kda_layers() const {
  return (int)std::count(is_kda.begin(), is_kda.end(), true);
}

ModelConfig parse_model_config(const json::element& cfg, const std::string& where) {
  if (!cfg.is_object()) fail("{}: must be an object", where);
  ModelConfig c;
  c.architecture = architecture_of(cfg, where);
  c.n_layers = (int)json::get_int(cfg, "num_hidden_layers", where, 1, 128);
  c.hidden = (int)json::get_int(cfg, "hidden_size", where, 1, kMaxDim);
  c.vocab = (int)json::get_int(cfg, "vocab_size", where, 1, 1 << 24);
  c.eos_token_id = json::get_int_or(cfg, "eos_token_id", where, 0, c.vocab - 1, 0);
  c.bos_token_id = json::get_int_or(cfg, "bos_token_id", where, 0, c.vocab - 1, 0);
  c.rms_eps = (float)json::get_double_or(cfg, "rms_norm_eps", where, 1e-5);
  c.max_positions = json::get_int_or(cfg, "max_position_embeddings", where, 0, int64_t{1} << 40, 0);
  if (c.max_positions == 0)
    c.max_positions = json::get_int_or(cfg, "model_max_length", where, 0, int64_t{1} << 40, 0);
  if (!(c.rms_eps > 0 && c.rms_eps < 1)) fail("{}.rms_norm_eps: must be in (0, 1)", where);

  c.n_experts = (int)json::get_int_or(cfg, "num_experts", where, 0, kMaxDim, 0);
  c.top_k = (int)json::get_int_or(cfg, "num_experts_per_token", where, 0, 64, 0);
  c.moe_inter = (int)json::get_int_or(cfg, "moe_intermediate_size", where, 0, kMaxDim, 0);
  c.dense_inter = (int)json::get_int_or(cfg, "intermediate_size", where, 0, kMaxDim, 0);
  c.n_shared = (int)json::get_int_or(cfg, "num_shared_experts", where, 0, 64, 0);
  c.first_dense = (int)json::get_int_or(cfg, "first_k_dense_replace", where, 0, 128, 0);
  c.routed_scale = (float)json::get_double_or(cfg, "routed_scaling_factor", where, 1.0);
  c.renormalize = json::has(cfg, "moe_renormalize");
  c.latent = (int)json::get_int_or(cfg, "routed_expert_hidden_size", where, 0, kMaxDim, 0);
  c.latent_norm = json::has(cfg, "latent_moe_use_norm");

  c.n_heads = (int)json::get_int_or(cfg, "num_attention_heads", where, 0, 1 << 16, 0);
  c.kv_lora = (int)json::get_int_or(cfg, "kv_lora_rank", where, 0, kMaxDim, 0);
  c.q_lora = (int)json::get_int_or(cfg, "q_lora_rank", where, 0, kMaxDim, 0);
  c.qk_nope = (int)json::get_int_or(cfg, "qk_nope_head_dim", where, 0, 1 << 16, 0);
  c.qk_rope = (int)json::get_int_or(cfg, "qk_rope_head_dim", where, 0, 1 << 16, 0);
  c.v_head = (int)json::get_int_or(cfg, "v_head_dim", where, 0, 1 << 16, 0);
  c.mla_output_gate = json::has(cfg, "mla_use_output_gate");
  read_rope(cfg, where, &c);
  read_router(cfg, where, &c);

  c.attn_res_block = (int)json::get_int_or(cfg, "attn_res_block_size", where, 0, 128, 0);
  c.situ = json::get_string_opt(cfg, "hidden_act", where).value_or("silu") == "situ";
  c.situ_beta = (float)json::get_double_or(cfg, "activation_situ_beta", where, 1.0);
  c.situ_linear_beta = (float)json::get_double_or(cfg, "activation_situ_linear_beta", where, 0.0);
  if (c.situ && !(c.situ_beta > 0)) fail("{}.activation_situ_beta: must be positive", where);

  read_kda(cfg, where, &c);
  check_sanity(c, where);
  return c;
}

}  // namespace waste
