#include "engine/format/tensor_specs.h"

#include <fmt/format.h>

namespace waste {

namespace {

using Specs = std::vector<TensorSpec>;

void add(Specs* s, std::string name, std::vector<int64_t> shape) {
  s->push_back({std::move(name), std::move(shape)});
}

void add_count(Specs* s, std::string name, std::vector<int64_t> shape, int64_t min_elements) {
  s->push_back({std::move(name), std::move(shape), true, min_elements});
}

void kda_specs(const ModelConfig& c, const std::string& a, Specs* s) {
  int64_t C = c.kda_channels(), D = c.kda_dim, H = c.kda_heads, hid = c.hidden;
  for (const char* w : {"q_proj", "k_proj", "v_proj"}) add(s, a + w + ".weight", {C, hid});
  for (const char* w : {"q_conv1d", "k_conv1d", "v_conv1d"})
    add_count(s, a + w + ".weight", {C, 1, c.conv_k}, C * c.conv_k);
  add(s, a + "f_a_proj.weight", {D, hid});
  add(s, a + "f_b_proj.weight", {C, D});
  add(s, a + "b_proj.weight", {H, hid});
  add_count(s, a + "A_log", {1, 1, H, 1}, H);
  add_count(s, a + "dt_bias", {C}, C);
  if (c.kda_full_rank_gate) {
    add(s, a + "g_proj.weight", {C, hid});
  } else {
    add(s, a + "g_a_proj.weight", {D, hid});
    add(s, a + "g_b_proj.weight", {C, D});
  }
  add(s, a + "o_norm.weight", {D});
  add(s, a + "o_proj.weight", {hid, C});
}

void mla_specs(const ModelConfig& c, const std::string& a, Specs* s) {
  int64_t hid = c.hidden, nh = c.n_heads, qd = c.qk_nope + c.qk_rope;
  if (c.q_lora > 0) {
    add(s, a + "q_a_proj.weight", {c.q_lora, hid});
    add(s, a + "q_a_layernorm.weight", {c.q_lora});
    add(s, a + "q_b_proj.weight", {nh * qd, c.q_lora});
  } else {
    add(s, a + "q_proj.weight", {nh * qd, hid});
  }
  add(s, a + "kv_a_proj_with_mqa.weight", {c.kv_lora + c.qk_rope, hid});
  add(s, a + "kv_a_layernorm.weight", {c.kv_lora});
  add(s, a + "kv_b_proj.weight", {nh * (c.qk_nope + c.v_head), c.kv_lora});
  if (c.mla_output_gate) add(s, a + "g_proj.weight", {nh * c.v_head, hid});
  add(s, a + "o_proj.weight", {hid, nh * c.v_head});
}

void moe_specs(const ModelConfig& c, const std::string& m, Specs* s) {
  int64_t hid = c.hidden, E = c.n_experts;
  add(s, m + "gate.weight", {E, hid});
  s->push_back({m + "gate.e_score_correction_bias", {E}, false, 0, true});
  if (c.n_shared > 0) {
    int64_t sh = c.shared_inter();
    add(s, m + "shared_experts.gate_proj.weight", {sh, hid});
    add(s, m + "shared_experts.up_proj.weight", {sh, hid});
    add(s, m + "shared_experts.down_proj.weight", {hid, sh});
  }
  if (c.latent > 0) {
    add(s, m + "routed_expert_down_proj.weight", {c.latent, hid});
    add(s, m + "routed_expert_up_proj.weight", {hid, c.latent});
    if (c.latent_norm) add(s, m + "routed_expert_norm.weight", {c.latent});
  }
}

void dense_specs(const ModelConfig& c, const std::string& p, Specs* s) {
  int64_t hid = c.hidden, di = c.dense_inter;
  add(s, p + "mlp.gate_proj.weight", {di, hid});
  add(s, p + "mlp.up_proj.weight", {di, hid});
  add(s, p + "mlp.down_proj.weight", {hid, di});
}

}  // namespace

std::string layer_prefix(int layer) {
  return fmt::format("model.layers.{}.", layer);
}

std::vector<TensorSpec> text_tensor_specs(const ModelConfig& c) {
  Specs s;
  int64_t hid = c.hidden;
  add(&s, "model.embed_tokens.weight", {c.vocab, hid});
  for (int l = 0; l < c.n_layers; l++) {
    std::string p = layer_prefix(l);
    add(&s, p + "input_layernorm.weight", {hid});
    add(&s, p + "post_attention_layernorm.weight", {hid});
    if (c.attn_res_block > 0)
      for (const char* w :
           {"self_attention_res_norm", "self_attention_res_proj", "mlp_res_norm", "mlp_res_proj"})
        add(&s, p + w + ".weight", {hid});
    if (c.is_kda[l])
      kda_specs(c, p + "self_attn.", &s);
    else
      mla_specs(c, p + "self_attn.", &s);
    if (c.is_moe_layer(l))
      moe_specs(c, p + "block_sparse_moe.", &s);
    else
      dense_specs(c, p, &s);
  }
  add(&s, "model.norm.weight", {hid});
  if (c.attn_res_block > 0) {
    add(&s, "model.output_attn_res_norm.weight", {hid});
    add(&s, "model.output_attn_res_proj.weight", {hid});
  }
  add(&s, "lm_head.weight", {c.vocab, hid});
  return s;
}

}  // namespace waste
