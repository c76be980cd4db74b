// The model hyper-parameters the engine reads from a manifest's `config` object (docs/FORMAT.md
// §2), with the original's defaults and range checks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace simdjson::dom {
class element;
}

namespace waste {

enum class Arch { kKimiLinear, kK3, kDeepSeekV3 };

// MLA's rotary position embedding (the DeepSeek-V3 family), with YaRN scaling. The Kimi models set
// `mla_use_nope` and carry no rotation.
struct MlaRope {
  bool on = false;  // `mla_use_nope` absent or false, with qk_rope > 0
  double theta = 10000.0;
  double factor = 1.0;  // YaRN's; 1 = plain RoPE
  double beta_fast = 32.0, beta_slow = 1.0;
  double mscale_all_dim = 0.0;  // 0 = no attention-scale correction
  double original_max = 4096.0;
};

struct ModelConfig {
  std::string architecture;  // config._outer.architectures[0] or config.architectures[0]
  int n_layers = 0;
  int hidden = 0;
  int vocab = 0;
  int64_t eos_token_id = 0;  // 0 = not stated
  int64_t bos_token_id = 0;
  int64_t max_positions = 0;  // max_position_embeddings or model_max_length; 0 = not stated
  float rms_eps = 1e-5f;

  // MoE
  int n_experts = 0;  // 0 = no MoE
  int top_k = 0;
  int moe_inter = 0;
  int dense_inter = 0;
  int n_shared = 0;
  int first_dense = 0;
  float routed_scale = 1.0f;
  bool renormalize = false;  // QUIRK: presence of `moe_renormalize`, not its value
  int latent = 0;            // routed_expert_hidden_size; 0 = experts run on the full hidden
  bool latent_norm = false;  // QUIRK: presence-based
  int n_group = 1;           // grouped top-k: experts split into n_group groups, of which
  int topk_group = 1;        // the topk_group best compete

  // MLA
  int n_heads = 0;
  int kv_lora = 0;
  int q_lora = 0;  // 0 = unfactorized q_proj
  int qk_nope = 0;
  int qk_rope = 0;
  int v_head = 0;
  bool mla_output_gate = false;  // QUIRK: presence-based
  MlaRope rope;

  // KDA
  int kda_heads = 0;
  int kda_dim = 0;
  int conv_k = 4;
  bool kda_full_rank_gate = false;  // QUIRK: presence-based
  float gate_lower_bound = 0.0f;    // 0 = Kimi-Linear softplus form; < 0 = bounded form
  std::vector<bool> is_kda;         // per layer (0-based); from the 1-based kda_layers

  // K3 extras
  int attn_res_block = 0;  // 0 = no Attention Residuals
  bool situ = false;       // hidden_act == "situ"; otherwise SiLU
  float situ_beta = 1.0f;
  float situ_linear_beta = 0.0f;

  bool is_moe_layer(int layer) const { return n_experts > 0 && layer >= first_dense; }
  int n_kda_layers() const;
  int n_mla_layers() const { return n_layers - n_kda_layers(); }
  // Width the routed experts see: the latent on K3, the hidden otherwise.
  int expert_in() const { return latent > 0 ? latent : hidden; }
  int shared_inter() const { return moe_inter * (n_shared > 0 ? n_shared : 1); }
  int kda_channels() const { return kda_heads * kda_dim; }
  Arch arch() const {
    if (attn_res_block > 0 || latent > 0) return Arch::kK3;
    return rope.on && n_mla_layers() > 0 ? Arch::kDeepSeekV3 : Arch::kKimiLinear;
  }
};

// Parses and range-checks `config` (already flattened as the converter writes it). `where` names
// the file for error messages. Throws FormatError naming the field.
ModelConfig parse_model_config(const simdjson::dom::element& config, const std::string& where);

}  // namespace waste
