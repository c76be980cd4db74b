#include "engine/synth/synth.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <simdjson.h>

#include "engine/base/atomic_file.h"
#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/rng.h"
#include "engine/format/expert_bank.h"
#include "engine/format/expert_record.h"
#include "engine/format/manifest.h"
#include "engine/format/tensor_specs.h"
#include "engine/kernels/quantize.h"
#include "engine/synth/synth_tokenizer.h"

namespace waste {

namespace fs = std::filesystem;

namespace {

constexpr int kStages = 3, kEntries = 256;

struct Preset {
  int hidden, layers, experts, top_k, moe_inter, dense_inter, shared;
  int kda_heads, kda_dim, heads, nope, rope, v, kv_lora, q_lora;
  int latent, res_block, vocab;
  std::vector<int> mla_layers;      // 1-based, the rest are KDA
  int64_t quant_threshold;          // tensors with fewer elements stay F32
  int n_group = 1, topk_group = 1;  // DeepSeek-V3's grouped top-k
};

// DeepSeek-V3's presets. Every layer is MLA with a factorized query, as in the releases, and
// layer 0 is dense, so a one-layer model has no experts at all.
Preset deepseek_preset(const SynthOptions& o) {
  auto all_mla = [](int n) {
    std::vector<int> mla;
    for (int l = 1; l <= n; l++) mla.push_back(l);
    return mla;
  };
  if (o.preset == "tiny") {
    const int n = o.layers == 0 ? 4 : o.layers;
    if (n < 1 || n > 4) fail<UsageError>("synth: --layers {} is not between 1 and 4", n);
    // 16 experts in 4 groups, of which 2 compete: the grouping has work to do.
    Preset p{128, n, 16, 4, 32, 192, 1, 0, 0, 4, 16, 8, 16, 32, 48, 0, 0, 0, all_mla(n), 4096};
    p.n_group = 4;
    p.topk_group = 2;
    return p;
  }
  if (o.preset == "k2-shape") {
    // Kimi K2's layer shapes (its release's config.json): 384 experts of intermediate 2,048,
    // top-8, one shared expert, one group, the dense first layer of intermediate 18,432.
    const int n = o.layers == 0 ? 2 : o.layers;
    if (n < 1 || n > 61) fail<UsageError>("synth: --layers {} is not between 1 and 61", n);
    return Preset{7168, n,  384, 8,   2048, 18432, 1, 0,      0,          64,
                  128,  64, 128, 512, 1536, 0,     0, 163840, all_mla(n), 65536};
  }
  fail<UsageError>("synth: --arch deepseek-v3 has presets tiny and k2-shape");
}

Preset preset_for(const SynthOptions& o) {
  bool k3 = o.arch == Arch::kK3;
  if (o.arch == Arch::kDeepSeekV3) return deepseek_preset(o);
  if (o.preset == "k2-shape")
    fail<UsageError>("synth: preset k2-shape is Kimi K2's shape; use --arch deepseek-v3");
  if (o.layers != 0 && o.preset != "k3-shape")
    fail<UsageError>(
        "synth: --layers applies to presets k3-shape, and tiny and k2-shape of deepseek-v3 only");
  if (o.preset == "tiny")
    return k3 ? Preset{128, 6, 16, 4,  32, 192, 2, 4, 32,     4,
                       16,  8, 16, 32, 48, 64,  2, 0, {4, 6}, 4096}
              : Preset{128, 5, 8, 2, 64, 256, 1, 4, 32, 4, 16, 8, 16, 32, 0, 0, 0, 0, {4}, 4096};
  if (o.preset == "small")
    return k3 ? Preset{512, 13,  64,  8, 128, 1024,           2,    8, 64, 8, 64, 32, 64,
                       128, 192, 256, 6, 0,   {4, 8, 12, 13}, 65536}
              : Preset{512, 8,  64, 8,   256, 1024, 1, 8, 64,     8,
                       64,  32, 64, 128, 0,   0,    0, 0, {4, 8}, 65536};
  if (o.preset == "k3-shape") {
    if (!k3) fail<UsageError>("synth: preset k3-shape is K3's shape; use --arch k3");
    const int n = o.layers == 0 ? 2 : o.layers;
    if (n < 1 || n > 93) fail<UsageError>("synth: --layers {} is not between 1 and 93", n);
    // The release's full-attention layers (every fourth, and the last), as far as `n` goes.
    std::vector<int> mla;
    for (int l = 4; l <= n; l += 4) mla.push_back(l);
    if (n == 93) mla.push_back(93);
    // Attention Residuals blocks of 12 layers; a shorter stack names its own length instead (a
    // config may not name a block longer than the model), which opens the same blocks.
    return Preset{7168, n,   896, 16,   3072, 33792,           2,      96,  128,  96, 128,
                  64,   128, 512, 1536, 3584, std::min(12, n), 163840, mla, 65536};
  }
  if (o.preset == "48b-shape") {
    if (k3)
      fail<UsageError>("synth: preset 48b-shape is Kimi-Linear's shape; use --arch kimi-linear");
    return Preset{2304,
                  27,
                  256,
                  8,
                  1024,
                  9216,
                  1,
                  32,
                  128,
                  32,
                  128,
                  64,
                  128,
                  512,
                  0,
                  0,
                  0,
                  163840,
                  {4, 8, 12, 16, 20, 24, 27},
                  65536};
  }
  fail<UsageError>("synth: unknown preset '{}' (tiny, small, 48b-shape, k3-shape or k2-shape)",
                   o.preset);
}

std::string int_list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); i++) {
    if (i) s += ',';  // not (i ? "," : "") + ...: GCC 12 misreads that as an overlapping copy
    s += std::to_string(v[i]);
  }
  return "[" + s + "]";
}

// Kimi K2's config as the original's converter normalises it (its MoE keys renamed, DeepSeek's
// router and grouping keys as the release spells them, no mla_use_nope: the rotation is on), with
// K2-Instruct's YaRN block (docs/MODEL.md) and the preset's grouping.
std::string deepseek_config_json(const Preset& p, int vocab, int eos, int bos) {
  return fmt::format(
      "{{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"kimi_k2\","
      "\"hidden_size\":{},\"num_hidden_layers\":{},\"vocab_size\":{},\"bos_token_id\":{},"
      "\"eos_token_id\":{},\"rms_norm_eps\":1e-06,\"first_k_dense_replace\":1,"
      "\"intermediate_size\":{},\"moe_intermediate_size\":{},\"n_routed_experts\":{},"
      "\"num_experts\":{},\"num_experts_per_tok\":{},\"num_experts_per_token\":{},"
      "\"n_shared_experts\":{},\"num_shared_experts\":{},\"norm_topk_prob\":true,"
      "\"moe_renormalize\":true,\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\","
      "\"n_group\":{},\"topk_group\":{},\"routed_scaling_factor\":2.827,"
      "\"num_attention_heads\":{},\"qk_nope_head_dim\":{},\"qk_rope_head_dim\":{},"
      "\"v_head_dim\":{},\"kv_lora_rank\":{},\"q_lora_rank\":{},\"hidden_act\":\"silu\","
      "\"rope_theta\":50000.0,\"rope_scaling\":{{\"type\":\"yarn\",\"factor\":32.0,"
      "\"beta_fast\":1.0,\"beta_slow\":1.0,\"mscale\":1.0,\"mscale_all_dim\":1.0,"
      "\"original_max_position_embeddings\":4096}},\"max_position_embeddings\":131072}}",
      p.hidden, p.layers, vocab, bos, eos, p.dense_inter, p.moe_inter, p.experts, p.experts,
      p.top_k, p.top_k, p.shared, p.shared, p.n_group, p.topk_group, p.heads, p.nope, p.rope, p.v,
      p.kv_lora, p.q_lora);
}

std::string config_json(const SynthOptions& o, const Preset& p, int vocab, int eos, int bos) {
  if (o.arch == Arch::kDeepSeekV3) return deepseek_config_json(p, vocab, eos, bos);
  bool k3 = o.arch == Arch::kK3;
  std::vector<int> kda;
  for (int l = 1; l <= p.layers; l++)
    if (std::find(p.mla_layers.begin(), p.mla_layers.end(), l) == p.mla_layers.end())
      kda.push_back(l);
  std::string s = fmt::format(
      "{{\"architectures\":[\"KimiLinearForCausalLM\"],\"model_type\":\"kimi_linear\","
      "\"hidden_size\":{},\"num_hidden_layers\":{},\"vocab_size\":{},\"bos_token_id\":{},"
      "\"eos_token_id\":{},\"rms_norm_eps\":1e-05,\"first_k_dense_replace\":1,"
      "\"intermediate_size\":{},\"moe_intermediate_size\":{},\"num_experts\":{},"
      "\"num_experts_per_token\":{},\"num_shared_experts\":{},\"moe_renormalize\":true,"
      "\"moe_router_activation_func\":\"sigmoid\",\"routed_scaling_factor\":{},"
      "\"num_attention_heads\":{},\"qk_nope_head_dim\":{},\"qk_rope_head_dim\":{},"
      "\"v_head_dim\":{},\"kv_lora_rank\":{},\"q_lora_rank\":{},\"mla_use_nope\":true,"
      "\"hidden_act\":\"{}\",\"linear_attn_config\":{{\"num_heads\":{},\"head_dim\":{},"
      "\"short_conv_kernel_size\":4,\"kda_layers\":{},\"full_attn_layers\":{}",
      p.hidden, p.layers, vocab, bos, eos, p.dense_inter, p.moe_inter, p.experts, p.top_k, p.shared,
      k3 ? "1.5" : "2.446", p.heads, p.nope, p.rope, p.v, p.kv_lora,
      p.q_lora ? std::to_string(p.q_lora) : "null", k3 ? "situ" : "silu", p.kda_heads, p.kda_dim,
      int_list(kda), int_list(p.mla_layers));
  if (!k3) return s + "}}";
  return s + fmt::format(
                 ",\"use_full_rank_gate\":true,\"gate_lower_bound\":-5.0}},"
                 "\"activation_situ_beta\":4.0,\"activation_situ_linear_beta\":25.0,"
                 "\"attn_res_block_size\":{},\"latent_moe_use_norm\":true,"
                 "\"mla_use_output_gate\":true,\"routed_expert_hidden_size\":{},"
                 "\"_outer\":{{\"architectures\":[\"KimiK3ForConditionalGeneration\"],"
                 "\"model_type\":\"kimi_k3\"}}}}",
                 p.res_block, p.latent);
}

bool ends_with(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Random values shaped like a trained tensor's: norm weights near 1, matrices with unit-variance
// outputs, decay parameters in their working ranges.
std::vector<float> tensor_values(const TensorSpec& s, const ModelConfig& c, Rng& rng) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  std::vector<float> v((size_t)n);
  const std::string& name = s.name;
  int64_t cols = s.shape.back();
  float a = std::sqrt(3.0f / (float)cols);
  if (ends_with(name, "A_log")) {
    for (int64_t i = 0; i < n; i++) v[i] = i < c.kda_heads ? std::log(rng.uniform(1.0f, 16.0f)) : 0;
  } else if (ends_with(name, "dt_bias") || ends_with(name, "e_score_correction_bias")) {
    for (float& x : v) x = rng.uniform(-0.5f, 0.5f);
  } else if (ends_with(name, "res_proj.weight")) {
    for (float& x : v) x = rng.uniform(-0.05f, 0.05f);
  } else if (name.find("conv1d") != std::string::npos) {
    for (float& x : v) x = rng.uniform(-0.5f, 0.5f);
  } else if (s.shape.size() == 1) {  // norm weights
    for (float& x : v) x = rng.uniform(0.8f, 1.2f);
  } else {
    if (name == "model.embed_tokens.weight") a = 1.0f;
    if (name == "lm_head.weight") a *= 4.0f;  // spread logits so greedy choices are clear
    for (float& x : v) x = rng.uniform(-a, a);
  }
  return v;
}

TensorFormat format_for(const TensorSpec& s, int64_t threshold) {
  int64_t n = 1;
  for (int64_t d : s.shape) n *= d;
  if (s.count_only || s.shape.size() == 1 || n < threshold) return TensorFormat::kF32;
  if (s.name == "model.embed_tokens.weight" || s.name == "lm_head.weight")
    return TensorFormat::kQ8G;
  return TensorFormat::kQ4G;
}

// trunk.bin and the manifest's trunk array, tensor by tensor in the order written.
class TrunkWriter {
 public:
  explicit TrunkWriter(const fs::path& dir) : f_(dir / "trunk.bin") {}

  void add(const std::string& name, TensorFormat fmt_, const std::vector<int64_t>& shape,
           const std::vector<float>& w) {
    int64_t cols = shape.back(), rows = (int64_t)w.size() / cols;
    std::vector<uint8_t> payload, scales;
    quantize_matrix(fmt_, w.data(), rows, cols, &payload, &scales);
    uint64_t off = f_.size();
    f_.write(payload.data(), payload.size());
    std::string entry = fmt::format("{{\"name\":\"{}\",\"fmt\":{},\"off\":{},\"shape\":[{}]", name,
                                    (int)fmt_, off, fmt::join(shape, ","));
    if (fmt_ != TensorFormat::kF32) {
      entry += fmt::format(",\"group\":128,\"scale_off\":{}", f_.size());
      f_.write(scales.data(), scales.size());
    }
    entry += fmt::format(",\"bytes\":{}}}", f_.size() - off);
    index_ += (index_.empty() ? "" : ",\n  ") + entry;
  }

  // The manifest's trunk array body, once everything is written.
  std::string commit() {
    f_.commit();
    return index_;
  }

 private:
  AtomicFile f_;
  std::string index_;
};

void write_text_trunk(TrunkWriter& out, const ModelConfig& c, const std::string& prefix,
                      int64_t threshold, Rng& rng) {
  for (TensorSpec s : text_tensor_specs(c)) {
    if (s.optional && s.name.find("correction_bias") == std::string::npos) continue;
    if (ends_with(s.name, "A_log") && c.arch() == Arch::kK3 && c.kda_dim >= c.kda_heads)
      s.shape = {c.kda_dim};  // K3 ships A_log padded to head_dim with a zero tail
    out.add(prefix + s.name, format_for(s, threshold), s.shape, tensor_values(s, c, rng));
  }
}

// A small MoonViT with the release's structure (docs/VISION.md §9): a non-square wo, a position
// table smaller than most grids, a projector into the LM width.
struct VisionPreset {
  int hidden, heads, head_dim, inter, layers, pos;
};

VisionPreset vision_preset_for(const SynthOptions& o) {
  if (o.preset == "small") return {128, 4, 32, 256, 3, 16};
  return {64, 3, 32, 128, 2, 8};
}

std::string vision_json(const VisionPreset& v, int text_hidden, int placeholder) {
  return fmt::format(
      "{{\"vt_hidden_size\":{},\"vt_num_attention_heads\":{},\"qkv_hidden_size\":{},"
      "\"vt_intermediate_size\":{},\"vt_num_hidden_layers\":{},\"init_pos_emb_height\":{},"
      "\"init_pos_emb_width\":{},\"init_pos_emb_time\":4,\"patch_size\":14,"
      "\"merge_kernel_size\":[2,2],\"merge_type\":\"sd2_tpool\","
      "\"mm_projector_type\":\"patchmergerv2\",\"mm_hidden_size\":{},\"text_hidden_size\":{},"
      "\"projector_hidden_act\":\"gelu\",\"projector_ln_eps\":1e-05,"
      "\"pos_emb_type\":\"divided_fixed\",\"pos_emb_interpolation_mode\":\"bilinear\","
      "\"norm_type\":\"rmsnorm\",\"activation_func\":\"gelu_pytorch_tanh\","
      "\"vt_rms_eps\":1.1920928955078125e-07,\"media_placeholder_token_id\":{},"
      "\"max_patches\":1024,\"image_mean\":[0.5,0.5,0.5],\"image_std\":[0.5,0.5,0.5],"
      "\"in_patch_limit\":65536,\"patch_limit_on_one_side\":512}}\n",
      v.hidden, v.heads, v.heads * v.head_dim, v.inter, v.layers, v.pos, v.pos, v.hidden,
      text_hidden, placeholder);
}

// The tower's tensors at the converter's formats: every matrix Q8G (requant_vision.py; 4-bit
// damages the tower), norms F32. Drawn from their own stream so the text weights do not move.
void write_vision_trunk(TrunkWriter& out, const VisionPreset& v, int text_hidden, Rng& rng) {
  auto uniform = [&](int64_t n, float lo, float hi) {
    std::vector<float> w((size_t)n);
    for (float& x : w) x = rng.uniform(lo, hi);
    return w;
  };
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    float a = std::sqrt(3.0f / (float)cols);  // unit-variance outputs for unit-variance inputs
    out.add(name, TensorFormat::kQ8G, {rows, cols}, uniform(rows * cols, -a, a));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    out.add(name, TensorFormat::kF32, {n}, uniform(n, 0.8f, 1.2f));
  };
  const int64_t D = v.hidden, Q = (int64_t)v.heads * v.head_dim, M = 4 * D;
  matrix("vision_tower.patch_embed.proj.weight", D, 3 * 14 * 14);
  out.add("vision_tower.patch_embed.pos_emb.weight", TensorFormat::kQ8G, {v.pos * v.pos, D},
          uniform(v.pos * v.pos * D, -0.5f, 0.5f));
  for (int l = 0; l < v.layers; l++) {
    std::string p = fmt::format("vision_tower.encoder.blocks.{}.", l);
    norm(p + "norm0.weight", D);
    norm(p + "norm1.weight", D);
    matrix(p + "wqkv.weight", 3 * Q, D);
    matrix(p + "wo.weight", D, Q);
    matrix(p + "mlp.fc0.weight", v.inter, D);
    matrix(p + "mlp.fc1.weight", D, v.inter);
  }
  norm("vision_tower.encoder.final_layernorm.weight", D);
  matrix("mm_projector.proj.0.weight", M, M);
  matrix("mm_projector.proj.2.weight", text_hidden, M);
  norm("mm_projector.post_norm.weight", text_hidden);
}

// Codebooks with shrinking stage magnitudes, as residual VQ learns them.
void write_codebooks(const fs::path& dir, int n_layers, Rng& rng) {
  AtomicFile f(dir / "codebooks.bin");
  std::vector<uint16_t> body(kEntries * kVqDim);
  for (int b = 0; b < n_layers * 3 * kStages; b++) {
    uint32_t hdr[4] = {0x4B424357u, (uint32_t)(b & 0xffff) | (4u << 16) | (8u << 24),
                       (uint32_t)kEntries, 0};
    f.write(hdr, sizeof hdr);
    float mag = 0.3f / (float)(1 << (b % kStages));
    for (uint16_t& h : body) h = f32_to_f16(rng.uniform(-mag, mag));
    f.write(body.data(), body.size() * 2);
  }
  f.commit();
}

void fill_indices(uint8_t* p, const RecordGeometry& g, int64_t rows, int64_t cols, Rng& rng) {
  int64_t nv = cols / kVqDim;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t v = 0; v < nv; v++) {
      uint8_t* run = p + ((r / kVqRowBlock * nv + v) * kVqRowBlock + r % kVqRowBlock) * g.stages;
      uint64_t bits = rng.next();
      for (int s = 0; s < g.stages; s++)
        run[s] = (uint8_t)((bits >> (8 * s)) % (uint64_t)g.entries);
    }
}

void fill_scales(uint16_t* s, int64_t rows, int64_t cols, Rng& rng) {
  float base = 5.0f / std::sqrt((float)cols);
  for (int64_t r = 0; r < rows; r++) s[r] = f32_to_f16(base * rng.uniform(0.8f, 1.2f));
}

void write_bank(const fs::path& path, const RecordGeometry& g, int layer, int experts, int base,
                Rng& rng) {
  AtomicFile f(path);
  AlignedBuffer rec(g.stride);
  for (int e = 0; e < experts; e++) {
    std::memset(rec.data(), 0, g.stride);
    uint8_t* p = rec.data() + kExpertHeaderBytes;
    fill_indices(p, g, g.inter, g.width, rng);
    fill_indices(p + g.gate_bytes(), g, g.inter, g.width, rng);
    fill_indices(p + 2 * g.gate_bytes(), g, g.width, g.inter, rng);
    auto* scales = reinterpret_cast<uint16_t*>(p + 2 * g.gate_bytes() + g.down_bytes());
    fill_scales(scales, g.inter, g.width, rng);
    fill_scales(scales + g.inter, g.inter, g.width, rng);
    fill_scales(scales + 2 * g.inter, g.width, g.inter, rng);
    finish_record(rec.data(), g, layer, e, base);
    f.write(rec.data(), g.stride);
  }
  f.commit();
}

std::string write_banks(const fs::path& dir, const ModelConfig& c, Rng& rng) {
  RecordGeometry g;
  g.inter = c.moe_inter;
  g.width = c.expert_in();
  g.stages = kStages;
  g.entries = kEntries;
  g.stride = (g.used_bytes() + 4095) / 4096 * 4096;
  std::string layers;
  int n = 0;
  for (int l = 0; l < c.n_layers; l++) {
    if (!c.is_moe_layer(l)) continue;
    std::string file = fmt::format("experts-L{}.bin", l);
    int base = n++ * 3 * kStages;
    write_bank(dir / file, g, l, c.n_experts, base, rng);
    layers += fmt::format(
        "{}\"{}\":{{\"file\":\"{}\",\"experts\":{},\"bytes\":{},"
        "\"codebook_base\":{}}}",
        layers.empty() ? "" : ",\n  ", l, file, c.n_experts, g.stride * (uint64_t)c.n_experts,
        base);
  }
  write_codebooks(dir, n, rng);
  return layers;
}

ModelConfig parse_config(const std::string& text) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  return parse_model_config(parser.parse(padded).value(), "synth config");
}

}  // namespace

ModelConfig synthetic_config(const SynthOptions& opt) {
  Preset p = preset_for(opt);
  SynthVocab sv = synthetic_vocab(p.vocab);
  return parse_config(config_json(opt, p, sv.vocab, sv.eos, sv.bos));
}

void write_synthetic(const fs::path& out, const SynthOptions& opt) {
  Preset p = preset_for(opt);
  if (fs::exists(out))
    fail<UsageError>("synth: {} already exists; choose a new path", out.string());
  fs::path tmp = out;
  tmp += fmt::format(".partial-{}", ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    Rng rng(opt.seed);
    SynthVocab sv = write_synthetic_tokenizer(tmp, opt.arch, p.vocab);
    std::string cfg_text = config_json(opt, p, sv.vocab, sv.eos, sv.bos);
    bool k3 = opt.arch == Arch::kK3;
    std::string prefix = k3 ? "language_model." : "";
    ModelConfig c = parse_config(cfg_text);
    TrunkWriter tw(tmp);
    write_text_trunk(tw, c, prefix, p.quant_threshold, rng);
    if (k3) {
      VisionPreset vp = vision_preset_for(opt);
      Rng vision_rng(opt.seed ^ 0x5649534Full);  // "VISO": a stream of its own
      write_vision_trunk(tw, vp, c.hidden, vision_rng);
      // <|media_pad|> sits 21 ids into the special block (synth_tokenizer.cpp).
      write_file_atomic(tmp / "vision.json", vision_json(vp, c.hidden, sv.bos + 21));
    }
    std::string trunk = tw.commit();
    std::string layers = write_banks(tmp, c, rng);
    std::string manifest = fmt::format(
        "{{\"format_version\":0,\"arch\":\"{}\",\"tensor_prefix\":\"{}\",\n\"config\":{},\n"
        "\"expert_quant\":{{\"fmt\":\"VQ3R\",\"stages\":{},\"vec_dim\":8,\"entries\":{},"
        "\"index_block\":64,\"index_bits\":8,\"bits_per_weight\":3.0}},\n"
        "\"layers\":{{\n  {}}},\n\"trunk\":[\n  {}]}}\n",
        k3                              ? "kimi-k3"
        : opt.arch == Arch::kDeepSeekV3 ? "deepseek-v3"
                                        : "kimi-linear",
        prefix, cfg_text, kStages, kEntries, layers, trunk);
    write_file_atomic(tmp / "manifest.json", manifest);
    fs::rename(tmp, out);
    sync_dir(out.parent_path().empty() ? "." : out.parent_path());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace waste
