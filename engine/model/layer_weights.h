// Views of every trunk tensor a forward pass uses, resolved once by name at load.
#pragma once

#include <vector>

#include "engine/format/container.h"

namespace waste {

struct KdaWeights {
  Matrix q, k, v;                  // [C, hid]
  Matrix f_a, f_b;                 // decay gate, low rank: [D, hid], [C, D]
  Matrix b;                        // beta: [H, hid]
  Matrix g, g_a, g_b;              // output gate: full rank [C, hid], or low rank [D, hid], [C, D]
  Matrix o;                        // [hid, C]
  const float* conv[3] = {};       // q, k, v short-conv kernels, [C][K]
  const float* A_log = nullptr;    // first H values
  const float* dt_bias = nullptr;  // [C]
  const float* o_norm = nullptr;   // [D]
};

struct MlaWeights {
  Matrix q;         // unfactorized [heads*(nope+rope), hid]
  Matrix q_a, q_b;  // q_lora path
  const float* q_a_norm = nullptr;
  Matrix kv_a;  // [kv_lora + rope, hid]
  const float* kv_a_norm = nullptr;
  Matrix kv_b;  // [heads*(nope+v), kv_lora]
  Matrix g;     // K3 output gate [heads*v, hid]
  Matrix o;     // [hid, heads*v]
};

struct FfnWeights {
  Matrix gate, up, down;
};

struct MoeWeights {
  Matrix router;                // [E, hid]
  const float* bias = nullptr;  // e_score_correction_bias, optional
  bool has_shared = false;
  FfnWeights shared;
  Matrix latent_down, latent_up;  // K3: [lat, hid], [hid, lat]
  const float* latent_norm = nullptr;
};

struct LayerWeights {
  bool kda = false;
  bool moe = false;
  const float* input_norm = nullptr;
  const float* post_norm = nullptr;
  // Attention Residuals (K3).
  const float* attn_res_norm = nullptr;
  const float* attn_res_proj = nullptr;
  const float* mlp_res_norm = nullptr;
  const float* mlp_res_proj = nullptr;
  KdaWeights kda_w;
  MlaWeights mla_w;
  FfnWeights dense;
  MoeWeights moe_w;
};

struct ModelWeights {
  std::vector<LayerWeights> layers;
  const float* final_norm = nullptr;
  const float* out_res_norm = nullptr;
  const float* out_res_proj = nullptr;
  Matrix lm_head;
};

ModelWeights resolve_weights(const Container& c);

}  // namespace waste
