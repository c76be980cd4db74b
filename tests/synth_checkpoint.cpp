#include "tests/synth_checkpoint.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "engine/base/f16.h"
#include "engine/convert/fp8_block.h"
#include "engine/convert/int4_pack.h"
#include "engine/convert/mxfp4.h"
#include "engine/format/model_config.h"
#include "engine/format/tensor_specs.h"
#include "engine/synth/synth_tokenizer.h"
#include "tests/test_util.h"

namespace waste::test {

namespace fs = std::filesystem;

namespace {

struct StTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_safetensors(const fs::path& p, const std::vector<StTensor>& ts) {
  std::string h = "{\"__metadata__\":{\"format\":\"pt\"}";
  uint64_t off = 0;
  for (const StTensor& t : ts) {
    std::string shape;
    for (int64_t d : t.shape) {
      if (!shape.empty()) shape += ',';
      shape += std::to_string(d);
    }
    h += fmt::format(",\"{}\":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", t.name,
                     t.dtype, shape, off, off + t.bytes.size());
    off += t.bytes.size();
  }
  h += "}";
  while ((8 + h.size()) % 8) h += ' ';  // the reference writer pads to 8 bytes
  uint64_t n = h.size();
  std::string file(reinterpret_cast<const char*>(&n), 8);
  file += h;
  for (const StTensor& t : ts) file += t.bytes;
  write_file(p, file);
}

std::string bf16_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); i++) {
    uint32_t b = f32_to_bits(v[i]);
    b += 0x7fff + ((b >> 16) & 1);  // round to nearest even
    uint16_t h = (uint16_t)(b >> 16);
    std::memcpy(&s[2 * i], &h, 2);
  }
  return s;
}

std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

std::string f16_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 2, '\0');
  for (size_t i = 0; i < v.size(); i++) {
    uint16_t h = f32_to_f16(v[i]);
    std::memcpy(&s[2 * i], &h, 2);
  }
  return s;
}

std::string text_config(const CheckpointShape& s) {
  std::string kda = "[1,2,4]";
  std::string c = fmt::format(
      "{{\"architectures\":[\"KimiLinearForCausalLM\"],\"model_type\":\"kimi_linear\","
      "\"hidden_size\":{},\"num_hidden_layers\":{},\"vocab_size\":{},\"bos_token_id\":1,"
      "\"eos_token_id\":2,\"rms_norm_eps\":1e-05,\"first_k_dense_replace\":1,"
      "\"intermediate_size\":{},\"moe_intermediate_size\":{},\"num_experts\":{},"
      "\"num_experts_per_token\":2,\"num_shared_experts\":1,\"moe_renormalize\":true,"
      "\"routed_scaling_factor\":2.446,\"num_attention_heads\":4,\"qk_nope_head_dim\":16,"
      "\"qk_rope_head_dim\":8,\"v_head_dim\":16,\"kv_lora_rank\":32,\"q_lora_rank\":{},"
      "\"mla_use_nope\":true,\"hidden_act\":\"{}\",\"linear_attn_config\":{{\"num_heads\":4,\"head_"
      "dim\":32,"
      "\"short_conv_kernel_size\":4,\"kda_layers\":{},\"full_attn_layers\":[3]",
      s.hidden, s.layers, s.vocab, s.dense_inter, s.moe_inter, s.experts, s.k3 ? "48" : "null",
      s.k3 ? "situ" : "silu", kda);
  if (!s.k3) return c + "}}";
  return c + fmt::format(
                 ",\"use_full_rank_gate\":true,\"gate_lower_bound\":-5.0}},"
                 "\"activation_situ_beta\":4.0,\"activation_situ_linear_beta\":25.0,"
                 "\"attn_res_block_size\":2,\"latent_moe_use_norm\":true,"
                 "\"mla_use_output_gate\":true,\"routed_expert_hidden_size\":{}}}",
                 s.latent);
}

// Kimi K2's config.json as the release spells it: DeepSeek's MoE keys, no mla_use_nope (the
// rotation is on), YaRN, one multi-token-prediction layer past the last, and the weights'
// quantization_config.
std::string k2_config(const CheckpointShape& s) {
  std::string quant =
      s.k2 == K2Weights::kFp8
          ? fmt::format(
                "{{\"activation_scheme\":\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":\"fp8\","
                "\"weight_block_size\":[{},{}]}}",
                s.fp8_tile_rows, s.fp8_tile_cols)
          : "{\"config_groups\":{\"group_0\":{\"input_activations\":null,"
            "\"output_activations\":null,\"targets\":[\"Linear\"],\"weights\":{\"actorder\":null,"
            "\"block_structure\":null,\"dynamic\":false,\"group_size\":32,\"num_bits\":4,"
            "\"observer\":\"minmax\",\"observer_kwargs\":{},\"strategy\":\"group\","
            "\"symmetric\":true,\"type\":\"int\"}}},\"format\":\"pack-quantized\","
            "\"ignore\":[\"lm_head\",\"re:.*self_attn.*\",\"re:.*shared_experts.*\","
            "\"re:.*mlp\\\\.(gate|up|gate_up|down)_proj.*\"],\"kv_cache_scheme\":null,"
            "\"quant_method\":\"compressed-tensors\",\"quantization_status\":\"compressed\"}";
  return fmt::format(
      "{{\"architectures\":[\"DeepseekV3ForCausalLM\"],\"model_type\":\"kimi_k2\","
      "\"hidden_size\":{},\"num_hidden_layers\":{},\"vocab_size\":{},\"bos_token_id\":1,"
      "\"eos_token_id\":2,\"rms_norm_eps\":1e-06,\"first_k_dense_replace\":1,"
      "\"intermediate_size\":{},\"moe_intermediate_size\":{},\"n_routed_experts\":{},"
      "\"num_experts_per_tok\":4,\"n_shared_experts\":1,\"norm_topk_prob\":true,"
      "\"scoring_func\":\"sigmoid\",\"topk_method\":\"noaux_tc\",\"n_group\":4,"
      "\"topk_group\":2,\"routed_scaling_factor\":2.827,\"moe_layer_freq\":1,"
      "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"qk_nope_head_dim\":16,"
      "\"qk_rope_head_dim\":8,\"v_head_dim\":16,\"kv_lora_rank\":32,\"q_lora_rank\":48,"
      "\"hidden_act\":\"silu\",\"rope_theta\":50000.0,\"rope_scaling\":{{\"type\":\"yarn\","
      "\"factor\":32.0,\"beta_fast\":1.0,\"beta_slow\":1.0,\"mscale\":1.0,"
      "\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":4096}},"
      "\"max_position_embeddings\":131072,\"num_nextn_predict_layers\":1,"
      "\"tie_word_embeddings\":false,\"quantization_config\":{}}}",
      s.hidden, s.layers, s.vocab, s.dense_inter, s.moe_inter, s.experts, quant);
}

// The engine's view of a K2 config: the keys the converter adds (docs/MODEL.md §1.1).
std::string k2_engine_config(const CheckpointShape& s) {
  std::string c = k2_config(s);
  c.pop_back();
  return c + fmt::format(
                 ",\"num_experts\":{},\"num_experts_per_token\":4,\"num_shared_experts\":1,"
                 "\"moe_renormalize\":true}}",
                 s.experts);
}

std::string release_config(const CheckpointShape& s) {
  if (s.k2 != K2Weights::kNone) return k2_config(s);
  if (!s.k3) return text_config(s);
  return fmt::format(
      "{{\"architectures\":[\"KimiK3ForConditionalGeneration\"],\"model_type\":\"kimi_k3\","
      "\"media_placeholder_token_id\":1000,\"text_config\":{},\"vision_config\":{{"
      "\"_attn_implementation\":\"flash_attention_2\",\"patch_size\":14,\"vt_hidden_size\":128,"
      "\"vt_num_hidden_layers\":1,\"text_hidden_size\":{}}}}}",
      text_config(s), s.hidden);
}

std::vector<float> values_for(const std::string& name, const std::vector<int64_t>& shape, Rng& r) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v((size_t)n);
  float a = std::sqrt(3.0f / (float)shape.back());
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("A_log"))
    for (int64_t i = 0; i < n; i++) v[i] = std::log(r.uniform(1.0f, 16.0f));
  else if (has("dt_bias") || has("correction_bias") || has("conv1d"))
    for (float& x : v) x = r.uniform(-0.5f, 0.5f);
  else if (has("res_proj"))
    for (float& x : v) x = r.uniform(-0.05f, 0.05f);
  else if (shape.size() == 1)
    for (float& x : v) x = r.uniform(0.8f, 1.2f);
  else {
    const float m = has("embed_tokens") ? 1 / a : has("lm_head") ? 4 : 1;
    for (float& x : v) x = r.uniform(-a, a) * m;
  }
  return v;
}

}  // namespace

float gauss(Rng& r) {
  double u = std::max(r.uniform(), 1e-12), v = r.uniform();
  return (float)(std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v));
}

namespace {

// DeepSeek's spelling of an engine tensor name (the inverse of the converter's renaming).
std::string deepseek_name(std::string n) {
  for (auto [ours, theirs] :
       {std::pair{".block_sparse_moe.gate.", ".mlp.gate."},
        std::pair{".block_sparse_moe.shared_experts.", ".mlp.shared_experts."}})
    if (size_t at = n.find(ours); at != std::string::npos) n.replace(at, strlen(ours), theirs);
  return n;
}

// K2-Instruct stores every projection inside the layers as fp8 (the router, norms, embedding and
// head stay BF16/F32).
bool fp8_stored(const std::string& name, const std::vector<int64_t>& shape) {
  return shape.size() == 2 && name.rfind("model.layers.", 0) == 0 &&
         (name.ends_with("_proj.weight") || name.ends_with("_proj_with_mqa.weight"));
}

// Per tile: scale = amax / 448 (f32), codes the nearest E4M3 of value / scale.
void add_fp8(std::vector<StTensor>* out, const std::string& name, const std::vector<float>& v,
             int64_t rows, int64_t cols, const CheckpointShape& s) {
  const int64_t bm = s.fp8_tile_rows, bn = s.fp8_tile_cols;
  const int64_t tr = (rows + bm - 1) / bm, tc = (cols + bn - 1) / bn;
  std::vector<float> scale((size_t)(tr * tc));
  for (int64_t i = 0; i < tr; i++)
    for (int64_t j = 0; j < tc; j++) {
      float amax = 0;
      for (int64_t r = i * bm; r < std::min(rows, (i + 1) * bm); r++)
        for (int64_t c = j * bn; c < std::min(cols, (j + 1) * bn); c++)
          amax = std::max(amax, std::fabs(v[(size_t)(r * cols + c)]));
      scale[(size_t)(i * tc + j)] = amax > 0 ? amax / 448.0f : 1.0f;
    }
  std::string codes((size_t)(rows * cols), '\0');
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      codes[(size_t)(r * cols + c)] =
          (char)e4m3_encode(v[(size_t)(r * cols + c)] / scale[(size_t)((r / bm) * tc + c / bn)]);
  out->push_back({name, "F8_E4M3", {rows, cols}, codes});
  out->push_back({name + "_scale_inv", "F32", {tr, tc}, f32_bytes(scale)});
}

// compressed-tensors' symmetric int4: per group of 32, scale = bf16(amax / 7), q rounded and
// clamped to [-8, 7], packed eight to an I32.
void add_int4(std::vector<StTensor>* out, const std::string& name, const std::vector<float>& v,
              int64_t rows, int64_t cols, bool shape_i32) {
  constexpr int kGroup = 32;
  std::vector<float> scale((size_t)(rows * cols / kGroup));
  std::string scale_bytes = bf16_bytes(scale);  // sized; filled below
  std::vector<int32_t> words((size_t)(rows * int4_words(cols)));
  std::vector<int8_t> q((size_t)cols);
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t g = 0; g < cols / kGroup; g++) {
      float amax = 0;
      for (int64_t c = g * kGroup; c < (g + 1) * kGroup; c++)
        amax = std::max(amax, std::fabs(v[(size_t)(r * cols + c)]));
      std::string b = bf16_bytes({amax > 0 ? amax / 7.0f : 1.0f});
      std::memcpy(&scale_bytes[(size_t)(2 * (r * cols / kGroup + g))], b.data(), 2);
      uint16_t h;
      std::memcpy(&h, b.data(), 2);
      float sc = bits_to_f32((uint32_t)h << 16);
      for (int64_t c = g * kGroup; c < (g + 1) * kGroup; c++)
        q[(size_t)c] =
            (int8_t)std::clamp(std::nearbyint(v[(size_t)(r * cols + c)] / sc), -8.0f, 7.0f);
    }
    int4_pack_row(q.data(), cols, words.data() + r * int4_words(cols));
  }
  std::vector<int64_t> shape = {rows, cols};
  std::string shape_bytes(reinterpret_cast<const char*>(shape.data()), 16);
  if (shape_i32) {
    std::vector<int32_t> narrow = {(int32_t)rows, (int32_t)cols};
    shape_bytes.assign(reinterpret_cast<const char*>(narrow.data()), 8);
  }
  out->push_back({name + "_packed",
                  "I32",
                  {rows, int4_words(cols)},
                  std::string(reinterpret_cast<const char*>(words.data()), words.size() * 4)});
  out->push_back({name + "_scale", "BF16", {rows, cols / kGroup}, scale_bytes});
  out->push_back({name + "_shape", shape_i32 ? "I32" : "I64", {2}, shape_bytes});
}

}  // namespace

void write_checkpoint(const fs::path& dir, const CheckpointShape& s, uint64_t seed) {
  const bool k2 = s.k2 != K2Weights::kNone;
  fs::create_directories(dir);
  write_file(dir / "config.json", release_config(s));
  SynthVocab sv = write_synthetic_tokenizer(dir,
                                            s.k3 ? Arch::kK3
                                            : k2 ? Arch::kDeepSeekV3
                                                 : Arch::kKimiLinear,
                                            0);
  (void)sv;
  fs::remove(dir / "specials.json");
  if (k2) {  // K2's repositories ship the tokenizer as tiktoken.model, beside their Python code
    fs::rename(dir / "tokenizer.model", dir / "tiktoken.model");
    write_file(dir / "tokenization_kimi.py", "# the release's tokenizer class (not read)\n");
    fs::create_directories(dir / "figures");
    write_file(dir / "figures" / "kimi-logo.png", "not read");
  }
  write_file(dir / "tokenizer_config.json",
             "{\"added_tokens_decoder\":{\"1001\":{\"content\":\"<|end_of_msg|>\"},"
             "\"1000\":{\"content\":\"<|media_pad|>\"}},\"model_max_length\":"
             "1000000000000000019884624838656}");
  if (s.k3)
    write_file(dir / "preprocessor_config.json",
               "{\"media_proc_cfg\":{\"in_patch_limit\":4096,\"patch_size\":14,"
               "\"image_mean\":[0.5,0.5,0.5],\"image_std\":[0.5,0.5,0.5],"
               "\"patch_limit_on_one_side\":512}}");
  simdjson::dom::parser p;
  simdjson::padded_string cfg_text(k2 ? k2_engine_config(s) : text_config(s));
  ModelConfig c = parse_model_config(p.parse(cfg_text).value(), "test config");
  std::string prefix = s.k3 ? "language_model." : "";
  Rng r(seed);
  // shard 1: model-level and layer 0 (trunk only); shard 2: layers 1-2; shard 3: the rest; K2's
  // multi-token-prediction layer in shard 4.
  std::map<int, std::vector<StTensor>> shards;
  auto shard_of = [&](int layer) { return layer <= 0 ? 1 : layer <= 2 ? 2 : 3; };
  int i = 0;
  for (const TensorSpec& t : text_tensor_specs(c)) {
    int layer = -1;
    if (t.name.rfind("model.layers.", 0) == 0) layer = std::stoi(t.name.substr(13));
    std::vector<float> v = values_for(t.name, t.shape, r);
    std::string name = prefix + (k2 ? deepseek_name(t.name) : t.name);
    if (s.k2 == K2Weights::kFp8 && fp8_stored(t.name, t.shape)) {
      add_fp8(&shards[shard_of(layer)], name, v, t.shape[0], t.shape[1], s);
      continue;
    }
    // Mostly BF16, as the releases; a few F32 and F16 to cover every widening.
    StTensor st{name, "BF16", t.shape, ""};
    if (t.name.find("A_log") != std::string::npos || t.name.find("correction") != std::string::npos)
      st.dtype = "F32", st.bytes = f32_bytes(v);
    else if (t.name.find("o_norm") != std::string::npos)
      st.dtype = "F16", st.bytes = f16_bytes(v);
    else
      st.bytes = bf16_bytes(v);
    shards[shard_of(layer)].push_back(std::move(st));
    i++;
  }
  static const char* kMixtral[3] = {"w1", "w3", "w2"};
  static const char* kDeepSeek[3] = {"gate_proj", "up_proj", "down_proj"};
  for (int l = 1; l < s.layers; l++)
    for (int e = 0; e < s.experts; e++)
      for (int k = 0; k < 3; k++) {
        bool down = k == 2;
        int64_t width = c.expert_in(), rows = down ? width : s.moe_inter,
                cols = down ? s.moe_inter : width;
        std::vector<float> v((size_t)(rows * cols));
        for (float& x : v) x = gauss(r) * 0.02f;
        std::string name =
            fmt::format("{}model.layers.{}.{}.experts.{}.{}.weight", prefix, l,
                        k2 ? "mlp" : "block_sparse_moe", e, k2 ? kDeepSeek[k] : kMixtral[k]);
        std::vector<StTensor>& out = shards[shard_of(l)];
        if (s.k2 == K2Weights::kFp8) {
          add_fp8(&out, name, v, rows, cols, s);
          continue;
        }
        if (s.k2 == K2Weights::kInt4) {
          add_int4(&out, name, v, rows, cols, s.int4_shape_i32);
          continue;
        }
        if (!s.k3) {
          out.push_back({name, "BF16", {rows, cols}, bf16_bytes(v)});
          continue;
        }
        std::string packed((size_t)(rows * cols / 2), '\0'),
            scales((size_t)(rows * cols / 32), '\0');
        for (int64_t row = 0; row < rows; row++)
          mxfp4_encode_row(v.data() + row * cols, cols, (uint8_t*)&packed[row * cols / 2],
                           (uint8_t*)&scales[row * cols / 32]);
        if (e == 0) scales[0] = 0;  // a group with e = 0 decodes as zero
        out.push_back({name + "_packed", "U8", {rows, cols / 2}, packed});
        out.push_back({name + "_scale", "U8", {rows, cols / 32}, scales});
      }
  if (k2) {  // the MTP layer: never read (num_nextn_predict_layers)
    const int l = s.layers;
    auto add = [&](std::string n, std::vector<int64_t> shape) {
      shards[4].push_back({n, "BF16", shape, bf16_bytes(values_for(n, shape, r))});
    };
    add(fmt::format("model.layers.{}.enorm.weight", l), {s.hidden});
    add(fmt::format("model.layers.{}.eh_proj.weight", l), {s.hidden, 2 * s.hidden});
    add(fmt::format("model.layers.{}.mlp.experts.0.gate_proj.weight", l), {s.moe_inter, s.hidden});
  }
  if (s.k3) {
    auto add = [&](std::string n, std::vector<int64_t> shape) {
      shards[3].push_back({n, "BF16", shape, bf16_bytes(values_for(n, shape, r))});
    };
    add("vision_tower.patch_embed.proj.weight", {128, 3, 14, 14});  // 75,264: Q8G, flattened
    add("vision_tower.patch_embed.pos_emb.weight", {8, 8, 128});    // small: F32, flattened
    add("vision_tower.encoder.blocks.0.norm0.weight", {128});
    add("vision_tower.encoder.blocks.0.wqkv.weight", {384, 128});
    add("mm_projector.proj.0.weight", {512, 512});
    add("mm_projector.post_norm.weight", {s.hidden});
  }
  std::string map;
  for (auto& [k, ts] : shards) {
    std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", k, shards.size());
    // Header order deliberately unsorted (the index and the converter must not care).
    std::reverse(ts.begin(), ts.end());
    write_safetensors(dir / file, ts);
    for (const StTensor& t : ts)
      map += fmt::format("{}\"{}\":\"{}\"", map.empty() ? "" : ",", t.name, file);
  }
  write_file(dir / "model.safetensors.index.json",
             "{\"metadata\":{\"total_size\":1},\"weight_map\":{" + map + "}}");
}

CheckpointShape kimi_linear_shape() {
  return CheckpointShape{};
}

// DeepSeek-V3 tiny's shapes (engine/synth: 16 experts in 4 groups, every layer MLA), with a
// dense FFN wide enough (512 x 128) for the trunk's Q4G.
CheckpointShape k2_shape(K2Weights w) {
  CheckpointShape s;
  s.k2 = w;
  s.experts = 16;
  s.moe_inter = 32;
  s.dense_inter = 512;
  return s;
}

CheckpointShape k3_shape() {
  CheckpointShape s;
  s.k3 = true;
  s.moe_inter = 96;
  s.latent = 160;
  return s;
}

}  // namespace waste::test
