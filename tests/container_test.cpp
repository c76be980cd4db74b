// The container reader: synthetic containers open and verify; every kind of damage is refused
// with a message naming the file and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "engine/base/crc32.h"
#include "engine/base/error.h"
#include "engine/format/container.h"
#include "engine/format/expert_record.h"
#include "engine/format/tensor_specs.h"
#include "engine/model/model_info.h"
#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

class ContainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 7});
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 7});
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path kl() { return dir_->path() / "kl.waste"; }
  static fs::path k3() { return dir_->path() / "k3.waste"; }

  // A private copy to damage.
  fs::path copy_of(const fs::path& src) {
    fs::path dst = scratch_.path() / src.filename();
    fs::copy(src, dst, fs::copy_options::recursive);
    return dst;
  }

  static TempDir* dir_;
  TempDir scratch_;
};
TempDir* ContainerTest::dir_ = nullptr;

// Opens and returns the error message, failing the test if it opened.
template <typename E = FormatError>
std::string open_error(const fs::path& p, OpenOptions opt = {}) {
  try {
    Container::open(p, opt);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "container opened, but it should have been refused: " << p;
  return "";
}

void patch_file(const fs::path& p, uint64_t off, const std::string& bytes) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp((std::streamoff)off);
  f.write(bytes.data(), (std::streamsize)bytes.size());
}

void edit_manifest(const fs::path& dir, const std::string& from, const std::string& to) {
  std::string m = test::read_file(dir / "manifest.json");
  size_t at = m.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  m.replace(at, from.size(), to);
  test::write_file(dir / "manifest.json", m);
}

TEST_F(ContainerTest, SyntheticKimiLinearOpensWithItsWiring) {
  auto c = Container::open(kl());
  const ModelConfig& cfg = c->config();
  EXPECT_EQ(cfg.arch(), Arch::kKimiLinear);
  EXPECT_EQ(cfg.n_layers, 5);
  EXPECT_EQ(cfg.n_mla_layers(), 1);
  EXPECT_FALSE(cfg.is_kda[3]);  // 1-based layer 4 is MLA
  EXPECT_TRUE(cfg.is_kda[0]);
  EXPECT_TRUE(cfg.renormalize);
  EXPECT_EQ(c->manifest().banks.size(), 4u);  // layers 1..4; layer 0 is dense
  EXPECT_EQ(c->n_codebooks(), 4 * 3 * 3);
  // Quantized and F32 tensors are both present in the tiny preset.
  EXPECT_EQ(c->matrix("lm_head.weight").fmt, TensorFormat::kQ8G);
  EXPECT_EQ(c->matrix("model.layers.1.self_attn.q_proj.weight").fmt, TensorFormat::kQ4G);
  EXPECT_EQ(c->matrix("model.layers.1.self_attn.b_proj.weight").fmt, TensorFormat::kF32);
  EXPECT_TRUE(c->tokenizer_path().has_value());
  EXPECT_FALSE(c->specials().empty());
}

TEST_F(ContainerTest, SyntheticK3HasEveryK3Feature) {
  auto c = Container::open(k3());
  const ModelConfig& cfg = c->config();
  EXPECT_EQ(cfg.arch(), Arch::kK3);
  EXPECT_EQ(c->manifest().tensor_prefix, "language_model.");
  EXPECT_EQ(cfg.architecture, "KimiK3ForConditionalGeneration");
  EXPECT_GT(cfg.latent, 0);
  EXPECT_TRUE(cfg.latent_norm);
  EXPECT_TRUE(cfg.mla_output_gate);
  EXPECT_TRUE(cfg.kda_full_rank_gate);
  EXPECT_LT(cfg.gate_lower_bound, 0);
  EXPECT_GT(cfg.attn_res_block, 0);
  EXPECT_TRUE(cfg.situ);
  EXPECT_GT(cfg.q_lora, 0);
  EXPECT_TRUE(c->has("model.layers.1.block_sparse_moe.routed_expert_down_proj.weight"));
  EXPECT_TRUE(c->has("model.output_attn_res_proj.weight"));
}

TEST_F(ContainerTest, SynthIsDeterministicPerSeed) {
  TempDir d;
  write_synthetic(d / "a", {Arch::kK3, "tiny", 3});
  write_synthetic(d / "b", {Arch::kK3, "tiny", 3});
  write_synthetic(d / "c", {Arch::kK3, "tiny", 4});
  for (const char* f : {"trunk.bin", "experts-L2.bin", "codebooks.bin", "manifest.json"}) {
    EXPECT_EQ(test::read_file(d / "a" / f), test::read_file(d / "b" / f)) << f;
  }
  EXPECT_NE(test::read_file(d / "a" / "trunk.bin"), test::read_file(d / "c" / "trunk.bin"));
}

TEST_F(ContainerTest, SynthRefusesExistingOutputAndUnknownPreset) {
  EXPECT_THROW(write_synthetic(kl(), {Arch::kKimiLinear, "tiny", 1}), UsageError);
  TempDir d;
  EXPECT_THROW(write_synthetic(d / "x", {Arch::kKimiLinear, "huge", 1}), UsageError);
  EXPECT_FALSE(fs::exists(d / "x"));
}

TEST_F(ContainerTest, EveryRecordVerifies) {
  OpenOptions opt;
  opt.verify_crc = true;
  opt.load_trunk = false;
  for (const fs::path& p : {kl(), k3()}) {
    auto c = Container::open(p, opt);
    EXPECT_TRUE(verify_records(*c).empty()) << p;
  }
}

TEST_F(ContainerTest, RecordsDecodeToTheWrittenGeometry) {
  auto c = Container::open(k3());
  const ExpertBank& bank = c->bank(1);
  AlignedBuffer buf(bank.stride());
  bank.read(3, buf.data());
  ExpertView v = view_record(buf.data(), bank.geometry());
  EXPECT_EQ(v.gate.rows, c->config().moe_inter);
  EXPECT_EQ(v.gate.nv, c->config().latent / 8);
  EXPECT_EQ(v.down.rows, c->config().latent);
  EXPECT_EQ(v.down.nv, c->config().moe_inter / 8);
  EXPECT_EQ(v.codebook_base, c->manifest().banks.at(1).codebook_base);
  // Indices never name a code past the codebook.
  EXPECT_LT(v.gate.idx[0], 256);
}

TEST_F(ContainerTest, FlippedPayloadByteIsCaughtByCrcOnlyWithVerify) {
  fs::path p = copy_of(kl());
  uint64_t stride = Container::open(p, {false})->bank(2).stride();
  patch_file(p / "experts-L2.bin", 5 * stride + 100, "\x5a");
  OpenOptions quick;
  quick.load_trunk = false;
  auto c = Container::open(p, quick);
  AlignedBuffer buf(stride);
  EXPECT_NO_THROW(c->bank(2).read(5, buf.data()));  // header checks pass without --verify
  OpenOptions verify = quick;
  verify.verify_crc = true;
  auto v = Container::open(p, verify);
  auto problems = verify_records(*v);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("layer 2, expert 5, byte offset " + std::to_string(5 * stride)),
            std::string::npos)
      << problems[0];
  EXPECT_NE(problems[0].find("checksum mismatch"), std::string::npos) << problems[0];
}

TEST_F(ContainerTest, DamagedHeaderFieldsAreNamed) {
  struct Case {
    uint64_t off;
    std::string bytes, field;
  };
  for (const Case& k :
       {Case{0, "X", "magic"}, Case{4, "\x07", "field layer"}, Case{6, "\x03", "expert_id"},
        Case{8, "\x09", "fmt"}, Case{10, "\x05", "codebook_id"}, Case{12, "\x01", "lowrank_id"},
        Case{16, "\x63", "rec_4k_blocks"}, Case{24, "\x01", "up_off"},
        Case{32, "\x02", "chan_corr_off"}}) {
    fs::path p = scratch_.path() / ("h" + std::to_string(k.off));
    fs::copy(kl(), p, fs::copy_options::recursive);
    uint64_t stride = Container::open(p, {false})->bank(3).stride();
    patch_file(p / "experts-L3.bin", 2 * stride + k.off, k.bytes);
    auto c = Container::open(p, {false});
    AlignedBuffer buf(stride);
    try {
      c->bank(3).read(2, buf.data());
      ADD_FAILURE() << "damaged " << k.field << " was accepted";
    } catch (const FormatError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("expert 2 of layer 3"), std::string::npos) << msg;
      EXPECT_NE(msg.find(k.field), std::string::npos) << msg;
    }
  }
}

TEST_F(ContainerTest, TruncatedBankIsRefusedAtOpen) {
  fs::path p = copy_of(kl());
  fs::resize_file(p / "experts-L4.bin", fs::file_size(p / "experts-L4.bin") - 4096);
  std::string msg = open_error(p);
  EXPECT_NE(msg.find("experts-L4.bin"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(ContainerTest, MissingFilesAreNamed) {
  for (const char* f : {"trunk.bin", "codebooks.bin", "experts-L1.bin", "manifest.json"}) {
    fs::path p = scratch_.path() / (std::string("m-") + f);
    fs::copy(kl(), p, fs::copy_options::recursive);
    fs::remove(p / f);
    try {
      Container::open(p);
      ADD_FAILURE() << "opened without " << f;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
    }
  }
}

struct ManifestCase {
  const char* from;
  const char* to;
  const char* expect;  // a fragment the message must contain
};

TEST_F(ContainerTest, BadManifestsAreRefusedNamingTheField) {
  const ManifestCase cases[] = {
      {"\"format_version\":0", "\"format_version\":1", "format_version 1 is not supported"},
      {"\"format_version\":0,", "", "format_version missing"},
      {"\"hidden_size\":128", "\"hidden_size\":-128", "config.hidden_size: -128 is out of range"},
      {"\"hidden_size\":128", "\"hidden_size\":99999999999", "config.hidden_size"},
      {"\"num_hidden_layers\":5", "\"num_hidden_layers\":500", "config.num_hidden_layers"},
      {"\"num_experts_per_token\":2", "\"num_experts_per_token\":9",
       "config.num_experts_per_token"},
      {"\"vocab_size\":", "\"vocab_size\":\"x\",\"_v\":", "config.vocab_size: must be an integer"},
      {"\"shape\":[", "\"shape\":[0,", "shape[]: 0 is out of range"},
      {"\"off\":0,", "\"off\":999999999999,", "lies outside trunk.bin"},
      {"\"fmt\":3", "\"fmt\":1", "trunk format 1 is not supported"},
      {"\"stages\":3", "\"stages\":0", "expert_quant.stages"},
      {"\"experts-L1.bin\"", "\"../experts-L1.bin\"", "must be a plain file name"},
      {"\"1\":{", "\"9\":{\"file\":\"x\"},\"1\":{", "layer 9 is not a MoE layer"},
      {"\"kda_layers\":[1,", "\"kda_layers\":[0,", "kda_layers[]: 0 is out of range"},
      {"{\"format_version\"", "[{\"format_version\"", "not valid JSON"},
  };
  for (const ManifestCase& k : cases) {
    fs::path p = scratch_.path() / "bad";
    fs::remove_all(p);
    fs::copy(kl(), p, fs::copy_options::recursive);
    edit_manifest(p, k.from, k.to);
    std::string msg;
    try {
      Container::open(p);
      ADD_FAILURE() << "accepted manifest edit " << k.to;
      continue;
    } catch (const std::exception& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find(k.expect), std::string::npos) << "edit " << k.to << " gave: " << msg;
    EXPECT_NE(msg.find("manifest.json"), std::string::npos) << msg;
  }
}

// A rotation or routing the engine does not compute is refused naming the field, never run
// unrotated or with another rule.
TEST_F(ContainerTest, UnimplementedRotationAndRoutingAreRefusedNamingTheField) {
  const ManifestCase cases[] = {
      {"\"mla_use_nope\":true", "\"mla_use_nope\":1", "config.mla_use_nope: must be true or false"},
      {"\"mla_use_nope\":true", "\"rope_scaling\":{\"type\":\"linear\",\"factor\":4}",
       "config.rope_scaling.type: 'linear' is not implemented"},
      {"\"mla_use_nope\":true", "\"rope_scaling\":{\"factor\":40.0,\"beta_fast\":1.0}",
       "config.rope_scaling.type: '' is not implemented"},
      {"\"mla_use_nope\":true",
       "\"rope_scaling\":{\"type\":\"yarn\",\"factor\":32,\"mscale\":0.707,\"mscale_all_dim\":1}",
       "config.rope_scaling: mscale 0.707 differs from mscale_all_dim 1"},
      // The first of two equal keys counts: this one precedes the synth's mla_use_nope.
      {"\"qk_rope_head_dim\":8", "\"qk_rope_head_dim\":7,\"mla_use_nope\":false",
       "config.qk_rope_head_dim: 7 is odd"},
      {"\"moe_router_activation_func\":\"sigmoid\"", "\"moe_router_activation_func\":\"softmax\"",
       "config.moe_router_activation_func: 'softmax' is not implemented"},
      {"\"mla_use_nope\":true", "\"mla_use_nope\":true,\"scoring_func\":\"softmax\"",
       "config.scoring_func: 'softmax' is not implemented"},
      {"\"mla_use_nope\":true", "\"mla_use_nope\":true,\"num_expert_group\":3",
       "8 experts in n_group/num_expert_group 3 with topk_group 3 do not divide"},
      {"\"mla_use_nope\":true",
       "\"mla_use_nope\":true,\"n_group\":4,\"topk_group\":2,\"topk_method\":\"group_limited_"
       "greedy\"",
       "config.topk_method: 'group_limited_greedy' with grouped top-k is not implemented"},
      {"\"mla_use_nope\":true", "\"mla_use_nope\":true,\"n_group\":4,\"topk_group\":5",
       "with topk_group 5 do not divide"},
  };
  for (const ManifestCase& k : cases) {
    fs::path p = scratch_.path() / "bad";
    fs::remove_all(p);
    fs::copy(kl(), p, fs::copy_options::recursive);
    edit_manifest(p, k.from, k.to);
    std::string msg = open_error(p);
    EXPECT_NE(msg.find(k.expect), std::string::npos) << "edit " << k.to << " gave: " << msg;
  }
  // What the Kimi releases write opens without a rotation: one group, a sigmoid router.
  fs::path p = scratch_.path() / "kimi";
  fs::copy(kl(), p, fs::copy_options::recursive);
  edit_manifest(p, "\"mla_use_nope\":true",
                "\"mla_use_nope\":true,\"num_expert_group\":1,\"topk_group\":1,"
                "\"use_grouped_topk\":true,\"rope_theta\":10000.0,\"rope_scaling\":null");
  EXPECT_FALSE(Container::open(p)->config().rope.on);
}

// DeepSeek-V3's config, as the original's converter writes it: `mla_use_nope` absent means the
// rotation is on, with K2's YaRN block; DeepSeek's group keys are read.
TEST_F(ContainerTest, SyntheticDeepSeekV3ReadsItsRotationAndGroups) {
  fs::path p = scratch_.path() / "v3";
  write_synthetic(p, {Arch::kDeepSeekV3, "tiny", 7});
  auto c = Container::open(p);
  const ModelConfig& cfg = c->config();
  EXPECT_EQ(cfg.arch(), Arch::kDeepSeekV3);
  EXPECT_EQ(cfg.n_mla_layers(), cfg.n_layers);
  EXPECT_TRUE(cfg.rope.on);
  EXPECT_EQ(cfg.rope.theta, 50000.0);
  EXPECT_EQ(cfg.rope.factor, 32.0);
  EXPECT_EQ(cfg.rope.mscale_all_dim, 1.0);
  EXPECT_EQ(cfg.n_group, 4);
  EXPECT_EQ(cfg.topk_group, 2);
  EXPECT_TRUE(cfg.renormalize);
  EXPECT_FLOAT_EQ(cfg.routed_scale, 2.827f);
  EXPECT_EQ(summarize(*c, 64, 1).family, "deepseek-v3");
}

// `--preset k2-shape`: Kimi K2's layer shapes, as K2-Instruct's config.json gives them (cited in
// docs/MODEL.md §1.2), read back through the config reader without writing the gigabytes.
TEST(SyntheticK2Shape, CarriesKimiK2sShapes) {
  SynthOptions o{Arch::kDeepSeekV3, "k2-shape", 1};
  ModelConfig c = synthetic_config(o);
  EXPECT_EQ(c.arch(), Arch::kDeepSeekV3);
  EXPECT_EQ(c.n_layers, 2) << "the first two of its 61 by default";
  EXPECT_EQ(c.hidden, 7168);
  EXPECT_EQ(c.vocab, 163840);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.q_lora, 1536);
  EXPECT_EQ(c.kv_lora, 512);
  EXPECT_EQ(c.qk_nope, 128);
  EXPECT_EQ(c.qk_rope, 64);
  EXPECT_EQ(c.v_head, 128);
  EXPECT_EQ(c.n_mla_layers(), 2);
  EXPECT_EQ(c.n_experts, 384);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.moe_inter, 2048);
  EXPECT_EQ(c.dense_inter, 18432);
  EXPECT_EQ(c.n_shared, 1);
  EXPECT_EQ(c.first_dense, 1);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_EQ(c.n_group, 1);
  EXPECT_EQ(c.topk_group, 1);
  EXPECT_FLOAT_EQ(c.routed_scale, 2.827f);
  EXPECT_TRUE(c.renormalize);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_TRUE(c.rope.on);
  EXPECT_EQ(c.rope.theta, 50000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.beta_fast, 1.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  EXPECT_EQ(c.rope.mscale_all_dim, 1.0);
  EXPECT_EQ(c.rope.original_max, 4096.0);
  // The trunk's matrices at those shapes: the factorized query, the joint key/value latent with
  // the rotary slice, the dense first layer, the router and the shared expert.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const TensorSpec& s : text_tensor_specs(c)) shapes[s.name] = s.shape;
  const std::map<std::string, std::vector<int64_t>> want = {
      {"model.embed_tokens.weight", {163840, 7168}},
      {"lm_head.weight", {163840, 7168}},
      {"model.layers.0.self_attn.q_a_proj.weight", {1536, 7168}},
      {"model.layers.0.self_attn.q_b_proj.weight", {64 * 192, 1536}},
      {"model.layers.0.self_attn.kv_a_proj_with_mqa.weight", {512 + 64, 7168}},
      {"model.layers.0.self_attn.kv_b_proj.weight", {64 * 256, 512}},
      {"model.layers.0.self_attn.o_proj.weight", {7168, 64 * 128}},
      {"model.layers.0.mlp.gate_proj.weight", {18432, 7168}},
      {"model.layers.1.block_sparse_moe.gate.weight", {384, 7168}},
      {"model.layers.1.block_sparse_moe.gate.e_score_correction_bias", {384}},
      {"model.layers.1.block_sparse_moe.shared_experts.down_proj.weight", {7168, 2048}},
  };
  for (const auto& [name, shape] : want) {
    ASSERT_TRUE(shapes.count(name)) << name;
    EXPECT_EQ(shapes[name], shape) << name;
  }
  EXPECT_FALSE(shapes.count("model.layers.0.block_sparse_moe.gate.weight")) << "layer 0 is dense";

  o.layers = 61;
  EXPECT_EQ(synthetic_config(o).n_layers, 61);
  o.layers = 62;
  EXPECT_THROW(synthetic_config(o), UsageError);
}

TEST_F(ContainerTest, WrongTensorShapeIsNamed) {
  fs::path p = copy_of(kl());
  std::string m = test::read_file(p / "manifest.json");
  std::regex re("(\"name\":\"model.norm.weight\",\"fmt\":0,\"off\":[0-9]+,\"shape\":\\[)128");
  test::write_file(p / "manifest.json", std::regex_replace(m, re, "$0,1"));
  std::string msg = open_error(p);
  EXPECT_NE(msg.find("model.norm.weight has shape [128, 1], expected [128]"), std::string::npos)
      << msg;
}

TEST_F(ContainerTest, SummaryCountsParameters) {
  auto c = Container::open(kl(), {false});
  ModelSummary s = summarize(*c, 4096, 2);
  const ModelConfig& cfg = c->config();
  int64_t expert = 3 * (int64_t)cfg.moe_inter * cfg.hidden;
  int64_t trunk = 0;
  for (const TrunkEntry& t : c->manifest().trunk) trunk += t.elements();
  EXPECT_EQ(s.params_total, trunk + expert * cfg.n_experts * 4);
  EXPECT_EQ(s.params_active,
            trunk - (int64_t)cfg.vocab * cfg.hidden + cfg.hidden + expert * cfg.top_k * 4);
  EXPECT_EQ(s.plan.record_bytes, c->bank(1).stride());
  EXPECT_GT(s.plan.floor_bytes, s.plan.trunk_bytes);
}

TEST(Crc32, MatchesZlibCheckValues) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  std::string a(1000, 'a');
  EXPECT_EQ(crc32(a.data() + 10, 990, crc32(a.data(), 10)), crc32(a.data(), 1000));
}

}  // namespace
}  // namespace waste
