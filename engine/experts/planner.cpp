#include "engine/experts/planner.h"

#include <algorithm>

#include "engine/kernels/kernels.h"

namespace waste {

namespace {

uint64_t state_bytes(const ModelConfig& c, int64_t ctx) {
  uint64_t kda = (uint64_t)c.n_kda_layers(), mla = (uint64_t)c.n_mla_layers();
  uint64_t H = (uint64_t)c.kda_heads, D = (uint64_t)c.kda_dim;
  uint64_t rings = kda * 3 * (uint64_t)(c.conv_k - 1) * H * D * 4;
  uint64_t blocks = c.attn_res_block > 0 ? (uint64_t)(c.n_layers / c.attn_res_block + 2) : 0;
  return kda * H * D * D * 4 + rings + mla * (uint64_t)ctx * (uint64_t)(c.kv_lora + c.qk_rope) * 4 +
         blocks * (uint64_t)c.hidden * 4;
}

// What each token of a prefill window holds while the window moves through the stack: the
// residual stream (x, h, a; K3 adds p and the Attention Residuals history), the router's logits
// and choices, each chosen expert's output until the token's sum ([top_k][width]), the sum and
// the latent input, and its share of the buffers an expert is applied to all its tokens with
// (input and output [width], gate and up [moe_inter]).
uint64_t window_token_bytes(const ModelConfig& c) {
  const uint64_t hid = (uint64_t)c.hidden, width = (uint64_t)c.expert_in();
  uint64_t floats = 3 * hid;
  if (c.attn_res_block > 0)
    floats += (1 + (uint64_t)((c.n_layers + c.attn_res_block - 1) / c.attn_res_block)) * hid;
  if (c.n_experts > 0)
    floats += (uint64_t)c.n_experts + 2 * (uint64_t)c.top_k + (uint64_t)(c.top_k + 4) * width +
              2 * (uint64_t)c.moe_inter;
  return floats * 4;
}

// A 64-token window, the intermediates of one piece (MLA's included) and the logits.
uint64_t scratch_bytes(const ModelConfig& c) {
  int64_t widest = std::max({(int64_t)c.hidden, (int64_t)c.dense_inter, (int64_t)c.shared_inter(),
                             (int64_t)c.kda_channels() * 3,
                             (int64_t)c.n_heads * (c.qk_nope + c.qk_rope + c.v_head)});
  uint64_t chunk = (uint64_t)kMinWindowTokens * window_token_bytes(c) +
                   (uint64_t)kPieceTokens * (uint64_t)(2 * widest) * 4;
  // MLA's piece: queries, latent-space queries, attended latents, W_kb|W_vb outputs, gate, o.
  uint64_t mla = 0;
  if (c.kv_lora > 0)
    mla = (uint64_t)kPieceTokens * c.n_heads *
          (uint64_t)(2 * (c.qk_nope + c.qk_rope) + 2 * c.kv_lora + 3 * c.v_head) * 4;
  return chunk + mla + (uint64_t)c.vocab * 4 * 2 + (16u << 20);
}

// What one compute thread allocates for itself: MLA's dequantized W_kb(h) ([nope][kv_lora]) and
// the scores of one unit of heads and queries against the whole context; KDA's decays
// ([kda_dim]); the expert kernel's panel of summed weights (at most 8 rows of the widest
// expert input, kernels_body.h); the trunk matmul's own buffers for the widest trunk matrix
// (kernels.h).
uint64_t thread_bytes(const ModelConfig& c, int64_t ctx, int64_t widest_trunk_input) {
  uint64_t floats = (uint64_t)c.kda_dim + (uint64_t)matmul_scratch_floats(widest_trunk_input);
  if (c.n_experts > 0) floats += 8 * (uint64_t)std::max<int64_t>(c.expert_in(), c.moe_inter);
  if (c.kv_lora > 0)
    floats +=
        (uint64_t)c.qk_nope * (uint64_t)c.kv_lora +
        (uint64_t)std::min<int64_t>(kHeadsPerUnit, c.n_heads) * kQueriesPerUnit * (uint64_t)ctx;
  return floats * 4;
}

}  // namespace

MemoryPlan plan_memory(const Manifest& m, int64_t ctx, int threads) {
  const ModelConfig& c = m.config;
  MemoryPlan p;
  p.ctx = ctx;
  p.threads = threads;
  int64_t widest_input = 0;
  for (const TrunkEntry& t : m.trunk) {
    if (t.shape.size() == 2) widest_input = std::max(widest_input, t.cols());
    bool text = t.name.compare(0, m.tensor_prefix.size(), m.tensor_prefix) == 0;
    if (!text) {
      p.vision_bytes += t.bytes;
    } else if (!(t.name == m.tensor_prefix + "model.embed_tokens.weight" &&
                 t.fmt != TensorFormat::kF32)) {
      p.trunk_bytes += t.payload_bytes() + t.scale_bytes();
    }
  }
  for (auto& [layer, b] : m.banks) p.record_bytes = std::max(p.record_bytes, b.stride());
  p.state_bytes = state_bytes(c, ctx);
  p.scratch_bytes = scratch_bytes(c) + (uint64_t)threads * thread_bytes(c, ctx, widest_input);
  p.window_token_bytes = window_token_bytes(c);
  p.min_cache_bytes = p.record_bytes * (uint64_t)c.top_k * 2;
  p.working_set_bytes = p.record_bytes * (uint64_t)c.top_k * m.banks.size();
  p.floor_bytes = p.trunk_bytes + p.state_bytes + p.scratch_bytes + p.min_cache_bytes;
  return p;
}

}  // namespace waste
