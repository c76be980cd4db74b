// The vision tower against the independent float64 numpy reference (scripts/reference/
// vision_ref.py) on the synthetic K3 tower, plus its guarantees: thread count never changes a bit,
// bad vision.json values are named, no vision.json means no images, and the text path never
// loads the tower.
//
// Relative error here is max_i |ours_i - ref_i| / max_i |ref_i| over the whole output.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/base/rng.h"
#include "engine/format/container.h"
#include "engine/kernels/quantize.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "engine/vision/vision_config.h"
#include "engine/vision/vision_tower.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

constexpr int kPatchValues = 3 * 14 * 14;

// Normalised pixels lie in [-1, 1].
std::vector<float> random_patches(int gh, int gw, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> p((size_t)gh * gw * kPatchValues);
  for (float& v : p) v = rng.uniform(-1.0f, 1.0f);
  return p;
}

// Runs scripts/reference/vision_ref.py on the same patches.
std::vector<double> run_reference(const fs::path& model, int gh, int gw,
                                  const std::vector<float>& patches) {
  test::TempDir d;
  test::write_file(d / "p.f32",
                   std::string((const char*)patches.data(), patches.size() * sizeof(float)));
  std::string cmd =
      fmt::format("/usr/bin/python3 {} {} --grid {} {} --patches {} --out {}",
                  (test::source_dir() / "scripts/reference/vision_ref.py").string(), model.string(),
                  gh, gw, (d / "p.f32").string(), (d / "out.f64").string());
  std::string out;
  int rc = test::run_command(cmd, &out);
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return {};
  std::string raw = test::read_file(d / "out.f64");
  std::vector<double> r(raw.size() / 8);
  std::memcpy(r.data(), raw.data(), raw.size());
  return r;
}

class VisionTowerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(model(), {Arch::kK3, "tiny", 11});
    container_ = Container::open(model()).release();
    tower_ = VisionTower::load(*container_).release();
  }
  static void TearDownTestSuite() {
    delete tower_;
    delete container_;
    delete dir_;
  }
  static fs::path model() { return dir_->path() / "k3"; }

  static std::vector<float> encode(int gh, int gw, int threads, uint64_t seed = 7) {
    ThreadPool pool(threads);
    std::vector<float> p = random_patches(gh, gw, seed);
    return tower_->encode(p.data(), gh, gw, pool);
  }

  static test::TempDir* dir_;
  static Container* container_;
  static VisionTower* tower_;
};
test::TempDir* VisionTowerTest::dir_ = nullptr;
Container* VisionTowerTest::container_ = nullptr;
VisionTower* VisionTowerTest::tower_ = nullptr;

TEST_F(VisionTowerTest, SyntheticTowerHasTheReleaseStructure) {
  const VisionConfig& v = tower_->config();
  EXPECT_EQ(v.hidden, 64);
  EXPECT_EQ(v.heads, 3);
  EXPECT_EQ(v.qkv_hidden, 96);  // wider than the hidden: wo is not square, as in the release
  EXPECT_EQ(v.layers, 2);
  EXPECT_EQ(v.pos_h, 8);
  EXPECT_EQ(v.text_hidden, container_->config().hidden);
  const TrunkEntry* wqkv = nullptr;
  for (const TrunkEntry& t : container_->manifest().trunk)
    if (t.name == "vision_tower.encoder.blocks.1.wqkv.weight") wqkv = &t;
  ASSERT_NE(wqkv, nullptr);
  EXPECT_EQ(wqkv->fmt, TensorFormat::kQ8G);
  EXPECT_EQ(wqkv->shape, (std::vector<int64_t>{288, 64}));
  int64_t stored = 0;
  for (const TrunkEntry& t : container_->manifest().trunk)
    if (t.name.rfind("vision_tower.", 0) == 0 || t.name.rfind("mm_projector.", 0) == 0)
      stored += (int64_t)t.bytes;
  EXPECT_EQ(tower_->resident_bytes(), stored + 8 * 8 * 64 * 4);  // + the f32 position table
}

// Grids: the minimum, both axes off the 8x8 table in each direction, the table's own size
// (interpolation is the identity), larger than the table on both sides, and skinny.
TEST_F(VisionTowerTest, MatchesTheFloat64Reference) {
  const std::pair<int, int> grids[] = {{2, 2}, {4, 6}, {6, 4}, {8, 8}, {12, 10}, {2, 18}, {10, 4}};
  for (auto [gh, gw] : grids) {
    std::vector<float> patches = random_patches(gh, gw, 100 + gh * 31 + gw);
    ThreadPool pool(2);
    std::vector<float> ours = tower_->encode(patches.data(), gh, gw, pool);
    std::vector<double> ref = run_reference(model(), gh, gw, patches);
    ASSERT_EQ(ours.size(), (size_t)VisionTower::tokens_for(gh, gw) * tower_->config().text_hidden);
    ASSERT_EQ(ref.size(), ours.size()) << gh << "x" << gw;
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < ours.size(); i++) {
      max_diff = std::max(max_diff, std::fabs(ours[i] - ref[i]));
      max_abs = std::max(max_abs, std::fabs(ref[i]));
    }
    EXPECT_GT(max_abs, 0.5) << gh << "x" << gw;  // real signal, not a zero tower
    EXPECT_LE(max_diff / max_abs, 1e-4) << gh << "x" << gw;
    std::printf("grid %2dx%-2d  %3zu rows  relative error %.2e\n", gh, gw,
                ours.size() / tower_->config().text_hidden, max_diff / max_abs);
  }
}

TEST_F(VisionTowerTest, ThreadCountNeverChangesABit) {
  for (auto [gh, gw] : {std::pair{6, 4}, std::pair{12, 10}}) {
    std::vector<float> one = encode(gh, gw, 1);
    EXPECT_EQ(encode(gh, gw, 2), one) << gh << "x" << gw;
    EXPECT_EQ(encode(gh, gw, 3), one) << gh << "x" << gw;
  }
}

TEST_F(VisionTowerTest, DifferentImagesGiveDifferentRows) {
  EXPECT_NE(encode(4, 4, 1, 1), encode(4, 4, 1, 2));
}

TEST_F(VisionTowerTest, BadGridsAreRefused) {
  ThreadPool pool(1);
  std::vector<float> p = random_patches(2, 514, 1);
  for (auto [gh, gw] : {std::pair{3, 4}, std::pair{4, 0}, std::pair{0, 2}, std::pair{2, 514}}) {
    try {
      tower_->encode(p.data(), gh, gw, pool);
      ADD_FAILURE() << "accepted " << gh << "x" << gw;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("must be even"), std::string::npos) << e.what();
    }
  }
}

// --- vision.json

std::string good_vision_json(int text_hidden, int placeholder) {
  return fmt::format(
      "{{\"vt_hidden_size\":64,\"vt_num_attention_heads\":3,\"qkv_hidden_size\":96,"
      "\"vt_intermediate_size\":128,\"vt_num_hidden_layers\":2,\"init_pos_emb_height\":8,"
      "\"init_pos_emb_width\":8,\"text_hidden_size\":{},\"patch_size\":14,"
      "\"media_placeholder_token_id\":{},\"max_patches\":1024,"
      "\"image_mean\":[0.5,0.5,0.5],\"image_std\":[0.5,0.5,0.5]}}",
      text_hidden, placeholder);
}

TEST_F(VisionTowerTest, VisionJsonDefaultsAreTheRelease) {
  ModelConfig lm = container_->config();
  lm.vocab = 200000;  // room for the release's placeholder id
  VisionConfig v =
      parse_vision_config(fmt::format("{{\"text_hidden_size\":{}}}", lm.hidden), "vision.json", lm);
  EXPECT_EQ(v.hidden, 1024);
  EXPECT_EQ(v.heads, 12);
  EXPECT_EQ(v.qkv_hidden, 1536);
  EXPECT_EQ(v.head_dim(), 128);
  EXPECT_EQ(v.intermediate, 4096);
  EXPECT_EQ(v.layers, 27);
  EXPECT_EQ(v.pos_h, 64);
  EXPECT_EQ(v.pos_w, 64);
  EXPECT_EQ(v.max_patches, 1024);
  EXPECT_EQ(v.image_mean[2], 0.5f);
  EXPECT_EQ(v.image_std[0], 0.5f);
  EXPECT_EQ(v.placeholder_id, 163605);
  // The synthetic container's own file agrees with its tokenizer.
  EXPECT_EQ(tower_->config().placeholder_id, container_->config().vocab - 256 + 21);
}

TEST_F(VisionTowerTest, BadVisionJsonValuesAreNamed) {
  ModelConfig lm = container_->config();
  const int H = lm.hidden, id = lm.vocab - 235;
  std::string good = good_vision_json(H, id);
  EXPECT_NO_THROW(parse_vision_config(good, "vision.json", lm));
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  const std::pair<std::string, std::string> cases[] = {
      {replace(fmt::format("\"text_hidden_size\":{}", H), "\"text_hidden_size\":7168"),
       "text_hidden_size: 7168 does not match the language model's hidden_size"},
      {replace(fmt::format("\"text_hidden_size\":{},", H), ""), "text_hidden_size: missing"},
      {replace("\"patch_size\":14", "\"patch_size\":16"), "patch_size: 16 is not supported"},
      {replace(fmt::format("\"media_placeholder_token_id\":{}", id),
               fmt::format("\"media_placeholder_token_id\":{}", lm.vocab)),
       "media_placeholder_token_id: " + std::to_string(lm.vocab) + " is not a token id"},
      {replace(fmt::format("\"media_placeholder_token_id\":{}", id),
               "\"media_placeholder_token_id\":-1"),
       "media_placeholder_token_id: -1 is out of range"},
      {replace("\"max_patches\":1024", "\"max_patches\":3"), "max_patches: 3 is out of range"},
      {replace("\"max_patches\":1024", "\"max_patches\":2000000"),
       "max_patches: 2000000 is out of range"},
      {replace("\"max_patches\":1024", "\"max_patches\":65537"),  // over what the encoder takes
       "max_patches: 65537 is out of range"},
      {replace("\"image_std\":[0.5,0.5,0.5]", "\"image_std\":[0.5,0,0.5]"),
       "image_std[1]: must be greater than 0"},
      {replace("\"image_std\":[0.5,0.5,0.5]", "\"image_std\":[0.5,-1,0.5]"),
       "image_std[1]: must be greater than 0"},
      {replace("\"image_mean\":[0.5,0.5,0.5]", "\"image_mean\":[0.5,0.5]"),
       "image_mean: must hold 3 numbers"},
      {replace("\"image_mean\":[0.5,0.5,0.5]", "\"image_mean\":[0.5,\"x\",0.5]"),
       "image_mean[1]: must be a number"},
      {replace("\"image_mean\":[0.5,0.5,0.5]", "\"image_mean\":[0.5,1e300,0.5]"),
       "image_mean[1]: must be finite and within"},
      {replace("\"qkv_hidden_size\":96", "\"qkv_hidden_size\":100"),
       "qkv_hidden_size: 100 is not a multiple of vt_num_attention_heads"},
      {replace("\"qkv_hidden_size\":96", "\"qkv_hidden_size\":30"),
       "must be a multiple of 4 (2D rotary pairs)"},
      {replace("\"vt_hidden_size\":64", "\"vt_hidden_size\":0"), "vt_hidden_size: 0 is out of"},
      {replace("\"max_patches\":1024",
               "\"max_patches\":1024,\"pos_emb_interpolation_mode\":"
               "\"bicubic\""),
       "pos_emb_interpolation_mode: 'bicubic' is not supported"},
      {replace("\"max_patches\":1024", "\"max_patches\":1024,\"merge_kernel_size\":[2,4]"),
       "merge_kernel_size[]: 4 is out of range"},
      {"{\"text_hidden_size\":", "not valid JSON"},
      {"[1, 2]", "must be a JSON object"},
  };
  for (const auto& [text, fragment] : cases) {
    try {
      parse_vision_config(text, "vision.json", lm);
      ADD_FAILURE() << "accepted " << text;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)
          << e.what() << "\n  wanted: " << fragment;
      EXPECT_EQ(std::string(e.what()).rfind("vision.json", 0), 0u) << e.what();
    }
  }
}

TEST(VisionTowerContainer, WithoutVisionJsonImagesAreUnsupported) {
  test::TempDir d;
  write_synthetic(d / "kl", {Arch::kKimiLinear, "tiny", 3});
  write_synthetic(d / "k3", {Arch::kK3, "tiny", 3});
  fs::remove(d / "k3" / "vision.json");
  for (const char* name : {"kl", "k3"}) {
    auto c = Container::open(d / name);
    EXPECT_FALSE(c->vision_json().has_value());
    try {
      VisionTower::load(*c);
      ADD_FAILURE() << name << ": a tower without vision.json";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("images are not supported"), std::string::npos)
          << e.what();
    }
  }
}

// The tower is read only by VisionTower::load: a container whose vision.json is unusable and
// whose tower bytes are garbage still opens and runs text exactly as before.
TEST(VisionTowerContainer, TheTextPathNeverLoadsTheTower) {
  test::TempDir d;
  write_synthetic(d / "k3", {Arch::kK3, "tiny", 5});
  auto text_logits = [&] {
    auto c = Container::open(d / "k3");
    Model m(*c);
    Session s = m.new_session(16);
    std::vector<float> l(c->config().vocab);
    std::vector<int32_t> ids = {5, 17, 99, 3};
    m.forward(s, ids, l.data());
    return l;
  };
  std::vector<float> before = text_logits();

  auto c = Container::open(d / "k3");
  uint64_t first_vision = UINT64_MAX, text_end = 0;
  for (const TrunkEntry& t : c->manifest().trunk) {
    bool vision = t.name.rfind("vision_tower.", 0) == 0 || t.name.rfind("mm_projector.", 0) == 0;
    uint64_t end = std::max(t.off + t.payload_bytes(), t.scale_off + t.scale_bytes());
    if (vision) {
      first_vision = std::min(first_vision, t.off);
      EXPECT_FALSE(c->has(t.name)) << t.name;
    } else {
      text_end = std::max(text_end, end);
    }
  }
  ASSERT_NE(first_vision, UINT64_MAX);
  EXPECT_LE(text_end, first_vision);  // the tower sits after the text tensors
  c.reset();

  std::string trunk = test::read_file(d / "k3" / "trunk.bin");
  for (size_t i = first_vision; i < trunk.size(); i++) trunk[i] = (char)0x7f;
  test::write_file(d / "k3" / "trunk.bin", trunk);
  test::write_file(d / "k3" / "vision.json", "{\"patch_size\": 16}");
  EXPECT_EQ(text_logits(), before);
  auto again = Container::open(d / "k3");
  EXPECT_THROW(VisionTower::load(*again), FormatError);
}

TEST(VisionTowerContainer, MissingOrMisshapenTensorsAreNamed) {
  test::TempDir d;
  write_synthetic(d / "k3", {Arch::kK3, "tiny", 5});
  std::string manifest = test::read_file(d / "k3" / "manifest.json");
  auto expect_refused = [&](const std::string& edited, const char* fragment) {
    test::write_file(d / "k3" / "manifest.json", edited);
    auto c = Container::open(d / "k3");
    try {
      VisionTower::load(*c);
      ADD_FAILURE() << "loaded; wanted " << fragment;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  std::string renamed = manifest;
  const std::string fc1 = "vision_tower.encoder.blocks.1.mlp.fc1.weight";
  renamed.replace(renamed.find(fc1), fc1.size(), "vision_tower.encoder.blocks.1.mlp.fcX.weight");
  expect_refused(renamed, "vision tensor vision_tower.encoder.blocks.1.mlp.fc1.weight is missing");
  std::string vision = test::read_file(d / "k3" / "vision.json");
  std::string wider = vision;
  wider.replace(wider.find("\"vt_intermediate_size\":128"), 26, "\"vt_intermediate_size\":256");
  test::write_file(d / "k3" / "vision.json", wider);
  expect_refused(manifest, "mlp.fc0.weight has shape [128, 64], expected [256, 64]");
}

// --- closed forms (docs/VISION.md §9)

TEST(VisionTowerMath, BilinearResizeOfTwoSamplesToFour) {
  const float table[2] = {1.0f, 5.0f};  // a 1 x 2 table of width-1 vectors
  std::vector<float> out = resize_pos_table(table, 1, 2, 1, 1, 4);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 0.75f * 1 + 0.25f * 5);
  EXPECT_FLOAT_EQ(out[2], 0.25f * 1 + 0.75f * 5);
  EXPECT_FLOAT_EQ(out[3], 5.0f);
  std::vector<float> same = resize_pos_table(table, 1, 2, 1, 1, 2);
  EXPECT_EQ(same, (std::vector<float>{1.0f, 5.0f}));
}

TEST(VisionTowerMath, RopeTurnsColumnsOnEvenPairsAndRowsOnOddPairs) {
  const int hd = 32, gh = 5, gw = 7;
  RopeTable t = rope_table(gh, gw, hd);
  auto at = [&](int row, int col, std::vector<float> v) {
    int64_t p = (int64_t)row * gw + col;
    apply_rope(v.data(), &t.cos[p * t.pairs], &t.sin[p * t.pairs], t.pairs);
    return v;
  };
  std::vector<float> ones(hd, 1.0f);
  EXPECT_EQ(at(0, 0, ones), ones);  // position (0, 0) is the identity
  for (int i : {0, 3, 7}) {
    double theta = std::pow(10000.0, -4.0 * i / hd);
    std::vector<float> u(hd, 0.0f);
    u[4 * i] = 1.0f;  // dims 4i, 4i+1 turn with the column
    std::vector<float> r = at(3, 5, u);
    EXPECT_NEAR(r[4 * i], std::cos(5 * theta), 1e-6);
    EXPECT_NEAR(r[4 * i + 1], std::sin(5 * theta), 1e-6);
    std::vector<float> w(hd, 0.0f);
    w[4 * i + 2] = 1.0f;  // dims 4i+2, 4i+3 turn with the row
    r = at(3, 5, w);
    EXPECT_NEAR(r[4 * i + 2], std::cos(3 * theta), 1e-6);
    EXPECT_NEAR(r[4 * i + 3], std::sin(3 * theta), 1e-6);
  }
}

// --- timing at the release's shape, not run by default:
//   build-kernels/tests/vision_tower_test --gtest_also_run_disabled_tests
//   --gtest_filter='*RealShape*'
// Random Q8G weights in memory (no container on disk), one 32 x 32 grid (1024 patches).

Matrix random_matrix(int64_t rows, int64_t cols, Rng& rng,
                     std::vector<std::unique_ptr<uint8_t[]>>& storage) {
  std::vector<float> w((size_t)(rows * cols));
  float a = std::sqrt(3.0f / (float)cols);
  for (float& x : w) x = rng.uniform(-a, a);
  std::vector<uint8_t> payload, scales;
  quantize_matrix(TensorFormat::kQ8G, w.data(), rows, cols, &payload, &scales);
  storage.emplace_back(new uint8_t[payload.size() + scales.size() + 64]());
  uint8_t* p = storage.back().get();
  std::memcpy(p, payload.data(), payload.size());
  std::memcpy(p + payload.size(), scales.data(), scales.size());
  return Matrix{TensorFormat::kQ8G, rows, cols, p, (const uint16_t*)(p + payload.size())};
}

const float* ones(int64_t n, std::vector<std::unique_ptr<uint8_t[]>>& storage) {
  storage.emplace_back(new uint8_t[n * 4]);
  float* f = (float*)storage.back().get();
  std::fill(f, f + n, 1.0f);
  return f;
}

TEST(VisionTowerBench, DISABLED_RealShape1024Patches) {
  VisionConfig v;  // the defaults are the release's geometry
  v.text_hidden = 7168;
  Rng rng(3);
  std::vector<std::unique_ptr<uint8_t[]>> st;
  VisionWeights w;
  const int64_t D = v.hidden, Q = v.qkv_hidden, I = v.intermediate, M = v.merged();
  w.patch_embed = random_matrix(D, v.patch_values(), rng, st);
  w.pos_emb = random_matrix((int64_t)v.pos_h * v.pos_w, D, rng, st);
  for (int l = 0; l < v.layers; l++)
    w.blocks.push_back({ones(D, st), ones(D, st), random_matrix(3 * Q, D, rng, st),
                        random_matrix(D, Q, rng, st), random_matrix(I, D, rng, st),
                        random_matrix(D, I, rng, st)});
  w.final_norm = ones(D, st);
  w.proj0 = random_matrix(M, M, rng, st);
  w.proj2 = random_matrix(v.text_hidden, M, rng, st);
  w.post_norm = ones(v.text_hidden, st);
  VisionTower tower(v, w, detect_isa(), std::move(st));
  ThreadPool pool(0);
  std::vector<float> patches = random_patches(32, 32, 9);
  for (int run = 0; run < 2; run++) {
    auto t0 = std::chrono::steady_clock::now();
    std::clock_t c0 = std::clock();  // CPU time of every thread: the box may be shared
    std::vector<float> out = tower.encode(patches.data(), 32, 32, pool);
    double cpu = (double)(std::clock() - c0) / CLOCKS_PER_SEC;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(out.size(), 256u * 7168u);
    std::printf(
        "real-shape tower, 1024 patches, %d threads, %s: %.2f s wall, %.2f s CPU "
        "(%.1f MiB resident)\n",
        pool.size(), isa_name(detect_isa()), s, cpu, tower.resident_bytes() / 1048576.0);
  }
}

}  // namespace
}  // namespace waste
