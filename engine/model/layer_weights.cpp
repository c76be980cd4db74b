#include "engine/model/layer_weights.h"

#include "engine/format/tensor_specs.h"

namespace waste {

namespace {

KdaWeights kda_weights(const Container& c, const std::string& a) {
  const ModelConfig& cfg = c.config();
  int64_t C = cfg.kda_channels();
  KdaWeights w;
  w.q = c.matrix(a + "q_proj.weight");
  w.k = c.matrix(a + "k_proj.weight");
  w.v = c.matrix(a + "v_proj.weight");
  w.f_a = c.matrix(a + "f_a_proj.weight");
  w.f_b = c.matrix(a + "f_b_proj.weight");
  w.b = c.matrix(a + "b_proj.weight");
  if (cfg.kda_full_rank_gate) {
    w.g = c.matrix(a + "g_proj.weight");
  } else {
    w.g_a = c.matrix(a + "g_a_proj.weight");
    w.g_b = c.matrix(a + "g_b_proj.weight");
  }
  w.o = c.matrix(a + "o_proj.weight");
  const char* conv[3] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
  for (int i = 0; i < 3; i++) w.conv[i] = c.f32(a + conv[i], C * cfg.conv_k);
  w.A_log = c.f32(a + "A_log", cfg.kda_heads);
  w.dt_bias = c.f32(a + "dt_bias", C);
  w.o_norm = c.f32(a + "o_norm.weight", cfg.kda_dim);
  return w;
}

MlaWeights mla_weights(const Container& c, const std::string& a) {
  const ModelConfig& cfg = c.config();
  MlaWeights w;
  if (cfg.q_lora > 0) {
    w.q_a = c.matrix(a + "q_a_proj.weight");
    w.q_a_norm = c.f32(a + "q_a_layernorm.weight", cfg.q_lora);
    w.q_b = c.matrix(a + "q_b_proj.weight");
  } else {
    w.q = c.matrix(a + "q_proj.weight");
  }
  w.kv_a = c.matrix(a + "kv_a_proj_with_mqa.weight");
  w.kv_a_norm = c.f32(a + "kv_a_layernorm.weight", cfg.kv_lora);
  w.kv_b = c.matrix(a + "kv_b_proj.weight");
  if (cfg.mla_output_gate) w.g = c.matrix(a + "g_proj.weight");
  w.o = c.matrix(a + "o_proj.weight");
  return w;
}

FfnWeights ffn_weights(const Container& c, const std::string& p) {
  return {c.matrix(p + "gate_proj.weight"), c.matrix(p + "up_proj.weight"),
          c.matrix(p + "down_proj.weight")};
}

MoeWeights moe_weights(const Container& c, const std::string& m) {
  const ModelConfig& cfg = c.config();
  MoeWeights w;
  w.router = c.matrix(m + "gate.weight");
  if (c.has(m + "gate.e_score_correction_bias"))
    w.bias = c.f32(m + "gate.e_score_correction_bias", cfg.n_experts);
  w.has_shared = cfg.n_shared > 0;
  if (w.has_shared) w.shared = ffn_weights(c, m + "shared_experts.");
  if (cfg.latent > 0) {
    w.latent_down = c.matrix(m + "routed_expert_down_proj.weight");
    w.latent_up = c.matrix(m + "routed_expert_up_proj.weight");
    if (cfg.latent_norm) w.latent_norm = c.f32(m + "routed_expert_norm.weight", cfg.latent);
  }
  return w;
}

}  // namespace

ModelWeights resolve_weights(const Container& c) {
  const ModelConfig& cfg = c.config();
  int64_t hid = cfg.hidden;
  ModelWeights mw;
  for (int l = 0; l < cfg.n_layers; l++) {
    std::string p = layer_prefix(l);
    LayerWeights w;
    w.kda = cfg.is_kda[l];
    w.moe = cfg.is_moe_layer(l);
    w.input_norm = c.f32(p + "input_layernorm.weight", hid);
    w.post_norm = c.f32(p + "post_attention_layernorm.weight", hid);
    if (cfg.attn_res_block > 0) {
      w.attn_res_norm = c.f32(p + "self_attention_res_norm.weight", hid);
      w.attn_res_proj = c.f32(p + "self_attention_res_proj.weight", hid);
      w.mlp_res_norm = c.f32(p + "mlp_res_norm.weight", hid);
      w.mlp_res_proj = c.f32(p + "mlp_res_proj.weight", hid);
    }
    if (w.kda)
      w.kda_w = kda_weights(c, p + "self_attn.");
    else
      w.mla_w = mla_weights(c, p + "self_attn.");
    if (w.moe)
      w.moe_w = moe_weights(c, p + "block_sparse_moe.");
    else
      w.dense = ffn_weights(c, p + "mlp.");
    mw.layers.push_back(w);
  }
  mw.final_norm = c.f32("model.norm.weight", hid);
  if (cfg.attn_res_block > 0) {
    mw.out_res_norm = c.f32("model.output_attn_res_norm.weight", hid);
    mw.out_res_proj = c.f32("model.output_attn_res_proj.weight", hid);
  }
  mw.lm_head = c.matrix("lm_head.weight");
  return mw;
}

}  // namespace waste
