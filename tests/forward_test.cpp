// The forward passes against the independent float64 numpy reference, and the placement
// guarantees: chunking and thread count never change a bit of the logits.
#include <gtest/gtest.h>

#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "engine/base/error.h"
#include "engine/base/stopwatch.h"
#include "engine/format/container.h"
#include "engine/model/model.h"
#include "engine/synth/synth.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

struct Reference {
  std::vector<double> logits;
  std::vector<int32_t> greedy;
};

// Runs scripts/reference/waste_ref.py: last-position logits and a greedy continuation.
Reference run_reference(const fs::path& model, const std::vector<int32_t>& ids, int greedy) {
  test::TempDir d;
  std::string list;
  for (int32_t id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
  std::string cmd = "/usr/bin/python3 " +
                    (test::source_dir() / "scripts/reference/waste_ref.py").string() + " " +
                    model.string() + " --ids " + list + " --logits-out " +
                    (d / "logits.f64").string() + " --greedy " + std::to_string(greedy) + " --json";
  std::string out;
  int rc = test::run_command(cmd, &out);
  EXPECT_EQ(rc, 0) << out;
  Reference r;
  std::string raw = test::read_file(d / "logits.f64");
  r.logits.resize(raw.size() / 8);
  std::memcpy(r.logits.data(), raw.data(), raw.size());
  simdjson::dom::parser p;
  simdjson::padded_string json(out.substr(out.find('{')));
  simdjson::dom::element doc = p.parse(json).value();
  simdjson::dom::array ids_out = doc["token_ids"].get_array().value();
  for (int64_t id : ids_out) r.greedy.push_back((int32_t)id);
  return r;
}

std::string name_of(Arch a) {
  return a == Arch::kK3 ? "K3" : a == Arch::kDeepSeekV3 ? "DeepSeekV3" : "KimiLinear";
}

class ForwardTest : public ::testing::TestWithParam<Arch> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    for (Arch a : {Arch::kKimiLinear, Arch::kK3, Arch::kDeepSeekV3})
      write_synthetic(dir_->path() / name_of(a), {a, "tiny", 11});
  }
  static void TearDownTestSuite() { delete dir_; }

  fs::path path() const { return dir_->path() / name_of(GetParam()); }
  std::unique_ptr<Container> open() const { return Container::open(path()); }

  static std::vector<int32_t> prompt(int n, int vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; i++) ids.push_back((int32_t)((i * 37 + 11) % vocab));
    return ids;
  }

  // Logits after feeding `ids` with the given options; also returns the greedy continuation.
  static std::vector<float> logits(const Container& c, const std::vector<int32_t>& ids,
                                   ModelOptions opt, int greedy = 0,
                                   std::vector<int32_t>* cont = nullptr) {
    Model m(c, opt);
    Session s = m.new_session(256);
    std::vector<float> l(c.config().vocab);
    m.forward(s, ids, l.data());
    for (int i = 0; i < greedy; i++) {
      int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
      cont->push_back(best);
      m.forward(s, std::span<const int32_t>(&best, 1), l.data());
    }
    return l;
  }

  static test::TempDir* dir_;
};
test::TempDir* ForwardTest::dir_ = nullptr;

TEST_P(ForwardTest, MatchesTheFloat64ReferenceAndItsGreedyContinuation) {
  auto c = open();
  std::vector<int32_t> ids = prompt(12, c->config().vocab);
  std::vector<int32_t> ours;
  ModelOptions opt;
  opt.chunk = 1;
  logits(*c, ids, opt, 16, &ours);
  std::vector<float> first = logits(*c, ids, opt);
  Reference ref = run_reference(path(), ids, 16);
  ASSERT_EQ(ref.logits.size(), first.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < first.size(); i++) {
    max_diff = std::max(max_diff, std::fabs(first[i] - ref.logits[i]));
    max_abs = std::max(max_abs, std::fabs(ref.logits[i]));
  }
  EXPECT_GT(max_abs, 1.0);  // the logits carry signal: a zero model would match trivially
  EXPECT_LE(max_diff, 1e-4) << "max |logit| " << max_abs;
  // The rotation and YaRN are checked tighter: relative to the largest logit, as the original's
  // are (docs/MODEL.md §5.0).
  if (GetParam() == Arch::kDeepSeekV3) {
    EXPECT_LE(max_diff / max_abs, 1e-5);
  }
  EXPECT_EQ(ours, ref.greedy);
}

TEST_P(ForwardTest, ChunkedPrefillIsBitIdenticalToTokenByToken) {
  auto c = open();
  // 150 tokens: windows of 150 and 64 run attention in pieces, and long windows apply each
  // expert to all of its tokens at once instead of through per-token tables.
  std::vector<int32_t> ids = prompt(150, c->config().vocab);
  ModelOptions one;
  one.chunk = 1;
  std::vector<float> base = logits(*c, ids, one);
  for (int chunk : {2, 7, 16, 64, 150}) {
    ModelOptions o;
    o.chunk = chunk;
    EXPECT_EQ(logits(*c, ids, o), base) << "chunk " << chunk;
  }
}

// Windows that start and end mid-block and cross blocks of cached latents (a work unit walks
// them in blocks of 224 positions at these latent widths, for up to 8 queries at a time): 70
// tokens, then 400 more (the cache then holds 470 positions), each in one window, give
// token-by-token's bits, after each window and for a decoded token after them.
TEST_P(ForwardTest, LongWindowsAcrossKeyBlocksMatchTokenByToken) {
  auto c = open();
  const std::vector<int32_t> ids = prompt(471, c->config().vocab);
  auto run = [&](int chunk, std::vector<std::vector<float>>& out) {
    ModelOptions o;
    o.chunk = chunk;
    Model m(*c, o);
    Session s = m.new_session(512);
    for (auto [from, to] : {std::pair{0, 70}, {70, 470}, {470, 471}}) {
      std::vector<float> l(c->config().vocab);
      m.forward(s, std::span(ids).subspan(from, to - from), l.data());
      out.push_back(l);
    }
  };
  std::vector<std::vector<float>> one, window;
  run(1, one);
  run(400, window);
  ASSERT_EQ(one.size(), 3u);
  for (size_t i = 0; i < one.size(); i++) EXPECT_EQ(window[i], one[i]) << "step " << i;
}

// Several weight seeds: one window, chunks of 1, 7 and 64, and a snapshot taken mid-prompt
// (saved to a file and restored into another model) then continued in one window, all give the
// same bits. Windows of 16 tokens or more apply each expert to all of its tokens at once; shorter
// ones use per-token tables; both must agree.
TEST_P(ForwardTest, WindowsChunksAndSnapshotsAgreeBitForBitOnSeveralSeeds) {
  for (uint64_t seed : {3, 29, 101}) {
    test::TempDir d;
    write_synthetic(d / "m", {GetParam(), "tiny", seed});
    auto c = Container::open(d / "m");
    std::vector<int32_t> ids = prompt(120, c->config().vocab);
    ModelOptions window;
    window.chunk = 120;
    const std::vector<float> base = logits(*c, ids, window);
    for (int chunk : {1, 7, 64}) {
      ModelOptions o;
      o.chunk = chunk;
      EXPECT_EQ(logits(*c, ids, o), base) << "seed " << seed << " chunk " << chunk;
    }
    {
      Model m(*c, window);
      Session s = m.new_session(256);
      m.forward(s, std::span(ids).subspan(0, 77), nullptr);
      s.save(d / "snap.bin");
    }
    Model m(*c, window);
    Session r = m.new_session(256);
    r.load(d / "snap.bin");
    std::vector<float> l(c->config().vocab);
    m.forward(r, std::span(ids).subspan(77), l.data());
    EXPECT_EQ(l, base) << "seed " << seed << ": restored at 77, the rest in one window";
  }
}

// An MLA layer's latent cache is sized for the session's whole context when it first grows, in
// a fresh session and in a snapshot copy alike: it never moves, so no outgrown copies pile up
// outside the RAM plan.
TEST_P(ForwardTest, TheLatentCacheNeverMovesAsThePromptGrows) {
  auto c = open();
  Model m(*c);
  std::vector<int32_t> ids = prompt(150, c->config().vocab);
  auto places = [](const Session& s) {
    std::vector<const float*> at;
    for (const MlaCache& l : s.mla) at.push_back(l.latents.empty() ? nullptr : l.latents.data());
    return at;
  };
  Session s = m.new_session(200);
  m.forward(s, std::span(ids).subspan(0, 1), nullptr);
  Session copy = s;  // a snapshot: it holds only its positions until it grows
  const std::vector<const float*> first = places(s);
  m.forward(s, std::span(ids).subspan(1, 70), nullptr);
  m.forward(s, std::span(ids).subspan(71), nullptr);
  EXPECT_EQ(places(s), first);
  m.forward(copy, std::span(ids).subspan(1, 5), nullptr);
  const std::vector<const float*> grown = places(copy);
  m.forward(copy, std::span(ids).subspan(6, 100), nullptr);
  EXPECT_EQ(places(copy), grown);
  int mla_layers = 0;
  for (const MlaCache& l : s.mla)
    if (!l.latents.empty()) {
      mla_layers++;
      EXPECT_EQ(l.latents.capacity(), 200u * s.latent_width());
    }
  EXPECT_GT(mla_layers, 0);
}

TEST_P(ForwardTest, ThreadCountLeavesLogitsAlone) {
  auto c = open();
  std::vector<int32_t> ids = prompt(20, c->config().vocab);
  ModelOptions a, b;
  a.threads = 1;
  b.threads = 2;
  EXPECT_EQ(logits(*c, ids, a), logits(*c, ids, b));
  ModelOptions s3 = b;
  s3.threads = 3;
  EXPECT_EQ(logits(*c, ids, s3), logits(*c, ids, a));
}

TEST_P(ForwardTest, SessionsSaveLoadAndContinueExactly) {
  auto c = open();
  Model m(*c);
  std::vector<int32_t> ids = prompt(10, c->config().vocab);
  Session s = m.new_session(64);
  std::vector<float> l(c->config().vocab), l2(c->config().vocab);
  m.forward(s, std::span(ids).subspan(0, 6), l.data());
  test::TempDir d;
  s.save(d / "s.bin");
  Session copy = s;  // a snapshot is a plain copy
  m.forward(s, std::span(ids).subspan(6), l.data());
  Session r = m.new_session(64);
  r.load(d / "s.bin");
  EXPECT_EQ(r.pos(), 6);
  m.forward(r, std::span(ids).subspan(6), l2.data());
  EXPECT_EQ(l, l2);
  m.forward(copy, std::span(ids).subspan(6), l2.data());
  EXPECT_EQ(l, l2);
}

TEST_P(ForwardTest, BadInputIsRefusedAndLeavesTheSessionAsItWas) {
  auto c = open();
  Model m(*c);
  Session s = m.new_session(8);
  std::vector<int32_t> ok = {1, 2, 3};
  m.forward(s, ok, nullptr);
  Session before = s;
  auto expect_refused = [&](std::vector<int32_t> ids, const char* fragment) {
    try {
      m.forward(s, ids, nullptr);
      ADD_FAILURE() << "accepted " << fragment;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(s.tokens, before.tokens);
    EXPECT_FALSE(s.broken);
  };
  expect_refused({}, "empty prompt");
  expect_refused({1, c->config().vocab}, "out of range");
  expect_refused({-1}, "out of range");
  expect_refused({1, 2, 3, 4, 5, 6}, "context length exceeded");
  std::vector<float> a(c->config().vocab), b(c->config().vocab);
  m.forward(s, {{4}}, a.data());
  m.forward(before, {{4}}, b.data());
  EXPECT_EQ(a, b);
}

TEST_P(ForwardTest, SessionFilesFromOtherModelsAreRefused) {
  test::TempDir d;
  auto c = open();
  Model m(*c);
  Session s = m.new_session(16);
  m.forward(s, {{1, 2}}, nullptr);
  s.save(d / "s.bin");
  // Another model: the other architecture.
  auto other = Container::open(dir_->path() /
                               name_of(GetParam() == Arch::kK3 ? Arch::kKimiLinear : Arch::kK3));
  Model om(*other);
  Session o = om.new_session(16);
  EXPECT_THROW(o.load(d / "s.bin"), FormatError);
  EXPECT_EQ(o.pos(), 0);
  // A damaged file.
  std::string bytes = test::read_file(d / "s.bin");
  test::write_file(d / "t.bin", bytes.substr(0, bytes.size() - 3));
  Session t = m.new_session(16);
  EXPECT_THROW(t.load(d / "t.bin"), FormatError);
  test::write_file(d / "u.bin", "WSESjunk");
  EXPECT_THROW(t.load(d / "u.bin"), FormatError);
  EXPECT_EQ(t.pos(), 0);
  // A file from an earlier version (its states came from other arithmetic): the header's second
  // u32 (docs/FORMAT.md §9), one less than this build's.
  uint32_t version;
  std::memcpy(&version, bytes.data() + 4, 4);
  ASSERT_GT(version, 1u);
  version--;
  std::memcpy(bytes.data() + 4, &version, 4);
  test::write_file(d / "v.bin", bytes);
  try {
    t.load(d / "v.bin");
    ADD_FAILURE() << "a session file of version " << version << " was loaded";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("version " + std::to_string(version) + " is not"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(t.pos(), 0);
}

// Every placement knob changes only time: cache size and policy, lookahead, read-ahead (reader
// threads), chunk size. Prefill then 8 greedy decode steps; all logits must be bit-identical.
TEST_P(ForwardTest, PlacementNeverChangesABit) {
  auto c = open();
  std::vector<int32_t> ids = prompt(19, c->config().vocab);
  auto trace = [&](ModelOptions o) {
    Model m(*c, o);
    Session s = m.new_session(64);
    std::vector<float> l(c->config().vocab), all;
    m.forward(s, ids, l.data());
    for (int step = 0; step < 8; step++) {
      all.insert(all.end(), l.begin(), l.end());
      int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
      m.forward(s, std::span<const int32_t>(&best, 1), l.data());
    }
    return all;
  };
  ModelOptions base;
  base.chunk = 1;
  base.lookahead = 0;
  base.store.io_threads = 0;
  std::vector<float> want = trace(base);
  uint64_t rec = c->bank(1).stride();
  struct Case {
    const char* what;
    uint64_t cache_records;
    int lookahead, io_threads, chunk;
    CachePolicy policy;
    IoBackend backend = IoBackend::kThreads;
  };
  const Case cases[] = {
      {"minimum cache, read-ahead", 0, 0, 4, 1, CachePolicy::kLfu},
      {"small cache, lookahead", 9, 6, 2, 1, CachePolicy::kLfu},
      {"mid cache, lru, chunk 5", 20, 3, 1, 5, CachePolicy::kLru},
      {"everything cached, lfru, chunk 64", 1000, 6, 4, 64, CachePolicy::kLfru},
      {"no read-ahead, lookahead on, chunk 7", 12, 6, 0, 7, CachePolicy::kLfu},
      {"io_uring, small cache, lookahead", 9, 6, 4, 1, CachePolicy::kLfu, IoBackend::kUring},
      {"io_uring depth 1, chunk 3", 12, 2, 1, 3, CachePolicy::kLrfu, IoBackend::kUring},
  };
  for (const Case& k : cases) {
    ModelOptions o;
    o.chunk = k.chunk;
    o.lookahead = k.lookahead;
    o.store.io_threads = k.io_threads;
    o.store.cache_bytes = k.cache_records * rec;
    o.store.policy = k.policy;
    o.store.backend = k.backend;
    EXPECT_EQ(trace(o), want) << k.what;
  }
}

TEST_P(ForwardTest, CacheAndLookaheadCountersAreConsistent) {
  auto c = open();
  ModelOptions o;
  o.store.cache_bytes = 1000 * c->bank(1).stride();
  Model m(*c, o);
  Session s = m.new_session(64);
  std::vector<int32_t> ids = prompt(4, c->config().vocab);
  std::vector<float> l(c->config().vocab);
  for (int32_t id : ids) m.forward(s, std::span<const int32_t>(&id, 1), l.data());
  ExpertStats first = m.expert_stats();
  const ModelConfig& cfg = c->config();
  uint64_t demands = 4ull * cfg.top_k * c->manifest().banks.size();
  EXPECT_EQ(first.hits + first.misses, demands);
  // Speculative reads count when issued and their bytes when they land; one may still be in
  // flight when the counters are read.
  EXPECT_LE(first.bytes_read, (first.misses + first.prefetched) * c->bank(1).stride());
  EXPECT_GE(first.bytes_read, first.misses * c->bank(1).stride());
  EXPECT_GT(m.lookahead_stats().predicted, 0u);
  EXPECT_LE(m.lookahead_stats().correct, m.lookahead_stats().predicted);
  // The same tokens again from a fresh session: everything is resident now.
  Session t = m.new_session(64);
  for (int32_t id : ids) m.forward(t, std::span<const int32_t>(&id, 1), l.data());
  ExpertStats second = m.expert_stats();
  EXPECT_EQ(second.misses, first.misses);
  EXPECT_EQ(second.hits - first.hits, demands);
}

// The kernel clock counts the trunk's products and the experts' arithmetic, on both expert
// paths (per-token tables for one token, the batched kernel for a long chunk), and never more
// than the forward passes took.
TEST_P(ForwardTest, TheKernelClockCountsBothKindsWithinTheWallTime) {
  auto c = open();
  Model m(*c);
  Session s = m.new_session(64);
  std::vector<int32_t> ids = prompt(40, c->config().vocab);
  std::vector<float> l(c->config().vocab);
  const SteadyClock::time_point t0 = SteadyClock::now();
  m.forward(s, std::span<const int32_t>(ids.data(), 39), l.data());
  const KernelClock batched = m.kernel_clock();
  m.forward(s, std::span<const int32_t>(ids.data() + 39, 1), l.data());
  const double wall = seconds_since(t0);
  const KernelClock both = m.kernel_clock();
  EXPECT_GT(batched.trunk, 0);
  EXPECT_GT(batched.experts, 0);
  EXPECT_GT(both.trunk, batched.trunk);
  EXPECT_GT(both.experts, batched.experts);  // the one-token step's tables and rows
  EXPECT_LE(both.trunk + both.experts, wall);
}

// Several conversations in one step (Model::step, how the daemon's parallel slots run): each gets
// the logits and state it gets alone, whatever its neighbours, their order and their lengths —
// prefill pieces long enough for the batched expert path beside single decode tokens, one with
// an image row (an embedding override) — on several weight seeds, then a step of decode tokens
// only (short enough to predict the next layer's experts for all of them at once).
TEST_P(ForwardTest, AConversationInASharedStepGetsItsAloneBits) {
  for (uint64_t seed : {5, 41}) {
    test::TempDir d;
    write_synthetic(d / "m", {GetParam(), "tiny", seed});
    auto c = Container::open(d / "m");
    const int64_t V = c->config().vocab, hid = c->config().hidden;
    struct Conv {
      std::vector<int32_t> history, piece, next;
      int64_t image_at = -1;  // an override at this index of `piece`
    };
    auto ids = [&](int n, int salt) {
      std::vector<int32_t> v;
      for (int i = 0; i < n; i++) v.push_back((int32_t)((i * 53 + salt * 17 + 5) % V));
      return v;
    };
    const std::vector<Conv> convs = {{{}, ids(20, 1), ids(1, 2)},
                                     {ids(30, 3), ids(1, 4), ids(1, 5)},
                                     {ids(7, 6), ids(7, 7), ids(1, 8)},
                                     {ids(3, 9), ids(9, 10), ids(1, 11), 4}};
    std::vector<float> image(hid);
    for (int64_t i = 0; i < hid; i++) image[i] = std::sin(0.37f * (float)i + (float)seed);
    auto overrides = [&](const Conv& k) {
      std::vector<EmbeddingOverride> e;
      if (k.image_at >= 0) e.push_back({k.image_at, image.data()});
      return e;
    };
    ModelOptions o;
    o.chunk = 8;
    // Alone: each conversation's logits after its piece and after its next token, and its state.
    std::vector<std::vector<float>> want_piece, want_next;
    std::vector<std::string> want_state;
    for (const Conv& k : convs) {
      Model m(*c, o);
      Session s = m.new_session(128);
      std::vector<float> l(V);
      if (!k.history.empty()) m.forward(s, k.history, nullptr);
      m.forward(s, k.piece, l.data(), overrides(k));
      want_piece.push_back(l);
      m.forward(s, k.next, l.data());
      want_next.push_back(l);
      want_state.push_back(s.serialize());
    }
    for (bool reversed : {false, true}) {
      Model m(*c, o);
      std::vector<Session> ss;
      for (const Conv& k : convs) {
        ss.push_back(m.new_session(128));
        if (!k.history.empty()) m.forward(ss.back(), k.history, nullptr);
      }
      std::vector<std::vector<float>> got(convs.size(), std::vector<float>(V));
      std::vector<std::vector<EmbeddingOverride>> emb;
      for (const Conv& k : convs) emb.push_back(overrides(k));
      auto step = [&](bool first) {
        std::vector<StepPiece> pieces;
        for (size_t i = 0; i < convs.size(); i++) {
          const Conv& k = convs[i];
          pieces.push_back({&ss[i], first ? std::span(k.piece) : std::span(k.next), got[i].data(),
                            first ? std::span<const EmbeddingOverride>(emb[i])
                                  : std::span<const EmbeddingOverride>()});
        }
        if (reversed) std::reverse(pieces.begin(), pieces.end());
        m.step(pieces);
      };
      step(true);
      for (size_t i = 0; i < convs.size(); i++)
        EXPECT_EQ(got[i], want_piece[i]) << "seed " << seed << " conversation " << i;
      step(false);
      for (size_t i = 0; i < convs.size(); i++) {
        EXPECT_EQ(got[i], want_next[i]) << "seed " << seed << " conversation " << i << " next";
        EXPECT_TRUE(ss[i].serialize() == want_state[i]) << "seed " << seed << " conversation " << i;
      }
    }
  }
}

// A bad piece is refused before anything runs, so its neighbours' sessions stay as they were.
TEST_P(ForwardTest, AStepWithABadPieceRunsNothing) {
  auto c = open();
  Model m(*c);
  Session a = m.new_session(16), b = m.new_session(4);
  const std::vector<int32_t> ok = {1, 2, 3}, big = {1, 2, 3, 4, 5};
  auto refused = [&](std::vector<StepPiece> pieces, const char* fragment) {
    try {
      m.step(pieces);
      ADD_FAILURE() << "accepted " << fragment;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(a.pos(), 0);
    EXPECT_EQ(b.pos(), 0);
    EXPECT_FALSE(a.broken || b.broken);
  };
  auto piece = [](Session& s, const std::vector<int32_t>& ids) {
    StepPiece p;
    p.session = &s;
    p.tokens = ids;
    return p;
  };
  refused({piece(a, ok), piece(b, big)}, "context length exceeded");
  refused({piece(a, ok), piece(a, ok)}, "share one session");
  refused({}, "at least one piece");
  m.step(std::vector<StepPiece>{piece(a, ok), piece(b, ok)});
  EXPECT_EQ(a.pos(), 3);
  EXPECT_EQ(b.pos(), 3);
}

INSTANTIATE_TEST_SUITE_P(Arch, ForwardTest,
                         ::testing::Values(Arch::kKimiLinear, Arch::kK3, Arch::kDeepSeekV3),
                         [](const auto& test_info) { return name_of(test_info.param); });

// On the DeepSeek-V3 architecture the rotation is MLA's only positional signal. In one layer
// (dense, so nothing else mixes positions) the last token attends over the earlier tokens'
// latents: unrotated, that is an unordered set and two turns swapped give the same answer up to
// rounding; rotated, the answer depends on which turn came first.
TEST(DeepSeekV3Forward, TheAnswerDependsOnTheOrderOfTheTurns) {
  test::TempDir d;
  SynthOptions o{Arch::kDeepSeekV3, "tiny", 5};
  o.layers = 1;
  write_synthetic(d / "m", o);
  fs::copy(d / "m", d / "nope", fs::copy_options::recursive);
  std::string manifest = test::read_file(d / "nope/manifest.json");
  manifest.replace(manifest.find("\"rope_theta\""), 0, "\"mla_use_nope\":true,");
  test::write_file(d / "nope/manifest.json", manifest);

  const int32_t open = 3, close = 4, assistant = 5;
  const std::vector<int32_t> first = {open, 40, 41, 42, 43, close};
  const std::vector<int32_t> second = {open, 60, 61, 62, close};
  // max |logit difference| / max |logit| between the two orders.
  auto order_effect = [&](const fs::path& model) {
    auto c = Container::open(model);
    auto answer = [&](const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
      std::vector<int32_t> ids = a;
      ids.insert(ids.end(), b.begin(), b.end());
      ids.push_back(assistant);
      Model m(*c);
      Session s = m.new_session(64);
      std::vector<float> l(c->config().vocab);
      m.forward(s, ids, l.data());
      return l;
    };
    const std::vector<float> ab = answer(first, second), ba = answer(second, first);
    double diff = 0, top = 0;
    for (size_t i = 0; i < ab.size(); i++) {
      diff = std::max(diff, (double)std::fabs(ab[i] - ba[i]));
      top = std::max(top, (double)std::fabs(ab[i]));
    }
    return diff / top;
  };
  EXPECT_TRUE(Container::open(d / "m")->config().rope.on);
  EXPECT_GT(order_effect(d / "m"), 1e-2);
  // The control: the same weights without the rotation cannot tell the orders apart.
  EXPECT_FALSE(Container::open(d / "nope")->config().rope.on);
  EXPECT_LT(order_effect(d / "nope"), 1e-5);
}

}  // namespace
}  // namespace waste
