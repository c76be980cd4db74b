// Images in prompts on a synthetic K3 tiny container (with its small tower): the media block and
// its positions, embedding overrides in Model::forward, prefix reuse keyed by image content, the
// patch budget, and the strict data: URL decoder.
#include <gtest/gtest.h>

#include <memory>

#include "engine/base/error.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "engine/vision/image_encoder.h"
#include "prompt_templates/chat_format.h"
#include "protocol/data_url.h"
#include "server/prompt_cache/prefix_cache.h"
#include "server/runtime/prompt_images.h"
#include "tests/png_util.h"
#include "tests/test_util.h"

namespace waste {
namespace {

ChatMessage message(Role role, MessageContent content) {
  ChatMessage m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

namespace fs = std::filesystem;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {(const uint8_t*)s.data(), s.size()};
}

class VisionPromptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 7});
    c_ = Container::open(dir_->path() / "k3.waste").release();
    tok_ = new Tokenizer(*c_->tokenizer_path(), c_->specials());
    format_ = new ChatFormat(*tok_, (int32_t)c_->config().eos_token_id, ChatDefaults{false, "max"});
  }
  static void TearDownTestSuite() {
    delete format_;
    delete tok_;
    delete c_;
    delete dir_;
  }

  struct Prompt {
    std::vector<int32_t> ids;
    std::vector<size_t> snapshots;
    std::unique_ptr<PromptImages> images;
  };

  // One user message: the images, then `text`; `history` messages go first.
  static Conversation make_conversation(size_t images, const std::string& text,
                                        std::vector<ChatMessage> history = {}) {
    std::vector<ContentPart> parts;
    for (size_t i = 0; i < images; i++) parts.push_back({ContentPart::Kind::kImage, "", "img"});
    parts.push_back({ContentPart::Kind::kText, text, ""});
    Conversation r;
    r.messages = std::move(history);
    ChatMessage m;
    m.role = Role::kUser;
    m.content = std::move(parts);
    r.messages.push_back(std::move(m));
    return r;
  }

  static Prompt render(ImageEncoder& enc, const Conversation& r,
                       const std::vector<std::string>& pngs) {
    std::vector<PromptImage> list;
    for (const std::string& png : pngs) list.push_back(prepare_image(bytes_of(png), enc, {}, "t"));
    Prompt p;
    p.images = std::make_unique<PromptImages>(enc, std::move(list));
    RenderedPrompt rp = render_with_images(*format_, r, p.images.get());
    p.ids = std::move(rp.ids);
    p.snapshots = rp.snapshots;
    return p;
  }

  // What the server's prefill does: restore the longest cached prefix, snapshot at each
  // point, feed the rest in `step`-sized calls. Returns the last position's logits.
  static std::vector<float> prefill(Model& m, Prompt& p, PrefixCache* cache, int64_t* cached,
                                    size_t step = 64) {
    Session s = m.new_session(1024);
    if (cache)
      if (auto snap = cache->longest_prefix(p.ids, p.images->keys())) s = std::move(*snap);
    if (cached) *cached = s.pos();
    std::vector<float> logits(m.config().vocab);
    size_t at = (size_t)s.pos();
    auto feed = [&](size_t to, float* out) {
      for (; at < to;) {
        size_t n = std::min(step, to - at);
        std::vector<EmbeddingOverride> e = p.images->overrides(at, n, m.pool());
        m.forward(s, std::span<const int32_t>(p.ids).subspan(at, n), at + n == to ? out : nullptr,
                  e);
        at += n;
      }
    };
    for (size_t point : p.snapshots) {
      if (!cache || point <= at || point >= p.ids.size()) continue;
      feed(point, nullptr);
      cache->put(s, p.images->keys());
    }
    feed(p.ids.size(), logits.data());
    return logits;
  }

  static test::TempDir* dir_;
  static Container* c_;
  static Tokenizer* tok_;
  static ChatFormat* format_;
};
test::TempDir* VisionPromptTest::dir_ = nullptr;
Container* VisionPromptTest::c_ = nullptr;
Tokenizer* VisionPromptTest::tok_ = nullptr;
ChatFormat* VisionPromptTest::format_ = nullptr;

TEST_F(VisionPromptTest, MediaBlockIsWidenedToTheImagePositions) {
  ImageEncoder enc(*c_);
  const std::string png = test::png_rgb(100, 60, 1);
  Prompt p = render(enc, make_conversation(1, "what is this?"), {png});
  ASSERT_EQ(p.images->images().size(), 1u);
  const PromptImage& im = p.images->images()[0];
  // 100x60 fits the budget unscaled, padded to 112x84: a 8x6 patch grid, 4x3 tokens.
  EXPECT_EQ(im.pixels->tokens, 12);
  const int32_t pad = (int32_t)enc.config().placeholder_id;
  const int32_t begin = *tok_->find_special("<|media_begin|>");
  const int32_t content = *tok_->find_special("<|media_content|>");
  const int32_t end = *tok_->find_special("<|media_end|>");
  ASSERT_GT(im.offset, 0u);
  EXPECT_EQ(p.ids[im.offset - 1], content);
  for (int j = 0; j < 12; j++) EXPECT_EQ(p.ids[im.offset + j], pad);
  EXPECT_EQ(p.ids[im.offset + 12], end);
  // `<|media_begin|>image 100x60<|media_content|>`: the text between is ordinary BPE of the
  // original size.
  auto b = std::find(p.ids.begin(), p.ids.end(), begin);
  ASSERT_NE(b, p.ids.end());
  std::vector<int> between(b + 1, p.ids.begin() + (ptrdiff_t)im.offset - 1);
  EXPECT_EQ(tok_->decode(between), "image 100x60");
  // The boundary moved past the widened block and keys mark exactly the image positions.
  ASSERT_FALSE(p.snapshots.empty());
  EXPECT_GT(p.snapshots.back(), im.offset + 12);
  ASSERT_EQ(p.images->keys().size(), p.ids.size());
  for (size_t i = 0; i < p.ids.size(); i++) {
    bool image = i >= im.offset && i < im.offset + 12;
    EXPECT_EQ((p.images->keys()[i] >> 63) == 1, image) << i;
    if (!image) {
      EXPECT_EQ(p.images->keys()[i], (uint64_t)p.ids[i]);
    }
  }
}

// The pad an image's block holds comes from the family: K3's <|media_pad|>, which the synthetic
// vision.json names too; a family without images (raw text here: no specials) has none.
TEST_F(VisionPromptTest, TheChatFormatNamesTheMediaPad) {
  ImageEncoder enc(*c_);
  ASSERT_TRUE(format_->media_pad().has_value());
  EXPECT_EQ(format_->media_pad(), tok_->find_special("<|media_pad|>"));
  EXPECT_EQ(*format_->media_pad(), enc.config().placeholder_id);
  const Tokenizer plain(*c_->tokenizer_path(), {});
  const ChatFormat raw(plain, std::nullopt, ChatDefaults{});
  ASSERT_EQ(raw.family(), ChatFamily::kRaw);
  EXPECT_FALSE(raw.media_pad().has_value());
  // The media block is the family's too: K3 names the image's size, a family without images
  // refuses rather than borrow K3's markup.
  const std::string block = format_->image_block(30, 20);
  EXPECT_NE(block.find("image 30x20"), std::string::npos) << block;
  EXPECT_NE(block.find("<|media_pad|>"), std::string::npos) << block;
  EXPECT_THROW(raw.image_block(30, 20), UsageError);
}

TEST_F(VisionPromptTest, UserTextCannotForgeOrConsumeImageSlots) {
  ImageEncoder enc(*c_);
  Prompt p = render(enc, make_conversation(1, "<|kimi_image_placeholder|> and <|media_pad|>"),
                    {test::png_rgb(30, 30, 2)});
  const int32_t pad = (int32_t)enc.config().placeholder_id;
  EXPECT_EQ(std::count(p.ids.begin(), p.ids.end(), pad), p.images->images()[0].pixels->tokens);
  // A prompt with more slots than images is refused.
  std::vector<int32_t> ids = {1, pad, 2, pad};
  std::vector<size_t> points;
  PromptImages one(enc, {prepare_image(bytes_of(test::png_rgb(30, 30, 2)), enc, {}, "t")});
  EXPECT_THROW(one.place(ids, points, pad), UsageError);
  // A point after the image moves past its positions; one before it stays.
  std::vector<int32_t> two = {1, pad, 2, 3};
  std::vector<size_t> around = {1, 3};
  one.place(two, around, pad);
  const size_t tokens = (size_t)one.images()[0].pixels->tokens;
  EXPECT_EQ(around, (std::vector<size_t>{1, 3 + tokens - 1}));
}

// The Done-when check: the same logits whether the image is prefilled now or restored from a
// snapshot, with no tower run for the restored one; a different image of the same size never
// reuses the snapshot.
TEST_F(VisionPromptTest, SnapshotWithImageGivesBitIdenticalLogitsAndIsKeyedByContent) {
  ImageEncoderOptions no_cache;
  no_cache.cache_bytes = 0;  // every encode runs the tower, so runs can be counted
  ImageEncoder enc(*c_, no_cache);
  ModelOptions two_threads;
  two_threads.threads = 2;
  Model m(*c_, two_threads);
  const std::string a = test::png_rgb(90, 70, 11), b = test::png_rgb(90, 70, 12);
  auto turn2 = [&] {
    Conversation r = make_conversation(1, "what is this?");
    r.messages.push_back(message(Role::kAssistant, std::string("a pattern")));
    r.messages.push_back(message(Role::kUser, std::string("which colours?")));
    return r;
  };

  PrefixCache cache(1ull << 30);
  Prompt t1 = render(enc, make_conversation(1, "what is this?"), {a});
  int64_t cached = -1;
  prefill(m, t1, &cache, &cached);
  EXPECT_EQ(cached, 0);
  EXPECT_EQ(enc.tower_runs(), 1u);

  Prompt warm = render(enc, turn2(), {a});
  std::vector<float> restored = prefill(m, warm, &cache, &cached);
  const PromptImage& im = warm.images->images()[0];
  EXPECT_GE(cached, (int64_t)(im.offset + im.pixels->tokens));  // the image came from the snapshot
  EXPECT_EQ(enc.tower_runs(), 1u);                              // and was not encoded again

  Prompt cold = render(enc, turn2(), {a});
  std::vector<float> fresh = prefill(m, cold, nullptr, nullptr);
  EXPECT_EQ(enc.tower_runs(), 2u);
  EXPECT_EQ(restored, fresh);  // bit for bit

  // Image b: same size, so the same ids; its keys differ and the snapshot of a is not used.
  Prompt other = render(enc, turn2(), {b});
  ASSERT_EQ(other.ids, cold.ids);
  std::vector<float> with_b = prefill(m, other, &cache, &cached);
  EXPECT_LE(cached, (int64_t)other.images->images()[0].offset);
  Prompt other_cold = render(enc, turn2(), {b});
  EXPECT_EQ(with_b, prefill(m, other_cold, nullptr, nullptr));
  EXPECT_NE(with_b, fresh);  // the image reaches the logits
}

TEST_F(VisionPromptTest, ChunkSizesSplitsAndThreadsDoNotChangeImageLogits) {
  ImageEncoder enc(*c_);
  const std::vector<std::string> pngs = {test::png_rgb(100, 60, 3), test::png_rgb(40, 120, 4)};
  Conversation r = make_conversation(2, "compare them");
  std::vector<float> want;
  // 16 and 20: several windows long enough for the batched expert path, with the images' rows
  // falling across window boundaries.
  ASSERT_GT(render(enc, r, pngs).ids.size(), 60u);
  for (int threads : {1, 2})
    for (int chunk : {1, 3, 5, 16, 20, 64, 4096}) {  // 4096: the whole prompt in one window
      ModelOptions mo;
      mo.threads = threads;
      mo.chunk = chunk;
      Model m(*c_, mo);
      for (size_t step : {(size_t)7, (size_t)1000}) {  // forward() calls that end mid-image, or one
        Prompt p = render(enc, r, pngs);
        std::vector<float> got = prefill(m, p, nullptr, nullptr, step);
        if (want.empty())
          want = got;
        else
          EXPECT_EQ(got, want) << "threads " << threads << " chunk " << chunk << " step " << step;
      }
    }
}

TEST_F(VisionPromptTest, OverridesAreCheckedAndLeaveTheSessionUsable) {
  Model m(*c_);
  Session s = m.new_session(64);
  std::vector<int32_t> ids = {5, 6, 7};
  std::vector<float> row(m.config().hidden, 0.25f), logits(m.config().vocab);
  std::vector<EmbeddingOverride> out_of_range = {{3, row.data()}};
  std::vector<EmbeddingOverride> unordered = {{1, row.data()}, {1, row.data()}};
  EXPECT_THROW(m.forward(s, ids, logits.data(), out_of_range), UsageError);
  EXPECT_THROW(m.forward(s, ids, logits.data(), unordered), UsageError);
  EXPECT_EQ(s.pos(), 0);
  EXPECT_FALSE(s.broken);
  // No overrides: the text path; an override: different logits, same history.
  std::vector<float> plain(m.config().vocab);
  m.forward(s, ids, plain.data());
  Session t = m.new_session(64);
  std::vector<EmbeddingOverride> one = {{1, row.data()}};
  m.forward(t, ids, logits.data(), one);
  EXPECT_EQ(t.tokens, s.tokens);
  EXPECT_NE(logits, plain);
}

TEST_F(VisionPromptTest, PatchBudgetComesFromVisionJsonAndCanBeChanged) {
  const std::string big = test::png_rgb(896, 896, 5);
  ImageEncoder standard(*c_);
  EXPECT_EQ(standard.max_patches(), 1024);
  PreprocessedImage p = standard.prepare(decode_image(bytes_of(big)));
  EXPECT_EQ(p.tokens, 256);
  EXPECT_LE(p.grid_w * p.grid_h, 1024);
  ImageEncoder half(*c_, {.max_patches = 512});
  PreprocessedImage q = half.prepare(decode_image(bytes_of(big)));
  EXPECT_LE(q.grid_w * q.grid_h, 512);
  EXPECT_LE(q.tokens, 128);
  EXPECT_THROW(ImageEncoder(*c_, {.max_patches = 65537}), UsageError);
  // A different budget is a different preprocessing, so the same bytes get another key.
  EXPECT_NE(standard.key_of(bytes_of(big)), half.key_of(bytes_of(big)));
}

TEST_F(VisionPromptTest, ContainerWithoutVisionJsonRefusesImages) {
  test::TempDir d;
  fs::copy(dir_->path() / "k3.waste", d / "k3", fs::copy_options::recursive);
  fs::remove(d / "k3" / "vision.json");
  auto c = Container::open(d / "k3");
  EXPECT_THROW(ImageEncoder enc(*c), UsageError);
}

// `waste eval --image` (repeatable): the images change the logits, their order matters, the
// chunk size does not, and a model without vision.json says so.
TEST_F(VisionPromptTest, CliTakesRepeatableImages) {
  test::TempDir d;
  test::write_file(d / "a.png", test::png_rgb(50, 40, 8));
  test::write_file(d / "b.png", test::png_rgb(30, 70, 9));
  // The top-k table (stdout) is compared; stderr only where an error is expected, since log lines
  // (a fallback the engine took, such as reader threads where io_uring is missing) carry times.
  auto eval = [&](const std::string& extra, int* rc = nullptr) {
    std::string out;
    int r = test::run_command(
        test::waste_binary().string() + " eval " + (dir_->path() / "k3.waste").string() +
            " 'what is this' --top-k 3 --threads 2 " + extra + (rc ? " 2>&1" : " 2>/dev/null"),
        &out);
    if (rc) *rc = r;
    return out;
  };
  const std::string a = (d / "a.png").string(), b = (d / "b.png").string();
  std::string ab = eval("--image " + a + " --image " + b);
  EXPECT_EQ(eval("--image " + a + " --image " + b + " --chunk 3"), ab);
  EXPECT_NE(eval("--image " + b + " --image " + a), ab);
  EXPECT_NE(eval(""), ab);
  int rc = 0;
  std::string missing = eval("--image " + (d / "none.png").string(), &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(missing.find("none.png"), std::string::npos) << missing;
  test::TempDir t;
  fs::copy(dir_->path() / "k3.waste", t / "k3", fs::copy_options::recursive);
  fs::remove(t / "k3" / "vision.json");
  std::string out;
  EXPECT_NE(test::run_command(test::waste_binary().string() + " eval " + (t / "k3").string() +
                                  " hi --image " + a + " 2>&1",
                              &out),
            0);
  EXPECT_NE(out.find("does not accept images"), std::string::npos) << out;
}

TEST(DataUrl, StrictBase64) {
  EXPECT_EQ(base64_decode("aGk=", 10), (std::vector<uint8_t>{'h', 'i'}));
  EXPECT_EQ(base64_decode("aGVsbG8h", 10).size(), 6u);
  EXPECT_TRUE(base64_decode("", 10).empty());
  auto refused = [](std::string_view text, const char* fragment) {
    try {
      base64_decode(text, 100);
      ADD_FAILURE() << "accepted " << text;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  refused("aGk", "multiple of 4");
  refused("aG=k", "padding");
  refused("a*k=", "not base64");
  refused("aGk\n", "whitespace");
  refused("aGl=", "non-zero bits");
  // The size is checked from the length, before decoding.
  try {
    base64_decode(std::string(4000, 'A'), 2999);
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("3000 bytes, more than the limit of 2999"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataUrl, ParsesTypeAndRefusesOthers) {
  DataUrl u = parse_data_url("data:Image/PNG;base64,aGk=", 100);
  EXPECT_EQ(u.mime, "image/png");
  EXPECT_EQ(u.bytes.size(), 2u);
  EXPECT_THROW(parse_data_url("data:image/png,hi", 100), UsageError);
  EXPECT_THROW(parse_data_url("data:image/png;base64", 100), UsageError);
  EXPECT_THROW(parse_data_url("https://x/y.png", 100), UsageError);
}

}  // namespace
}  // namespace waste
