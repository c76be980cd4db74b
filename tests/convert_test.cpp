// `waste convert` against synthetic release checkpoints (tests/synth_checkpoint.h): real tensor
// names at scaled-down shapes, shards laid out like the releases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <span>

#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/rng.h"
#include "engine/base/stopwatch.h"
#include "engine/base/thread_pool.h"
#include "engine/convert/convert.h"
#include "engine/convert/convert_plan.h"
#include "engine/convert/convert_verify.h"
#include "engine/convert/fp8_block.h"
#include "engine/convert/int4_pack.h"
#include "engine/convert/mxfp4.h"
#include "engine/convert/safetensors.h"
#include "engine/convert/vq_encode.h"
#include "engine/convert/vq_tile.h"
#include "engine/format/container.h"
#include "engine/format/expert_record.h"
#include "engine/model/model.h"
#include "engine/model/model_info.h"
#include "prompt_templates/specials_file.h"
#include "tests/synth_checkpoint.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

using test::CheckpointShape;
using test::gauss;
using test::k2_shape;
using test::K2Weights;
using test::k3_shape;
using test::write_checkpoint;

ConvertOptions quick(const fs::path& src, const fs::path& out, int jobs = 2) {
  ConvertOptions o;
  o.src = src;
  o.out = out;
  o.jobs = jobs;
  o.progress = false;
  o.recipe.train_vectors = 3000;
  o.recipe.iters = 3;
  o.read_specials = [](const std::string& p) { return read_specials_file(p); };
  o.log = [](const std::string&) {};
  return o;
}

std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = test::read_file(e.path());
  return out;
}

void expect_same_container(const fs::path& a, const fs::path& b) {
  auto x = folder_bytes(a), y = folder_bytes(b);
  ASSERT_EQ(x.size(), y.size());
  for (auto& [name, bytes] : x) {
    ASSERT_TRUE(y.count(name)) << name;
    EXPECT_TRUE(bytes == y[name]) << name << " differs";
  }
}

class ConvertTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_checkpoint(dir_->path() / "kl-src", test::kimi_linear_shape());
    write_checkpoint(dir_->path() / "k3-src", k3_shape());
    convert(quick(kl_src(), dir_->path() / "kl-ref"));
  }
  static void TearDownTestSuite() { delete dir_; }
  static fs::path kl_src() { return dir_->path() / "kl-src"; }
  static fs::path k3_src() { return dir_->path() / "k3-src"; }
  static fs::path kl_ref() { return dir_->path() / "kl-ref"; }
  static test::TempDir* dir_;
};
test::TempDir* ConvertTest::dir_ = nullptr;

// Every trunk tensor against its source: F32 bit-exact; Q8G/Q4G within the docs/CONVERTER.md §7.2
// bound per element.
void check_trunk(const Container& c, Checkpoint& ck, std::map<std::string, int>* formats) {
  std::string trunk = test::read_file(c.dir() / "trunk.bin");
  for (const TrunkEntry& t : c.manifest().trunk) {
    (*formats)[format_name(t.fmt)]++;
    int64_t n = t.elements();
    std::vector<float> src((size_t)n);
    ck.read_elements(t.name, 0, n, src.data());
    const uint8_t* pay = reinterpret_cast<const uint8_t*>(trunk.data() + t.off);
    if (t.fmt == TensorFormat::kF32) {
      ASSERT_EQ(std::memcmp(pay, src.data(), (size_t)n * 4), 0) << t.name;
      continue;
    }
    Matrix m{t.fmt, t.rows(), t.cols(), nullptr, nullptr};
    const uint8_t* sc = reinterpret_cast<const uint8_t*>(trunk.data() + t.scale_off);
    float qmax = t.fmt == TensorFormat::kQ8G ? 127 : 7;
    for (int64_t r = 0; r < m.rows; r++)
      for (int64_t j = 0; j < m.cols; j++) {
        int64_t g = j / kQuantGroup;
        float amax = 1e-8f;
        for (int64_t k = g * kQuantGroup; k < std::min(m.cols, (g + 1) * kQuantGroup); k++)
          amax = std::max(amax, std::fabs(src[(size_t)(r * m.cols + k)]));
        float s = amax / qmax;
        uint16_t h;
        std::memcpy(&h, sc + 2 * (r * m.groups() + g), 2);
        float s16 = f16_to_f32(h);
        const uint8_t* row = pay + r * m.row_bytes();
        int q =
            t.fmt == TensorFormat::kQ8G ? (int8_t)row[j] : ((row[j / 2] >> (4 * (j & 1))) & 15) - 8;
        // Half a step, plus the f32 rounding of x/s (half an ulp of 127 is 3.8e-6), plus
        // the f16 rounding of the stored scale.
        double bound = (double)s * (0.5 + 4e-6) + std::abs(q) * std::fabs((double)s - s16) + 1e-30;
        ASSERT_LE(std::fabs((double)src[(size_t)(r * m.cols + j)] - (double)q * s16), bound)
            << t.name << " " << r << "," << j;
      }
  }
}

void check_container(const fs::path& out, const fs::path& src) {
  auto c = Container::open(out);
  Checkpoint ck(src);
  std::map<std::string, int> formats;
  check_trunk(*c, ck, &formats);
  EXPECT_GT(formats["F32"], 0);
  EXPECT_GT(formats["Q8G"], 1);
  EXPECT_GT(formats["Q4G"], 0);
  // A forward pass runs and gives finite logits.
  ModelOptions mo;
  mo.threads = 2;
  Model m(*c, mo);
  Session s = m.new_session(16);
  std::vector<int32_t> ids = {5, 17, 99, 300};
  std::vector<float> logits(c->config().vocab);
  m.forward(s, ids, logits.data());
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
  // Experts decode back within the VQ error, CRCs and padding checked.
  OpenOptions oo;
  oo.load_trunk = false;
  oo.verify_crc = true;
  auto cv = Container::open(out, oo);
  DeepReport d = verify_deep(*cv, &ck, 2);
  EXPECT_TRUE(d.problems.empty()) << d.problems.front();
  EXPECT_LT(d.max, 0.30);
  EXPECT_GT(d.median, 0.05);
  std::printf("  %s: expert error median %.2f%%, max %.2f%%\n", out.filename().c_str(),
              100 * d.median, 100 * d.max);
}

TEST_F(ConvertTest, KimiLinearConvertsAndRuns) {
  check_container(kl_ref(), kl_src());
  EXPECT_TRUE(fs::exists(kl_ref() / "tokenizer.model"));
  EXPECT_FALSE(fs::exists(kl_ref() / kConvertStateDir));
  std::string sp = test::read_file(kl_ref() / "specials.json");
  EXPECT_LT(sp.find("1000"), sp.find("1001"));  // sorted by id
}

// scripts/reference/trunk_bytes.py: plain numpy with its own decoders (fp8 included)
// re-derives every trunk byte from the release's tensors.
void expect_trunk_bytes_rederived(const fs::path& out, const fs::path& src) {
  std::string log;
  int rc = test::run_command(
      "/usr/bin/python3 " + (test::source_dir() / "scripts/reference/trunk_bytes.py").string() +
          " " + out.string() + " " + src.string(),
      &log);
  EXPECT_EQ(rc, 0) << log;
  EXPECT_NE(log.find(" 0 differ"), std::string::npos) << log;
  std::printf("  %s", log.c_str());
}

// Trunk bytes equal what the original converter's arithmetic gives (docs/CONVERTER.md §1.4,
// measured there to match convert.py), re-derived by an independent numpy script.
TEST_F(ConvertTest, TrunkBytesMatchTheOriginalConverterArithmetic) {
  fs::path k3 = dir_->path() / "k3-trunk";
  convert(quick(k3_src(), k3));
  for (auto [out, src] : {std::pair{kl_ref(), kl_src()}, std::pair{k3, k3_src()}})
    expect_trunk_bytes_rederived(out, src);
}

TEST_F(ConvertTest, K3WithMxfp4AndVisionConvertsAndRuns) {
  fs::path out = dir_->path() / "k3-out";
  ConvertReport r = convert(quick(k3_src(), out));
  EXPECT_EQ(r.layers_converted, 3);
  check_container(out, k3_src());
  auto c = Container::open(out, {false, false, false});
  EXPECT_EQ(c->manifest().tensor_prefix, "language_model.");
  EXPECT_EQ(c->config().architecture, "KimiK3ForConditionalGeneration");
  const TrunkEntry* patch = nullptr;
  for (const TrunkEntry& t : c->manifest().trunk)
    if (t.name == "vision_tower.patch_embed.proj.weight") patch = &t;
  ASSERT_TRUE(patch);
  EXPECT_EQ(patch->fmt, TensorFormat::kQ8G);
  EXPECT_EQ(patch->shape, (std::vector<int64_t>{128, 588}));
  ASSERT_TRUE(c->vision_json().has_value());
  EXPECT_NE(c->vision_json()->find("\"media_placeholder_token_id\": 1000"), std::string::npos);
  EXPECT_EQ(c->vision_json()->find("_attn_implementation"), std::string::npos);
  // Nothing reads a chat template file: the family's rendering is in prompt_templates/.
  EXPECT_FALSE(fs::exists(out / "chat.json"));
}

// A disk too small is refused before any work, with the numbers; one that fills up part-way
// stops the conversion with the reason; once there is room again the rerun resumes and gives the
// very container a clean run gives.
TEST_F(ConvertTest, AFullDiskStopsTheConversionAndARerunResumesIt) {
  test::SmallFilesystem disk(8u << 20, false);
  if (!disk.ok()) GTEST_SKIP() << "this machine lets no test mount a tmpfs";
  try {
    convert(quick(kl_src(), disk / "out"));
    FAIL() << "a conversion started on a disk too small for it";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("free, but the rest of the conversion needs"),
              std::string::npos)
        << e.what();
  }
  // Room enough to start; then something else fills the disk once the trunk is written.
  ASSERT_TRUE(disk.resize(256u << 20));
  ConvertOptions o = quick(kl_src(), disk / "out");
  o.step_hook = [&](const char* step) {
    if (std::string(step) != "trunk.done") return;
    std::FILE* f = std::fopen((disk / "filler").c_str(), "wb");
    const std::string block(1 << 16, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  };
  try {
    convert(o);
    FAIL() << "the conversion finished on a full disk";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("No space left on device"), std::string::npos) << e.what();
  }
  fs::remove(disk / "filler");
  convert(quick(kl_src(), disk / "out"));
  expect_same_container(disk / "out", kl_ref());
}

TEST_F(ConvertTest, JobsAndInstructionSetDoNotChangeABit) {
  test::TempDir d;
  ConvertOptions a = quick(kl_src(), d / "a", 1);
  a.isa = Isa::kScalar;
  convert(a);
  expect_same_container(d / "a", kl_ref());  // the reference: 2 threads, best ISA
  ConvertOptions b = quick(kl_src(), d / "b", 3);
  b.recipe.seed = 5;
  convert(b);
  EXPECT_NE(test::read_file(d / "b" / "codebooks.bin"),
            test::read_file(kl_ref() / "codebooks.bin"));
  EXPECT_EQ(test::read_file(d / "b" / "trunk.bin"), test::read_file(kl_ref() / "trunk.bin"));
}

struct Crash {};

TEST_F(ConvertTest, KillAtRandomStepsThenResumeIsByteIdentical) {
  std::atomic<int> steps{0};
  {
    test::TempDir d;
    ConvertOptions o = quick(kl_src(), d / "count");
    o.step_hook = [&](const char*) { steps++; };
    convert(o);
  }
  Rng rng(2024);
  for (int trial = 0; trial < 5; trial++) {
    test::TempDir d;
    fs::path out = d / "m";
    // One to three crashes at random steps, then a clean resume.
    int crashes = 1 + (int)rng.below(3);
    for (int k = 0; k < crashes; k++) {
      int at = 1 + (int)rng.below((uint32_t)steps.load());
      std::atomic<int> n{0};
      ConvertOptions o = quick(kl_src(), out, 1 + (int)rng.below(3));
      o.step_hook = [&](const char*) {
        if (++n == at) throw Crash{};
      };
      try {
        convert(o);
      } catch (const Crash&) {
      }
    }
    ConvertReport r = convert(quick(kl_src(), out));
    SCOPED_TRACE(trial);
    expect_same_container(out, kl_ref());
    if (r.layers_resumed + r.layers_converted > 0) {
      EXPECT_EQ(r.layers.size(), 3u);
      EXPECT_GT(r.median_error, 0.0);  // resumed layers keep their recorded errors
    }
  }
}

TEST_F(ConvertTest, SigkilledBinaryResumesToTheSameBytes) {
  // Killed with the trunk just published, with one layer done, and inside the second layer.
  for (const char* at : {"trunk.done:1", "layer.done:1", "expert:18"}) {
    SCOPED_TRACE(at);
    test::TempDir d;
    std::string cmd =
        fmt::format("WASTE_CONVERT_KILL_AT={} {} convert --src {} --out {} --quiet", at,
                    test::waste_binary().string(), kl_src().string(), (d / "m").string());
    std::string out;
    EXPECT_EQ(test::run_command(cmd, &out), 137) << "the kill did not land: " << out;
    ASSERT_TRUE(fs::exists(d / "m" / kConvertStateDir)) << "nothing to resume";
    // The binary uses the full recipe; compare against a full-recipe in-process run.
    int rc = test::run_command(
        fmt::format("{} convert --src {} --out {} --quiet", test::waste_binary().string(),
                    kl_src().string(), (d / "m").string()),
        &out);
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("trunk 79 tensors (resumed)"), std::string::npos) << out;
    if (std::string(at) != "trunk.done:1") {
      EXPECT_NE(out.find("2 converted, 1 resumed"), std::string::npos) << out;
    }
    ConvertOptions o = quick(kl_src(), d / "ref");
    o.recipe = VqRecipe{};
    convert(o);
    expect_same_container(d / "m", d / "ref");
  }
  test::TempDir d;
  ASSERT_EQ(test::run_command(
                fmt::format("{} convert --src {} --out {} --quiet", test::waste_binary().string(),
                            kl_src().string(), (d / "m").string()),
                nullptr),
            0);
  std::string out;
  int rc =
      test::run_command(fmt::format("{} verify {} --deep --src {}", test::waste_binary().string(),
                                    (d / "m").string(), kl_src().string()),
                        &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("relative error vs source median"), std::string::npos) << out;
}

TEST_F(ConvertTest, ReclaimDryReportsAndOnDeletesOnlySpentShards) {
  test::TempDir d;
  fs::copy(kl_src(), d / "src");
  ConvertOptions dry = quick(d / "src", d / "dry");
  dry.reclaim = Reclaim::kDry;
  ConvertReport r = convert(dry);
  EXPECT_EQ(r.reclaimed.size(), 3u);
  EXPECT_EQ(folder_bytes(d / "src").size(), folder_bytes(kl_src()).size());
  EXPECT_FALSE(fs::exists(d / "src" / ".reclaimed"));
  expect_same_container(d / "dry", kl_ref());

  // Crash right after layer 1: only the trunk-only shard is spent (shard 2 still owes layer 2).
  ConvertOptions on = quick(d / "src", d / "on");
  on.reclaim = Reclaim::kOn;
  int layers_done = 0;
  on.step_hook = [&](const char* step) {
    if (std::string(step) == "layer.done" && ++layers_done == 1) throw Crash{};
  };
  EXPECT_THROW(convert(on), Crash);
  EXPECT_FALSE(fs::exists(d / "src" / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(d / "src" / "model-00002-of-00003.safetensors"));
  EXPECT_EQ(test::read_file(d / "src" / ".reclaimed"), "model-00001-of-00003.safetensors\n");
  on.step_hook = nullptr;
  r = convert(on);
  EXPECT_EQ(r.layers_resumed, 1);
  EXPECT_EQ(r.reclaimed.size(), 2u);
  for (int k = 1; k <= 3; k++)
    EXPECT_FALSE(fs::exists(d / "src" / fmt::format("model-{:05d}-of-00003.safetensors", k)));
  expect_same_container(d / "on", kl_ref());
}

TEST_F(ConvertTest, ReclaimRefusesUnverifiedAndMissingShards) {
  test::TempDir d;
  fs::copy(kl_src(), d / "src");
  test::write_file(d / "src" / ".download-state", "model-00001-of-00003.safetensors\n");
  ConvertOptions on = quick(d / "src", d / "out");
  on.reclaim = Reclaim::kOn;
  try {
    convert(on);
    FAIL() << "an unverified shard was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("model-00002-of-00003"), std::string::npos) << e.what();
  }
  for (int k = 1; k <= 3; k++)
    EXPECT_TRUE(fs::exists(d / "src" / fmt::format("model-{:05d}-of-00003.safetensors", k)));
  fs::remove(d / "src" / ".download-state");
  fs::remove(d / "src" / "model-00003-of-00003.safetensors");
  fs::remove_all(d / "out");
  try {
    convert(on);
    FAIL() << "a missing shard was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("model-00003-of-00003"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fs::exists(d / "src" / "model-00001-of-00003.safetensors"));
  ConvertOptions nested = quick(d / "src", d / "src" / "out");
  EXPECT_THROW(convert(nested), UsageError);
}

// ---- bad inputs --------------------------------------------------------------------------

std::string convert_error(const fs::path& src) {
  test::TempDir d;
  try {
    convert(quick(src, d / "out"));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_F(ConvertTest, BadInputsNameTheFileAndTensor) {
  test::TempDir d;
  const std::string shard = "model-00002-of-00003.safetensors";
  auto fresh = [&](const char* name) {
    fs::path p = d / name;
    fs::copy(kl_src(), p);
    return p;
  };
  {  // truncated shard
    fs::path p = fresh("trunc");
    fs::resize_file(p / shard, fs::file_size(p / shard) - 100);
    std::string e = convert_error(p);
    EXPECT_NE(e.find(shard), std::string::npos) << e;
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  }
  {  // header length beyond the file
    fs::path p = fresh("hdr");
    std::string b = test::read_file(p / shard);
    uint64_t n = b.size() + 1;
    std::memcpy(&b[0], &n, 8);
    test::write_file(p / shard, b);
    std::string e = convert_error(p);
    EXPECT_NE(e.find(shard), std::string::npos) << e;
    EXPECT_NE(e.find("header length"), std::string::npos) << e;
  }
  {  // dtype that does not match the byte span
    fs::path p = fresh("dtype");
    std::string b = test::read_file(p / shard);
    size_t at = b.find("\"BF16\"");
    b.replace(at, 6, "\"F32\" ");
    test::write_file(p / shard, b);
    std::string e = convert_error(p);
    EXPECT_NE(e.find(shard), std::string::npos) << e;
    EXPECT_NE(e.find("dtype or shape mismatch"), std::string::npos) << e;
  }
  {  // a required tensor missing from the index
    fs::path p = fresh("index");
    std::string idx = test::read_file(p / "model.safetensors.index.json");
    const std::string t = "\"model.layers.2.input_layernorm.weight\":";
    size_t at = idx.find(t);
    ASSERT_NE(at, std::string::npos);
    size_t end = idx.find(',', at);
    idx.erase(at, end - at + 1);
    test::write_file(p / "model.safetensors.index.json", idx);
    std::string e = convert_error(p);
    EXPECT_NE(e.find("model.layers.2.input_layernorm.weight"), std::string::npos) << e;
  }
  {  // an expert missing from the index
    fs::path p = fresh("expert");
    std::string idx = test::read_file(p / "model.safetensors.index.json");
    const std::string t = "\"model.layers.3.block_sparse_moe.experts.5.w2.weight\":";
    size_t at = idx.find(t);
    idx.erase(at, idx.find(',', at) - at + 1);
    test::write_file(p / "model.safetensors.index.json", idx);
    std::string e = convert_error(p);
    EXPECT_NE(e.find("experts.5.w2"), std::string::npos) << e;
  }
  {  // the index names a tensor its shard does not hold
    fs::path p = fresh("moved");
    std::string idx = test::read_file(p / "model.safetensors.index.json");
    const std::string t = "\"model.layers.3.input_layernorm.weight\":\"model-00003";
    size_t at = idx.find(t);
    ASSERT_NE(at, std::string::npos);
    idx.replace(at + t.size() - 5, 5, "00001");
    test::write_file(p / "model.safetensors.index.json", idx);
    std::string e = convert_error(p);
    EXPECT_NE(e.find("model-00001-of-00003"), std::string::npos) << e;
    EXPECT_NE(e.find("model.layers.3.input_layernorm.weight"), std::string::npos) << e;
  }
  {  // a layer number past any int: refused naming the tensor, not wrapped around and dropped
    fs::path p = fresh("huge-layer");
    const std::string t = "model.layers.99999999999.input_layernorm.weight";
    std::string idx = test::read_file(p / "model.safetensors.index.json");
    idx.insert(idx.find("\"weight_map\":{") + 14, "\"" + t + "\":\"" + shard + "\",");
    test::write_file(p / "model.safetensors.index.json", idx);
    std::string e = convert_error(p);
    EXPECT_NE(e.find("tensor " + t + " is in layer 99999999999, past num_hidden_layers (4)"),
              std::string::npos)
        << e;
  }
  {  // --arch deepseek-v3 on a Kimi-Linear release: refused saying what differs
    test::TempDir out;
    ConvertOptions o = quick(kl_src(), out / "c");
    o.arch = "deepseek-v3";
    std::string e;
    try {
      convert(o);
    } catch (const UsageError& x) {
      e = x.what();
    }
    EXPECT_NE(e.find("is not a DeepSeek-V3 config"), std::string::npos) << e;
    EXPECT_NE(e.find("layers are KDA (kda_layers)"), std::string::npos) << e;
    EXPECT_NE(e.find("mla_use_nope"), std::string::npos) << e;
  }
}

TEST_F(ConvertTest, Mxfp4NanScaleIsRefused) {
  uint8_t packed[16] = {}, scales[1] = {255};
  float out[32];
  try {
    mxfp4_decode_row(packed, scales, 32, out, "shard.safetensors: tensor x_scale", 3);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("x_scale"), std::string::npos);
  }
  scales[0] = 127;
  packed[0] = 0x9f;  // low nibble 0xf = -6, high nibble 9 = -0.5
  mxfp4_decode_row(packed, scales, 32, out, "t", 0);
  EXPECT_EQ(out[0], -6.0f);
  EXPECT_EQ(out[1], -0.5f);
}

// ---- Kimi K2 / DeepSeek-V3 checkpoints: fp8 block-scaled (K2-Instruct), int4 experts
// (K2-Thinking) ---------------------------------------------------------------------------

// E4M3FN by its definition, in double: sign, 4 exponent bits (bias 7), 3 mantissa bits.
double e4m3_by_definition(uint8_t b) {
  int e = (b >> 3) & 15, m = b & 7;
  double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return (b & 0x80) ? -mag : mag;
}

// The stored bytes of one tensor, as the shard holds them.
std::string raw_tensor(const fs::path& shard, const std::string& name) {
  SafetensorsFile f(shard);
  const TensorInfo* t = f.find(name);
  EXPECT_TRUE(t) << name;
  std::string b(t->end - t->begin, '\0');
  f.read(*t, 0, b.size(), b.data());
  return b;
}

std::string release_shard(const fs::path& src, const std::string& tensor) {
  std::string idx = test::read_file(src / "model.safetensors.index.json");
  size_t at = idx.find("\"" + tensor + "\":\"");
  EXPECT_NE(at, std::string::npos) << tensor;
  at += tensor.size() + 4;
  return idx.substr(at, idx.find('"', at) - at);
}

// Every element of `got` (rows x cols) has the bits of want(r, c); false at the first that
// does not, the failure naming the tensor, row and column.
template <typename Want>
bool expect_bits(const std::string& name, const std::vector<float>& got, int64_t rows, int64_t cols,
                 Want want) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) {
      EXPECT_EQ(f32_to_bits(got[(size_t)(r * cols + c)]), f32_to_bits(want(r, c)))
          << name << " " << r << "," << c;
      if (::testing::Test::HasFailure()) return false;
    }
  return true;
}

// Every fp8 weight the checkpoint reads equals, bit for bit, code-by-definition times its tile's
// scale rounded once to f32, the tile being weight_block_size's with partial edge tiles. Returns
// how many weights were checked.
int expect_fp8_exact(const fs::path& src, int64_t bm, int64_t bn) {
  Checkpoint ck(src);
  int checked = 0;
  for (const auto& [name, shard] : ck.weight_map()) {
    if (ck.stored(name) != Stored::kFp8) continue;
    std::string release = ck.source_name(name);
    std::string codes = raw_tensor(src / shard, release);
    std::string sraw =
        raw_tensor(src / release_shard(src, release + "_scale_inv"), release + "_scale_inv");
    int64_t rows = 0, cols = 0;
    std::vector<float> got;
    ck.read_all(name, &got, &rows, &cols);
    const int64_t tc = (cols + bn - 1) / bn;
    EXPECT_EQ((int64_t)sraw.size(), ((rows + bm - 1) / bm) * tc * 4) << name;
    bool same = expect_bits(name, got, rows, cols, [&](int64_t r, int64_t c) {
      float s;
      std::memcpy(&s, &sraw[(size_t)(4 * ((r / bm) * tc + c / bn))], 4);
      return (float)(e4m3_by_definition((uint8_t)codes[(size_t)(r * cols + c)]) * s);
    });
    if (!same) return -1;
    checked++;
  }
  return checked;
}

// Every int4 expert equals, bit for bit, (nibble - 8) times its group's BF16 scale, nibble i of
// a row being bits 4(i%8).. of I32 word i/8. Returns how many weights were checked.
int expect_int4_exact(const fs::path& src) {
  Checkpoint ck(src);
  int checked = 0;
  for (const auto& [name, shard] : ck.weight_map()) {
    if (!name.ends_with("_packed")) continue;
    std::string base = name.substr(0, name.size() - 7);
    EXPECT_EQ(ck.stored(base), Stored::kInt4) << base;
    std::string release = ck.source_name(base);
    std::string words = raw_tensor(src / shard, release + "_packed");
    std::string sraw = raw_tensor(src / release_shard(src, release + "_scale"), release + "_scale");
    int64_t rows = 0, cols = 0;
    std::vector<float> got;
    ck.read_all(base, &got, &rows, &cols);
    EXPECT_EQ((int64_t)words.size(), rows * cols / 2) << base;
    bool same = expect_bits(base, got, rows, cols, [&](int64_t r, int64_t c) {
      uint32_t w;
      std::memcpy(&w, &words[(size_t)(4 * (r * (cols / 8) + c / 8))], 4);
      int q = (int)((w >> (4 * (c % 8))) & 15) - 8;
      uint16_t h;
      std::memcpy(&h, &sraw[(size_t)(2 * (r * (cols / 32) + c / 32))], 2);
      return (float)q * bits_to_f32((uint32_t)h << 16);
    });
    if (!same) return -1;
    checked++;
  }
  return checked;
}

// The container opens as DeepSeek-V3 and its last-position logits match the float64 reference
// (scripts/reference/waste_ref.py) as forward_test's do, greedy continuation included.
void expect_k2_container_matches_reference(const fs::path& out) {
  auto c = Container::open(out);
  EXPECT_EQ(c->manifest().arch, "deepseek-v3");
  EXPECT_EQ(c->config().arch(), Arch::kDeepSeekV3);
  EXPECT_EQ(summarize(*c, 256, 1).family, "deepseek-v3");  // what `waste info` reports
  EXPECT_EQ(c->config().n_experts, 16);
  EXPECT_EQ(c->config().top_k, 4);
  EXPECT_EQ(c->config().n_shared, 1);
  EXPECT_TRUE(c->config().renormalize);
  EXPECT_TRUE(c->config().rope.on);
  for (const TrunkEntry& t : c->manifest().trunk) {
    EXPECT_EQ(t.name.find("model.layers.4."), std::string::npos) << "MTP tensor " << t.name;
    EXPECT_EQ(t.name.find(".mlp.gate."), std::string::npos) << t.name;
    EXPECT_EQ(t.name.find("_scale_inv"), std::string::npos) << t.name;
  }
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; i++) ids.push_back((i * 37 + 11) % c->config().vocab);
  ModelOptions mo;
  mo.threads = 2;
  mo.chunk = 1;
  Model m(*c, mo);
  Session s = m.new_session(64);
  std::vector<float> first(c->config().vocab);
  m.forward(s, ids, first.data());
  std::vector<float> logits = first;
  std::vector<int32_t> greedy;
  for (int i = 0; i < 8; i++) {
    int32_t best = (int32_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
    greedy.push_back(best);
    m.forward(s, std::span<const int32_t>(&best, 1), logits.data());
  }
  test::TempDir d;
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  std::string log;
  int rc = test::run_command("/usr/bin/python3 " +
                                 (test::source_dir() / "scripts/reference/waste_ref.py").string() +
                                 " " + out.string() + " --ids " + list + " --logits-out " +
                                 (d / "l.f64").string() + " --greedy 8 --json",
                             &log);
  ASSERT_EQ(rc, 0) << log;
  std::string raw = test::read_file(d / "l.f64");
  ASSERT_EQ(raw.size(), first.size() * 8);
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < first.size(); i++) {
    double ref;
    std::memcpy(&ref, &raw[i * 8], 8);
    max_diff = std::max(max_diff, std::fabs(first[i] - ref));
    max_abs = std::max(max_abs, std::fabs(ref));
  }
  EXPECT_GT(max_abs, 1.0);
  EXPECT_LE(max_diff, 1e-4) << "max |logit| " << max_abs;
  EXPECT_LE(max_diff / max_abs, 1e-5);
  std::string want;
  for (int32_t id : greedy) want += (want.empty() ? "" : ",") + std::to_string(id);
  std::string got_ids = log.substr(log.find("\"token_ids\""));
  got_ids = got_ids.substr(got_ids.find('[') + 1);
  got_ids = got_ids.substr(0, got_ids.find(']'));
  got_ids.erase(std::remove(got_ids.begin(), got_ids.end(), ' '), got_ids.end());
  EXPECT_EQ(got_ids, want);
  std::printf("  %s: logits max |d| %.3g of max |logit| %.3g vs the float64 reference\n",
              out.filename().c_str(), max_diff, max_abs);
}

TEST_F(ConvertTest, E4m3DecodesEveryCodeByItsDefinition) {
  for (int b = 0; b < 256; b++) {
    if ((b & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(e4m3_value((uint8_t)b))) << b;
      continue;
    }
    EXPECT_EQ((double)e4m3_value((uint8_t)b), e4m3_by_definition((uint8_t)b)) << b;
    EXPECT_EQ(e4m3_encode(e4m3_value((uint8_t)b)), b == 0x80 ? 0x80 : b) << b;
  }
  EXPECT_EQ(e4m3_value(0x7e), 448.0f);
  EXPECT_EQ(e4m3_value(0x38), 1.0f);
  EXPECT_EQ(e4m3_value(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_value(0xb8), -1.0f);
}

TEST_F(ConvertTest, Int4PackingIsLowNibbleFirstWithOffsetEight) {
  int8_t q[8] = {-8, -7, -1, 0, 1, 5, 6, 7};
  int32_t w = 0;
  int4_pack_row(q, 8, &w);
  EXPECT_EQ((uint32_t)w, 0xfed98710u);  // nibble i = q[i] + 8, value 0 in the low bits
  float scale = 0.5f, out[8];
  int4_decode_row(&w, &scale, 8, 32, out);
  for (int i = 0; i < 8; i++) EXPECT_EQ(out[i], q[i] * 0.5f) << i;
}

TEST_F(ConvertTest, K2InstructFp8ConvertsExactlyAndMatchesTheReference) {
  test::TempDir d;
  CheckpointShape shape = k2_shape(K2Weights::kFp8);
  write_checkpoint(d / "src", shape);
  int fp8 = expect_fp8_exact(d / "src", shape.fp8_tile_rows, shape.fp8_tile_cols);
  EXPECT_EQ(fp8, 3 * 16 * 3 + 4 * 5 + 3 + 3 * 3);  // experts, attention, dense, shared
  // As `waste download` leaves it: every file verified and listed in .download-state.
  std::string listed;
  for (const auto& e : fs::recursive_directory_iterator(d / "src"))
    if (e.is_regular_file()) listed += fs::relative(e.path(), d / "src").string() + "\n";
  test::write_file(d / "src" / ".download-state", listed);
  ConvertOptions o = quick(d / "src", d / "out");
  o.reclaim = Reclaim::kDry;
  ConvertReport r = convert(o);
  EXPECT_EQ(r.layers_converted, 3);
  EXPECT_EQ(r.reclaimed.size(), 3u);  // the MTP-only shard feeds nothing, so nothing spends it
  check_container(d / "out", d / "src");
  expect_trunk_bytes_rederived(d / "out", d / "src");
  expect_k2_container_matches_reference(d / "out");
  EXPECT_TRUE(test::read_file(d / "out" / "tokenizer.model") ==
              test::read_file(d / "src" / "tiktoken.model"));
  EXPECT_TRUE(fs::exists(d / "out" / "specials.json"));
  std::string m = test::read_file(d / "out" / "manifest.json");
  EXPECT_NE(m.find("\"num_experts\":16"), std::string::npos);
  EXPECT_NE(m.find("\"num_experts_per_token\":4"), std::string::npos);
  EXPECT_NE(m.find("\"num_shared_experts\":1"), std::string::npos);
  EXPECT_NE(m.find("\"moe_renormalize\":true"), std::string::npos);
  EXPECT_NE(m.find("model.layers.1.block_sparse_moe.gate.e_score_correction_bias"),
            std::string::npos);
  EXPECT_NE(m.find("model.layers.1.block_sparse_moe.shared_experts.down_proj.weight"),
            std::string::npos);
  EXPECT_NE(m.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos);
}

TEST_F(ConvertTest, K2ThinkingInt4ExpertsConvertExactlyAndMatchTheReference) {
  test::TempDir d;
  write_checkpoint(d / "src", k2_shape(K2Weights::kInt4));
  EXPECT_EQ(expect_int4_exact(d / "src"), 3 * 16 * 3);
  ConvertOptions o = quick(d / "src", d / "out");
  o.arch = "deepseek-v3";  // named rather than detected: the same container
  ConvertReport r = convert(o);
  EXPECT_EQ(r.layers_converted, 3);
  check_container(d / "out", d / "src");
  expect_trunk_bytes_rederived(d / "out", d / "src");
  expect_k2_container_matches_reference(d / "out");
}

// compressed-tensors writes weight_shape as I64 (the synthetic release does too); I32 reads the
// same.
TEST_F(ConvertTest, Int4WeightShapeMayBeI32) {
  test::TempDir d;
  CheckpointShape shape = k2_shape(K2Weights::kInt4);
  shape.int4_shape_i32 = true;
  write_checkpoint(d / "src", shape);
  const std::string t = "model.layers.1.mlp.experts.0.gate_proj.weight_shape";
  EXPECT_EQ(SafetensorsFile(d / "src" / release_shard(d / "src", t)).find(t)->dtype, Dtype::kI32);
  EXPECT_EQ(expect_int4_exact(d / "src"), 144);
}

TEST_F(ConvertTest, K2BadInputsAreRefusedNamingTheProblem) {
  test::TempDir d;
  write_checkpoint(d / "fp8", k2_shape(K2Weights::kFp8));
  write_checkpoint(d / "int4", k2_shape(K2Weights::kInt4));
  auto k2_refusal = [](const fs::path& p) {
    std::string e = convert_error(p);
    std::printf("  %s: %s\n", p.filename().c_str(), e.c_str());
    return e;
  };
  auto fresh = [&](const char* from, const char* name) {
    fs::path p = d / name;
    fs::copy(d / from, p);
    return p;
  };
  auto edit_config = [](const fs::path& p, const std::string& from, const std::string& to) {
    std::string cfg = test::read_file(p / "config.json");
    size_t at = cfg.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    cfg.replace(at, from.size(), to);
    test::write_file(p / "config.json", cfg);
  };
  {  // fp8 weights without weight_block_size: the tile is never guessed
    fs::path p = fresh("fp8", "no-tile");
    edit_config(p, ",\"weight_block_size\":[32,48]", "");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("quantization_config.weight_block_size is missing"), std::string::npos) << e;
  }
  {  // a tile the scales do not fit: 16 rows a tile would need twice the scale rows
    fs::path p = fresh("fp8", "tile");
    edit_config(p, "\"weight_block_size\":[32,48]", "\"weight_block_size\":[16,48]");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("_scale_inv: shape"), std::string::npos) << e;
    EXPECT_NE(e.find("weight_block_size [16, 48]"), std::string::npos) << e;
  }
  {  // a NaN code (S.1111.111) in an expert: refused naming the tensor, row and column
    fs::path p = fresh("fp8", "nan");
    const std::string t = "model.layers.2.mlp.experts.3.up_proj.weight";
    fs::path shard = p / release_shard(p, t);
    SafetensorsFile f(shard);
    uint64_t at = 8 + f.header_json().size() + f.find(t)->begin + 5 * 128 + 7;
    std::string b = test::read_file(shard);
    b[at] = (char)0xff;
    test::write_file(shard, b);
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find(t), std::string::npos) << e;
    EXPECT_NE(e.find("row 5, column 7"), std::string::npos) << e;
    EXPECT_NE(e.find("NaN"), std::string::npos) << e;
  }
  {  // an fp8 weight whose scales are not in the index
    fs::path p = fresh("fp8", "no-scale");
    std::string idx = test::read_file(p / "model.safetensors.index.json");
    const std::string t = "\"model.layers.1.self_attn.o_proj.weight_scale_inv\":";
    size_t at = idx.find(t);
    ASSERT_NE(at, std::string::npos);
    idx.erase(at, idx.find(',', at) - at + 1);
    test::write_file(p / "model.safetensors.index.json", idx);
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("model.layers.1.self_attn.o_proj.weight"), std::string::npos) << e;
    EXPECT_NE(e.find("_scale_inv"), std::string::npos) << e;
  }
  {  // int4 with a group size the scales do not fit
    fs::path p = fresh("int4", "group");
    edit_config(p, "\"group_size\":32", "\"group_size\":64");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("pack-quantized shapes"), std::string::npos) << e;
    EXPECT_NE(e.find("experts.0.gate_proj.weight_packed"), std::string::npos) << e;
  }
  {  // int4 described as 8-bit: refused naming the field
    fs::path p = fresh("int4", "bits");
    edit_config(p, "\"num_bits\":4", "\"num_bits\":8");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("config_groups.group_0.weights.num_bits"), std::string::npos) << e;
  }
  {  // a weight_shape that disagrees with the packed data
    fs::path p = fresh("int4", "shape");
    const std::string t = "model.layers.3.mlp.experts.9.down_proj.weight_shape";
    fs::path shard = p / release_shard(p, t);
    SafetensorsFile f(shard);
    uint64_t at = 8 + f.header_json().size() + f.find(t)->begin;
    std::string b = test::read_file(shard);
    int32_t rows = 64;
    std::memcpy(&b[at], &rows, 4);
    test::write_file(shard, b);
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find(t), std::string::npos) << e;
    EXPECT_NE(e.find("records [64, 32]"), std::string::npos) << e;
  }
  {  // a negative weight_shape (I64, as compressed-tensors writes it)
    fs::path p = fresh("int4", "negative-shape");
    const std::string t = "model.layers.3.mlp.experts.9.down_proj.weight_shape";
    fs::path shard = p / release_shard(p, t);
    SafetensorsFile f(shard);
    ASSERT_EQ(f.find(t)->dtype, Dtype::kI64);
    uint64_t at = 8 + f.header_json().size() + f.find(t)->begin;
    std::string b = test::read_file(shard);
    int64_t rows = -128;
    std::memcpy(&b[at], &rows, 8);
    test::write_file(shard, b);
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find(t), std::string::npos) << e;
    EXPECT_NE(e.find("records [-128, 32], a negative size"), std::string::npos) << e;
  }
  {  // a config with one layer too few: layer 3 becomes the prediction layer, layer 4 is refused
    fs::path p = fresh("fp8", "few-layers");
    edit_config(p, "\"num_hidden_layers\":4", "\"num_hidden_layers\":3");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("model.layers.4."), std::string::npos) << e;
    EXPECT_NE(e.find("past num_hidden_layers (3) + num_nextn_predict_layers (1)"),
              std::string::npos)
        << e;
  }
  {  // without num_nextn_predict_layers the MTP layer is not skipped but refused
    fs::path p = fresh("fp8", "no-nextn");
    edit_config(p, ",\"num_nextn_predict_layers\":1", "");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("model.layers.4."), std::string::npos) << e;
    EXPECT_NE(e.find("num_nextn_predict_layers (0)"), std::string::npos) << e;
  }
  {  // int4 packed words without a pack-quantized config
    fs::path p = fresh("int4", "no-config");
    edit_config(p, "\"format\":\"pack-quantized\"", "\"format\":\"float-quantized\"");
    std::string e = k2_refusal(p);
    EXPECT_NE(e.find("does not describe compressed-tensors pack-quantized int4"), std::string::npos)
        << e;
  }
}

TEST_F(ConvertTest, TooFewTrainingVectorsIsRefused) {
  std::vector<float> x(100 * 8, 0.5f);
  VqRecipe r;
  EXPECT_THROW(train_books(x, r, 1, Isa::kScalar, nullptr, "layer 1 gate"), FormatError);
}

// Indices of every kernel for `xs` (whole groups of 8, dimension-major) against `book` (entry
// major, values as stored); each must equal the scalar kernel's. Returns the scalar indices.
std::vector<uint8_t> expect_kernels_agree(const std::vector<float>& book,
                                          const std::vector<float>& xs, const std::string& what) {
  const int E = (int)book.size() / 8;
  std::vector<float> norms((size_t)E);
  for (int c = 0; c < E; c++) {
    float a = 0;
    for (int d = 0; d < 8; d++) a = std::fma(book[c * 8 + d], book[c * 8 + d], a);
    norms[c] = a;
  }
  SearchBook sb = search_book(book.data(), norms.data(), E);
  const int64_t groups = (int64_t)xs.size() / 64;
  std::vector<uint8_t> ref((size_t)groups * 8);
  for (auto [name, k] : nearest_kernels()) {
    std::vector<uint8_t> got((size_t)groups * 8, 0xee);
    k(sb.view(), xs.data(), groups, got.data());
    if (k == detail::nearest_scalar)
      ref = got;
    else
      EXPECT_EQ(got, ref) << name << ", " << what;
  }
  return ref;
}

std::vector<float> stored_uniform(Rng& r, size_t n) {
  std::vector<float> v(n);
  for (float& x : v) x = f16_to_f32_flush(f32_to_f16(r.uniform(-1, 1)));
  return v;
}

TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnRandomData) {
  Rng r(3);
  for (int E : {256, 100, 64, 17, 1}) {
    std::vector<float> book = stored_uniform(r, (size_t)E * 8), xs(64 * 64);
    for (float& v : xs) v = r.uniform(-1, 1);
    expect_kernels_agree(book, xs, fmt::format("{} entries", E));
  }
}

TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnExactTies) {
  Rng r(4);
  // Duplicate entries: the copy (higher index) must never win.
  std::vector<float> book = stored_uniform(r, 256 * 8), xs(64 * 64);
  for (int c = 200; c < 256; c++) std::memcpy(&book[c * 8], &book[(c - 200) * 8], 32);
  for (float& v : xs) v = r.uniform(-1, 1);
  for (uint8_t i : expect_kernels_agree(book, xs, "duplicates")) EXPECT_LT(i, 200);
  // The 256 sign patterns of one vector share |c|^2 bit for bit, so a zero coordinate of x ties
  // the entries differing only there: ties across lanes, blocks and trackers, in shuffled order.
  std::vector<float> base = stored_uniform(r, 8), signs(256 * 8);
  for (int c = 0; c < 256; c++)
    for (int d = 0; d < 8; d++) signs[c * 8 + d] = (c >> d & 1) ? -base[d] : base[d];
  for (int c = 255; c > 0; c--) {
    int j = (int)r.below((uint32_t)c + 1);
    for (int d = 0; d < 8; d++) std::swap(signs[c * 8 + d], signs[j * 8 + d]);
  }
  for (int zeros : {8, 7, 5, 3, 1}) {
    for (size_t i = 0; i < xs.size(); i++)
      xs[i] = (int)(i / 8 % 8) < zeros ? 0.0f : r.uniform(-1, 1);
    std::vector<uint8_t> got = expect_kernels_agree(signs, xs, fmt::format("{} zero dims", zeros));
    if (zeros == 8) {
      for (uint8_t i : got) EXPECT_EQ(i, 0);  // everything ties: the first entry
    }
  }
}

// The VNNI kernels screen with 8-bit scores and a proven error bound; these inputs aim at the
// bound's edges. Each batch of 64 vectors shares one x step, so scale mixes within a batch matter.
TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnNearTies) {
  Rng r(5);
  // Entries one ulp apart in one dimension (up or down): distances equal or a few ulps apart.
  std::vector<float> book = stored_uniform(r, 256 * 8);
  for (int c = 128; c < 256; c++) {
    std::memcpy(&book[c * 8], &book[(c - 128) * 8], 32);
    float& v = book[c * 8 + c % 8];
    v = std::nextafter(v, c % 2 ? 2.0f : -2.0f);
  }
  std::vector<float> xs(64 * 64);
  for (float& v : xs) v = r.uniform(-1, 1);
  expect_kernels_agree(book, xs, "ulp neighbours, random x");
  // x on an entry and halfway between a pair: the smallest distances tie or nearly tie.
  for (size_t g = 0; g < xs.size() / 64; g++)
    for (int lane = 0; lane < 8; lane++) {
      int a = (int)r.below(128), b = (int)r.below(256);
      for (int d = 0; d < 8; d++)
        xs[g * 64 + d * 8 + lane] =
            lane % 2 ? book[a * 8 + d] : 0.5f * (book[a * 8 + d] + book[b * 8 + d]);
    }
  expect_kernels_agree(book, xs, "x on and between entries");
}

TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnExtremeScales) {
  Rng r(6);
  std::vector<float> unit = stored_uniform(r, 256 * 8), xs(64 * 64);
  for (float xscale : {0.0f, 1e-30f, 1e-15f, 1e-3f, 1.0f, 1e3f, 1e15f, 1e30f})
    for (float bscale : {1e-30f, 1e-12f, 1.0f, 1e12f, 1e30f}) {
      std::vector<float> book = unit;
      for (float& v : book) v *= bscale;
      for (float& v : xs) v = r.uniform(-1, 1) * xscale * bscale;
      expect_kernels_agree(book, xs, fmt::format("x {} book {}", xscale * bscale, bscale));
    }
  // One vector per batch dominates max |x|: the others get a coarse step.
  for (float big : {10.0f, 1e3f, 1e6f}) {
    for (float& v : xs) v = r.uniform(-1, 1);
    for (size_t g = 0; g < xs.size() / 512; g++) xs[g * 512 + 3 * 8 + 5] = big;
    expect_kernels_agree(unit, xs, fmt::format("one coordinate {}", big));
  }
  // A book with one huge entry: every other entry's step is coarse.
  std::vector<float> book = unit;
  book[77 * 8 + 2] = 1000.0f;
  for (float& v : xs) v = r.uniform(-1, 1);
  expect_kernels_agree(book, xs, "one huge entry");
}

TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnNonFiniteInput) {
  Rng r(7);
  std::vector<float> book = stored_uniform(r, 100 * 8), xs(64 * 64);
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
    for (float& v : xs) v = r.uniform(-1, 1);
    xs[5] = bad;           // first batch: one bad coordinate
    xs[64 * 9 + 8] = bad;  // second batch too, another vector and dimension
    expect_kernels_agree(book, xs, fmt::format("x holds {}", bad));
  }
  // A non-finite book entry: the screen is off for this book, the exact search decides.
  for (float& v : xs) v = r.uniform(-1, 1);
  book[3 * 8 + 1] = inf;
  expect_kernels_agree(book, xs, "book holds inf");
}

TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnManyRandomBatches) {
  Rng r(8);
  for (int E : {256, 255, 240, 33, 16, 2}) {
    std::vector<float> book = stored_uniform(r, (size_t)E * 8);
    for (int trial = 0; trial < 6; trial++) {
      // 40 batches of 64 vectors, each batch at its own scale, some mixing scales inside.
      std::vector<float> xs(40 * 512);
      for (size_t b = 0; b < 40; b++) {
        float scale = std::ldexp(1.0f, (int)r.below(16) - 12);
        for (size_t i = 0; i < 512; i++)
          xs[b * 512 + i] = r.uniform(-1, 1) * (b % 3 == 0 && i % 7 == 0 ? 1.0f : scale);
      }
      expect_kernels_agree(book, xs, fmt::format("{} entries, trial {}", E, trial));
    }
  }
}

// A Gaussian matrix as an expert holds, its rows normalized as the converter does, and books
// trained on them (scalar kernel, `iters` Lloyd iterations).
struct GaussianExpert {
  std::vector<float> w, x;
  KindBooks books;
};
GaussianExpert gaussian_expert(Rng& r, int64_t rows, int64_t cols, int iters) {
  GaussianExpert g;
  g.w.resize((size_t)(rows * cols));
  g.x.resize(g.w.size());
  std::vector<float> scale((size_t)rows);
  for (float& v : g.w) v = gauss(r) * 0.02f;
  normalize_rows(g.w.data(), rows, cols, g.x.data(), scale.data());
  VqRecipe rec;
  rec.iters = iters;
  g.books = train_books(g.x, rec, 1, Isa::kScalar, nullptr, "test");
  return g;
}

// Real books: train_books on Gaussian rows (normalized as the converter does), then each stage's
// kernels against the residuals the scalar indices leave.
TEST_F(ConvertTest, SearchKernelsAgreeWithScalarOnTrainedBooksAndResiduals) {
  Rng r(9);
  const int64_t rows = 256, cols = 256, n = rows * cols / 8;
  GaussianExpert g = gaussian_expert(r, rows, cols, 4);
  const KindBooks& kb = g.books;
  std::vector<float> res = g.x, xs((size_t)n * 8);
  for (int s = 0; s < kb.stages; s++) {
    for (int64_t i = 0; i < n; i++)  // to groups of 8, dimension-major
      for (int d = 0; d < 8; d++)
        xs[(size_t)((i / 8) * 64 + d * 8 + i % 8)] = res[(size_t)(i * 8 + d)];
    std::vector<float> book(kb.book(s), kb.book(s) + kb.entries * 8);
    std::vector<uint8_t> idx = expect_kernels_agree(book, xs, fmt::format("stage {}", s));
    for (int64_t i = 0; i < n; i++)
      for (int d = 0; d < 8; d++) res[(size_t)(i * 8 + d)] -= book[idx[(size_t)i] * 8 + d];
  }
}

// Every instruction-set tile work must give the portable results bit for bit: the same float and
// double operations per element in the same order (no fused multiply-adds), whatever the values.
TEST_F(ConvertTest, TileOpsAgreeWithPortable) {
  const std::vector<NamedTileOps> variants = tile_ops_variants();
  if (variants.size() < 2) GTEST_SKIP() << "this CPU runs only the portable tile work";
  const TileOps ref = variants[0].ops;
  for (size_t k = 1; k < variants.size(); k++) {
    SCOPED_TRACE(variants[k].name);
    const TileOps avx = variants[k].ops;
    Rng r(10);
    const int64_t cols = 40;
    std::vector<float> w(64 * cols), amax(64), s16(64), book = stored_uniform(r, 256 * 8);
    std::vector<float> norms(256, 1.0f);
    for (float& v : w) v = gauss(r) * std::ldexp(1.0f, (int)r.below(60) - 30);
    const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -0.0f, 1e-41f, 3e38f};
    for (size_t i = 0; i < std::size(specials); i++)
      w[(size_t)r.below((uint32_t)w.size())] = specials[i];
    for (float& v : amax) v = std::ldexp(r.uniform(0.5f, 1.0f), (int)r.below(40) - 20);
    amax[7] = 1e-8f;
    for (float& v : s16) v = f16_to_f32(f32_to_f16(r.uniform(1e-4f, 2.0f)));
    auto same = [](const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; };
    for (int E : {256, 100, 16}) {
      SearchBook sb = search_book(book.data(), norms.data(), E);
      for (int64_t n : {64, 63, 17, 8, 1}) {
        const int64_t off = (int64_t)r.below(4) * 8;  // a vector position inside the rows
        std::vector<float> a(kTileFloats, 7.0f), b(kTileFloats, -7.0f);
        ref.load(w.data() + off, cols, n, amax.data(), a.data());
        avx.load(w.data() + off, cols, n, amax.data(), b.data());
        EXPECT_TRUE(same(a.data(), b.data(), a.size() * 4)) << "load, n " << n;
        std::vector<uint8_t> ids(64);
        for (uint8_t& i : ids) i = (uint8_t)r.below((uint32_t)E);
        std::vector<float> sa(kTileFloats), sbv;
        for (float& v : sa) v = r.uniform(-2, 2);
        sbv = sa;
        std::vector<float> a2 = a;
        ref.apply(sb.view(), ids.data(), a.data(), sa.data());
        avx.apply(sb.view(), ids.data(), a2.data(), sbv.data());
        EXPECT_TRUE(same(a.data(), a2.data(), a.size() * 4))
            << "apply residual, " << E << " entries";
        EXPECT_TRUE(same(sa.data(), sbv.data(), sa.size() * 4)) << "apply sum, " << E << " entries";
        TileError ea, eb;
        for (int d = 0; d < 8; d++) ea.err2[d] = eb.err2[d] = 0.1 * d, ea.ref2[d] = eb.ref2[d] = d;
        ref.add_error(w.data() + off, cols, n, s16.data(), sa.data(), &ea);
        avx.add_error(w.data() + off, cols, n, s16.data(), sa.data(), &eb);
        EXPECT_TRUE(same(ea.err2, eb.err2, sizeof ea.err2)) << "error sums, n " << n;
        EXPECT_TRUE(same(ea.ref2, eb.ref2, sizeof ea.ref2)) << "reference sums, n " << n;
      }
    }
    // Whole encodes: the same bytes and the same error report with either tile work.
    const int64_t rows = 100, wc = 64;
    GaussianExpert g = gaussian_expert(r, rows, wc, 2);
    const std::vector<float>& m = g.w;
    const KindBooks& kb = g.books;
    const size_t nidx = 128 * wc / 8 * 3;
    std::vector<uint8_t> ia(nidx), ib(nidx);
    std::vector<uint16_t> ca((size_t)rows), cb((size_t)rows);
    EncodeError fa =
        encode_matrix(m.data(), rows, wc, kb, detail::nearest_scalar, ref, ia.data(), ca.data());
    EncodeError fb =
        encode_matrix(m.data(), rows, wc, kb, detail::nearest_scalar, avx, ib.data(), cb.data());
    EXPECT_EQ(ia, ib);
    EXPECT_EQ(ca, cb);
    EXPECT_EQ(fa.err2, fb.err2);
    EXPECT_EQ(fa.ref2, fb.ref2);
    EXPECT_GT(fa.relative(), 0.05);  // a real encode, not an empty one
    EXPECT_LT(fa.relative(), 0.5);
  }
}

// WASTE_CONVERT_BENCH=1: encode throughput at Kimi-Linear expert shape, and the error of the
// full recipe on Gaussian BF16 and MXFP4-quantized experts of that shape.
TEST(ConvertBench, EncodeThroughputAndError) {
  if (!std::getenv("WASTE_CONVERT_BENCH")) GTEST_SKIP() << "set WASTE_CONVERT_BENCH=1";
  const int64_t M = 1024, N = 2304;
  Rng r(11);
  auto matrix = [&](bool mx) {
    std::vector<float> w((size_t)(M * N));
    for (float& x : w) x = gauss(r) * 0.02f;
    if (mx) {
      std::vector<uint8_t> p((size_t)N / 2), s((size_t)N / 32);
      for (int64_t row = 0; row < M; row++) {
        mxfp4_encode_row(&w[(size_t)(row * N)], N, p.data(), s.data());
        mxfp4_decode_row(p.data(), s.data(), N, &w[(size_t)(row * N)], "bench", row);
      }
    }
    return w;
  };
  for (bool mx : {false, true}) {
    VqRecipe rec;
    // 12 experts' worth of training data, 25,000 vectors each, as the original.
    std::vector<float> train;
    std::vector<std::vector<float>> experts;
    for (int e = 0; e < 12; e++) {
      experts.push_back(matrix(mx));
      std::vector<float> x(experts.back().size()), sc(M);
      normalize_rows(experts.back().data(), M, N, x.data(), sc.data());
      Rng pick(derive_seed(0, 1, (uint64_t)e, 0));
      for (uint32_t i : sample_ids((uint64_t)(M * N / 8), 25000, pick))
        train.insert(train.end(), &x[(size_t)i * 8], &x[(size_t)i * 8 + 8]);
    }
    ThreadPool pool(0);
    auto t0 = SteadyClock::now();
    KindBooks b = train_books(train, rec, 1, detect_isa(), &pool, "bench");
    double train_s = seconds_since(t0);
    std::vector<uint8_t> idx((size_t)(M * N / 8 * 3));
    std::vector<uint16_t> sc(M);
    std::vector<double> errs;
    // WASTE_VQ_KERNEL=scalar|avx2|avx512|avxvnni|vnni picks the encode kernel (training keeps
    // the best one: the books are the same either way); unset: what the converter would use.
    const char* forced = std::getenv("WASTE_VQ_KERNEL");
    const char* kname = forced ? forced : "default";
    NearestFn k = nearest_kernel(detect_isa());
    const TileOps tile = tile_ops(detect_isa());
    if (forced) {
      auto ks = nearest_kernels();
      auto it = std::find_if(ks.begin(), ks.end(),
                             [&](const NearestKernel& p) { return std::string(p.name) == forced; });
      if (it == ks.end()) GTEST_SKIP() << "WASTE_VQ_KERNEL=" << forced << " cannot run here";
      k = it->fn;
    }
    t0 = SteadyClock::now();
    for (auto& w : experts)
      errs.push_back(encode_matrix(w.data(), M, N, b, k, tile, idx.data(), sc.data()).relative());
    double enc_s = seconds_since(t0);
    std::sort(errs.begin(), errs.end());
    double vps = 12.0 * M * N / 8 / enc_s;
    std::printf(
        "%s experts [%ld x %ld], %s: train %.2f s (%d threads), encode %.3g vectors/s on one "
        "core (%.3f ns per entry-eval), error median %.2f%% (min %.2f, max %.2f)\n",
        mx ? "MXFP4" : "BF16 Gaussian", (long)M, (long)N, kname, train_s, pool.size(), vps,
        1e9 / (vps * 768), 100 * errs[6], 100 * errs.front(), 100 * errs.back());
    std::printf("  K3 projection: 3.403e11 vectors / (%.3g x 16 cores) = %.0f min of encode\n", vps,
                3.403e11 / (vps * 16) / 60);
  }
}

// WASTE_CONVERT_BENCH=1: the converter end to end on K3-shaped MoE layers (real expert shape
// 3072 x 3584 in MXFP4, the real recipe), jobs 1 and 2. The expert phase (reading and decoding the
// shards, encoding, writing the bank) is timed between the step hooks around it; training and
// the trunk are reported apart, as their share of a real K3 run is far smaller than here.
TEST(ConvertBench, K3ShapedLayersEndToEnd) {
  if (!std::getenv("WASTE_CONVERT_BENCH")) GTEST_SKIP() << "set WASTE_CONVERT_BENCH=1";
  test::TempDir d;
  CheckpointShape s = k3_shape();
  s.hidden = 7168;
  s.latent = 3584;
  s.moe_inter = 3072;
  s.layers = 4;  // the test config's attention layout needs four; layers 1-3 are MoE
  s.experts = 4;
  write_checkpoint(d / "src", s);
  const double vectors = 3.0 * s.experts * 3 * s.moe_inter * s.latent / 8;
  for (int jobs : {1, 2}) {
    ConvertOptions o;
    o.src = d / "src";
    o.out = d / fmt::format("out{}", jobs);
    o.jobs = jobs;
    o.progress = false;
    o.log = [](const std::string&) {};
    // A layer trains its books, commits them ("codebooks part"), encodes every expert, then
    // commits the bank ("bank"): the expert phase is the time between those two.
    double trunk_s = 0, train_s = 0, experts_s = 0, mark = 0;
    std::mutex mu;
    auto t0 = SteadyClock::now();
    o.step_hook = [&](const char* step) {
      std::lock_guard<std::mutex> lock(mu);
      double t = seconds_since(t0);
      std::string_view st(step);
      if (st == "trunk.done") trunk_s = t, mark = t;
      if (st == "codebooks part") train_s += t - mark, mark = t;
      if (st == "bank") experts_s += t - mark;
      if (st == "layer.done") mark = t;
    };
    ConvertReport rep = convert(o);
    const double rate = vectors / experts_s / jobs;
    std::printf(
        "K3-shaped MoE layers, 3 x %d experts [3072 x 3584] MXFP4, jobs %d: trunk %.1f s, "
        "training %.1f s, expert phase %.2f s = %.3g vectors/s per thread (read, decode, encode, "
        "write), total %.1f s, error median %.2f%%\n",
        s.experts, jobs, trunk_s, train_s, experts_s, rate, rep.seconds, 100 * rep.median_error);
    std::printf("  K3 expert phase: 3.403e11 / (%.3g x 16 cores) = %.0f min\n", rate,
                3.403e11 / (rate * 16) / 60);
  }
}

}  // namespace
}  // namespace waste
