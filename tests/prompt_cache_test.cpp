// The prompt cache's disk tier (server/prompt_cache/): snapshots written by one cache object are
// restored by the next (a restart) with bit-identical logits, on both architectures; snapshots
// along a conversation share their latent rows; damaged, truncated, foreign and orphaned files
// are skipped and deleted; the byte bound is kept; a read-only or full folder switches the tier
// off; a writer killed mid-write leaves nothing that is later restored; and the memory tier keeps
// one partial snapshot (a cut prefill's) per prompt.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "engine/base/error.h"
#include "engine/format/content_fingerprint.h"
#include "engine/synth/synth.h"
#include "server/prompt_cache/expert_usage_file.h"
#include "server/prompt_cache/prefix_cache.h"
#include "server/runtime/model_host.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

class PromptCacheTest : public ::testing::TestWithParam<Arch> {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 5});
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 5});
    write_synthetic(dir_->path() / "v3.waste", {Arch::kDeepSeekV3, "tiny", 5});
    write_synthetic(dir_->path() / "kl6.waste", {Arch::kKimiLinear, "tiny", 6});
  }
  static void TearDownTestSuite() { delete dir_; }

  void SetUp() override {
    EngineOptions eo;
    eo.threads = 2;
    host_ = std::make_unique<ModelHost>(container(GetParam()).string(), eo);
  }

  static fs::path container(Arch a) {
    return dir_->path() / (a == Arch::kK3           ? "k3.waste"
                           : a == Arch::kDeepSeekV3 ? "v3.waste"
                                                    : "kl.waste");
  }
  Model& model() { return host_->model(); }
  uint64_t fingerprint() { return content_fingerprint(host_->container()); }

  std::unique_ptr<DiskPrefixCache> open_cache(const fs::path& root, uint64_t max_bytes = 1ull << 30,
                                              std::optional<uint64_t> fp = std::nullopt) {
    DiskCacheOptions o;
    o.root = root;
    o.max_bytes = max_bytes;
    o.free_margin = 0;
    uint64_t f = fp ? *fp : fingerprint();
    auto c = std::make_unique<DiskPrefixCache>(
        o, [f] { return f; }, [this] { return model().new_session(kCtx); });
    c->flush();  // opened and scanned
    return c;
  }

  // A deterministic prompt of `n` tokens; `salt` makes another conversation.
  std::vector<int32_t> prompt(size_t n, int salt = 0) const {
    std::vector<int32_t> p(n);
    for (size_t i = 0; i < n; i++) p[i] = (int32_t)((i * 7 + 3 + salt * 101) % 200 + 1);
    return p;
  }
  Session prefilled(const std::vector<int32_t>& p) {
    Session s = model().new_session(kCtx);
    model().forward(s, p, nullptr);
    return s;
  }
  std::vector<float> next_logits(Session s, const std::vector<int32_t>& rest) {
    std::vector<float> logits(model().config().vocab);
    model().forward(s, rest, logits.data());
    return logits;
  }
  static std::vector<uint64_t> keys(const std::vector<int32_t>& p) { return position_keys(p, {}); }
  static void put(DiskPrefixCache& c, const Session& s) {
    c.put(std::make_shared<const Session>(s), keys(s.tokens));
    c.flush();
  }
  static std::vector<fs::path> files(const fs::path& dir, const std::string& ext) {
    std::vector<fs::path> out;
    if (!fs::exists(dir)) return out;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ext) out.push_back(e.path());
    return out;
  }

  static constexpr int64_t kCtx = 256;
  static test::TempDir* dir_;
  std::unique_ptr<ModelHost> host_;
};

test::TempDir* PromptCacheTest::dir_ = nullptr;

TEST_P(PromptCacheTest, ARestartRestoresBitIdenticalStateSharingRows) {
  test::TempDir root;
  std::vector<int32_t> first = prompt(40), second = prompt(65), third = prompt(70);
  {
    auto c = open_cache(root.path());
    put(*c, prefilled(first));
    put(*c, prefilled(second));
    EXPECT_EQ(c->stats().writes, 2u);
  }
  auto c = open_cache(root.path());
  EXPECT_EQ(c->stats().snapshots, 2u);
  std::optional<Session> s = c->longest_prefix(keys(third), 0);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pos(), 65);
  std::vector<int32_t> rest(third.begin() + 65, third.end());
  EXPECT_EQ(next_logits(*s, rest), next_logits(prefilled(second), rest));
  // The second snapshot holds only its own 25 rows; the first 40 are the first one's.
  fs::path dir = c->dir();
  auto rows = files(dir, ".rows");
  ASSERT_EQ(rows.size(), 2u);
  uint64_t row_bytes = 0;
  for (const auto& r : rows) row_bytes += fs::file_size(r);
  int mla = 0;
  for (const KdaState& k : s->kda) mla += k.S.empty() ? 1 : 0;
  EXPECT_EQ(row_bytes, 2 * 64 + (uint64_t)mla * 65 * s->latent_width() * sizeof(float));
  // Nothing longer than `longer_than`: the memory tier already had as much.
  EXPECT_FALSE(c->longest_prefix(keys(third), 65));
  EXPECT_EQ(c->stats().hits, 1u);
}

// Each kind of bad file: the lookup falls back (to the shorter snapshot, or to nothing), the bad
// file is deleted, and what is restored is still exact.
TEST_P(PromptCacheTest, DamagedTruncatedForeignAndOrphanedFilesAreSkippedAndDeleted) {
  struct Damage {
    const char* name;
    std::function<void(const fs::path& snap, const fs::path& rows)> apply;
  };
  auto flip = [](const fs::path& p, uint64_t at) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg((std::streamoff)at);
    char c = 0;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp((std::streamoff)at);
    f.write(&c, 1);
  };
  std::vector<Damage> damages = {
      {"truncated snapshot",
       [](const fs::path& s, const fs::path&) { fs::resize_file(s, fs::file_size(s) - 9); }},
      {"flipped snapshot payload",
       [&](const fs::path& s, const fs::path&) { flip(s, fs::file_size(s) - 5); }},
      {"flipped snapshot header", [&](const fs::path& s, const fs::path&) { flip(s, 20); }},
      {"flipped rows payload",
       [&](const fs::path&, const fs::path& r) { flip(r, fs::file_size(r) - 3); }},
      {"missing rows", [](const fs::path&, const fs::path& r) { fs::remove(r); }},
  };
  std::vector<int32_t> first = prompt(30), second = prompt(50), third = prompt(55);
  std::vector<int32_t> rest(third.begin() + 30, third.end());
  const std::vector<float> want = next_logits(prefilled(first), rest);
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.name);
    test::TempDir root;
    fs::path dir;
    {
      auto c = open_cache(root.path());
      put(*c, prefilled(first));
      put(*c, prefilled(second));
      dir = c->dir();
    }
    SnapshotInfo info{50, prefix_hashes(keys(second)).back(), {}};
    fs::path snap = dir / info.file_name();
    fs::path rows;
    for (const auto& r : files(dir, ".rows"))
      if (r.filename().string().find("-30-50.rows") != std::string::npos) rows = r;
    ASSERT_TRUE(fs::exists(snap));
    ASSERT_FALSE(rows.empty());
    d.apply(snap, rows);
    auto c = open_cache(root.path());
    std::optional<Session> s = c->longest_prefix(keys(third), 0);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->pos(), 30);  // the intact shorter snapshot
    EXPECT_EQ(next_logits(*s, rest), want);
    EXPECT_FALSE(fs::exists(snap));
    EXPECT_GE(c->stats().skipped_files, 1u);
  }
  // Files of another model copied into this model's folder are refused by their fingerprint.
  test::TempDir root;
  fs::path ours;
  {
    auto mine = open_cache(root.path());
    ours = mine->dir();
    auto other = open_cache(root.path(), 1ull << 30, fingerprint() ^ 1);
    put(*other, prefilled(first));
    for (const auto& e : fs::directory_iterator(other->dir()))
      fs::copy_file(e.path(), ours / e.path().filename());
  }
  auto c = open_cache(root.path());
  EXPECT_EQ(c->stats().snapshots, 0u);
  EXPECT_EQ(c->stats().skipped_files, 1u);
  EXPECT_TRUE(files(ours, ".snap").empty());
  EXPECT_TRUE(files(ours, ".rows").empty());  // orphaned once the snapshot went
}

TEST_P(PromptCacheTest, TwoContainersThatDifferOnlyInWeightsHaveDifferentFingerprints) {
  if (GetParam() != Arch::kKimiLinear) GTEST_SKIP() << "one pair of containers is enough";
  const fs::path a = container(Arch::kKimiLinear), b = dir_->path() / "kl6.waste";
  ASSERT_EQ(test::read_file(a / "manifest.json"), test::read_file(b / "manifest.json"));
  ModelHost other(b.string(), EngineOptions{});
  ModelHost same(a.string(), EngineOptions{});
  EXPECT_NE(content_fingerprint(other.container()), content_fingerprint(same.container()));
  EXPECT_EQ(content_fingerprint(same.container()), content_fingerprint(host_->container()));
}

// A snapshot written again after it went, while a longer one still holds its rows, reuses those
// rows: the bytes the tier counts stay the bytes on disk, and the rows outlive either snapshot.
TEST_P(PromptCacheTest, ARewrittenSnapshotSharesTheRowsALongerOneHolds) {
  test::TempDir root;
  std::vector<int32_t> first = prompt(40), second = prompt(65);
  fs::path dir;
  {
    auto c = open_cache(root.path());
    put(*c, prefilled(first));
    put(*c, prefilled(second));
    dir = c->dir();
  }
  fs::remove(dir / SnapshotInfo{40, prefix_hashes(keys(first)).back(), {}}.file_name());
  auto c = open_cache(root.path());
  put(*c, prefilled(first));
  auto on_disk = [&] {
    uint64_t n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.file_size();
    return n;
  };
  EXPECT_EQ(c->stats().bytes, on_disk());
  EXPECT_EQ(files(dir, ".rows").size(), 2u);
  // Both snapshots still restore exactly.
  std::vector<int32_t> longer = prompt(70);
  std::optional<Session> s = c->longest_prefix(keys(longer), 0);
  ASSERT_TRUE(s);
  std::vector<int32_t> rest(longer.begin() + 65, longer.end());
  EXPECT_EQ(next_logits(*s, rest), next_logits(prefilled(second), rest));
  std::optional<Session> f = c->longest_prefix(keys(prompt(41)), 0);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->pos(), 40);
}

TEST_P(PromptCacheTest, TheByteBoundIsKeptLeastRecentlyUsedFirst) {
  test::TempDir root;
  uint64_t one = 0;
  {
    auto probe = open_cache(root.path());
    put(*probe, prefilled(prompt(40, 1)));
    one = probe->stats().bytes;
  }
  fs::remove_all(root.path() / "");
  fs::create_directories(root.path());
  auto c = open_cache(root.path(), one * 2 + one / 2);
  for (int conv = 1; conv <= 4; conv++) put(*c, prefilled(prompt(40, conv)));
  DiskCacheStats st = c->stats();
  EXPECT_LE(st.bytes, one * 2 + one / 2);
  EXPECT_EQ(st.snapshots, 2u);
  EXPECT_EQ(st.evictions, 2u);
  EXPECT_TRUE(c->longest_prefix(keys(prompt(41, 4)), 0));
  EXPECT_FALSE(c->longest_prefix(keys(prompt(41, 1)), 0));
  // A snapshot larger than the whole bound is not written, and nothing else is lost for it.
  auto tiny = open_cache(root.path(), one / 2);
  put(*tiny, prefilled(prompt(40, 9)));
  EXPECT_EQ(tiny->stats().dropped_writes, 1u);
}

// The memory tier keeps one partial snapshot per prompt: a longer snapshot of the same positions
// replaces it, a lasting one is never replaced by a partial one, and other prompts' are kept.
TEST_P(PromptCacheTest, APartialSnapshotLastsUntilALongerOneOfItsPromptArrives) {
  if (GetParam() != Arch::kKimiLinear) GTEST_SKIP() << "the policy does not depend on the model";
  const std::vector<int32_t> p = prompt(60), other = prompt(60, 1);
  auto prefix = [&](size_t n) { return std::vector<int32_t>(p.begin(), p.begin() + n); };
  PrefixCache c(1ull << 30);
  c.put(prefilled(prefix(10)));
  c.put(prefilled(prefix(20)), {}, SnapshotKind::kPartial);
  c.put(prefilled(std::vector<int32_t>(other.begin(), other.begin() + 20)), {},
        SnapshotKind::kPartial);
  EXPECT_EQ(c.size(), 3u);
  c.put(prefilled(prefix(30)), {}, SnapshotKind::kPartial);  // replaces the 20
  EXPECT_EQ(c.size(), 3u);
  EXPECT_EQ(c.longest_prefix(prefix(25))->pos(), 10);        // the 10 is lasting
  c.put(prefilled(prefix(30)));                              // the same positions, lasting now
  c.put(prefilled(prefix(30)), {}, SnapshotKind::kPartial);  // and a partial copy keeps it so
  c.put(prefilled(prefix(40)));
  EXPECT_EQ(c.size(), 4u);  // 10, 30, 40 and the other prompt's partial
  EXPECT_EQ(c.longest_prefix(prefix(35))->pos(), 30);
  EXPECT_EQ(c.longest_prefix(other)->pos(), 20);
}

// After a restart the disk does not say which snapshots were partial, so one it restores into
// memory is replaced there by a longer snapshot of the same positions (the disk keeps its copy):
// still one snapshot per prompt in memory.
TEST_P(PromptCacheTest, ASnapshotRestoredFromDiskGivesWayToALongerOneInMemory) {
  if (GetParam() != Arch::kKimiLinear) GTEST_SKIP() << "the policy does not depend on the model";
  test::TempDir root;
  const std::vector<int32_t> p = prompt(60);
  auto prefix = [&](size_t n) { return std::vector<int32_t>(p.begin(), p.begin() + n); };
  {
    PrefixCache c(1ull << 30, open_cache(root.path()));
    c.put(prefilled(prefix(20)), {}, SnapshotKind::kPartial);
    c.disk()->flush();
  }
  PrefixCache c(1ull << 30, open_cache(root.path()));
  EXPECT_EQ(c.longest_prefix(prefix(30))->pos(), 20);  // from the disk, now in memory too
  EXPECT_EQ(c.size(), 1u);
  c.put(prefilled(prefix(30)), {}, SnapshotKind::kPartial);
  EXPECT_EQ(c.size(), 1u);
  c.disk()->flush();
  EXPECT_EQ(c.longest_prefix(prefix(25))->pos(), 20);  // the disk still has it
}

TEST_P(PromptCacheTest, AReadOnlyOrFullFolderSwitchesTheTierOff) {
  for (bool read_only : {true, false}) {
    SCOPED_TRACE(read_only ? "read-only" : "full");
    test::SmallFilesystem disk(256 * 1024, read_only);
    if (!disk.ok()) GTEST_SKIP() << "this machine lets no test mount a tmpfs";
    if (!read_only) fs::create_directories(model_cache_dir(disk.path(), fingerprint()));
    if (!read_only) {
      std::ofstream fill(disk / "filler", std::ios::binary);
      std::string block(4096, 'x');
      while (fill.write(block.data(), block.size())) {
      }
    }
    auto c = open_cache(disk.path());
    put(*c, prefilled(prompt(40)));  // never throws: the tier goes off
    EXPECT_FALSE(c->stats().enabled);
    EXPECT_FALSE(c->longest_prefix(keys(prompt(41)), 0));
  }
}

// A writer killed at random moments (kill -9) leaves only complete files under real names: each
// snapshot a later scan finds restores exactly the state that was written.
TEST_P(PromptCacheTest, KillNineDuringWritesNeverLeavesAFileThatIsRestored) {
  test::TempDir root;
  std::vector<Session> states;
  for (int conv = 0; conv < 6; conv++) states.push_back(prefilled(prompt(200, conv)));
  const uint64_t fp = fingerprint();
  const fs::path folder = model_cache_dir(root.path(), fp);
  fs::create_directories(folder);
  for (int round = 0; round < 8; round++) {
    pid_t child = fork();
    if (child == 0) {
      // No model threads exist here: the child only writes states computed before the fork,
      // rows first and then the snapshot, as the writer thread does, over and over.
      for (size_t i = (size_t)round;; i++) {
        const Session& s = states[i % states.size()];
        const std::vector<uint64_t> h = prefix_hashes(keys(s.tokens));
        RowSegment seg{0, s.pos(), h.back()};
        write_rows_file(folder, fp, s, seg);
        write_snapshot_file(folder, fp, s, keys(s.tokens), SnapshotInfo{s.pos(), h.back(), {seg}});
      }
    }
    ASSERT_GT(child, 0);
    usleep((useconds_t)(2000 + round * 3700));
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  auto c = open_cache(root.path());
  fs::path dir = c->dir();
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  size_t restored = 0;
  for (const Session& want : states) {
    std::vector<int32_t> longer = want.tokens;
    longer.push_back(1);
    std::optional<Session> s = c->longest_prefix(keys(longer), 0);
    if (!s) continue;
    restored++;
    EXPECT_EQ(s->tokens, want.tokens);
    for (size_t l = 0; l < want.kda.size(); l++) {
      EXPECT_EQ(s->kda[l].S, want.kda[l].S);
      EXPECT_EQ(s->mla[l].latents, want.mla[l].latents);
    }
  }
  EXPECT_EQ(c->stats().skipped_files, 0u);
  EXPECT_GT(restored, 0u);  // the writers got some snapshots through
}

// expert-usage.bin: what is written is read back; a damaged, truncated or foreign file is refused.
TEST_P(PromptCacheTest, TheExpertUsageFileRoundTripsAndRefusesBadCopies) {
  if (GetParam() != Arch::kKimiLinear) GTEST_SKIP() << "the file does not depend on the model";
  test::TempDir d;
  const fs::path f = d / kExpertUsageFile;
  const std::vector<ExpertUse> uses = {{1, 3, 40}, {2, 0, 7}, {1, 1, 1}};
  write_expert_usage(f, 42, uses);
  std::vector<ExpertUse> back = read_expert_usage(f, 42);
  ASSERT_EQ(back.size(), uses.size());
  for (size_t i = 0; i < uses.size(); i++) {
    EXPECT_EQ(back[i].layer, uses[i].layer);
    EXPECT_EQ(back[i].expert, uses[i].expert);
    EXPECT_EQ(back[i].uses, uses[i].uses);
  }
  EXPECT_THROW(read_expert_usage(f, 43), FormatError);  // another model's
  std::string bytes = test::read_file(f);
  bytes[bytes.size() - 2] ^= 1;
  test::write_file(f, bytes);
  EXPECT_THROW(read_expert_usage(f, 42), FormatError);
  test::write_file(f, bytes.substr(0, 70));
  EXPECT_THROW(read_expert_usage(f, 42), FormatError);
}

// `waste cache`: ls lists without changing anything, prune keeps the bound, clear empties.
TEST_P(PromptCacheTest, TheCacheCommandListsPrunesAndClears) {
  if (GetParam() != Arch::kKimiLinear) GTEST_SKIP() << "the command does not depend on the model";
  test::TempDir root;
  fs::path dir;
  {
    auto c = open_cache(root.path());
    put(*c, prefilled(prompt(40)));
    put(*c, prefilled(prompt(60)));
    dir = c->dir();
  }
  const std::string cmd =
      test::waste_binary().string() + " cache --prompt-cache-dir " + root.path().string() + " ";
  std::string out;
  ASSERT_EQ(test::run_command(cmd + "ls", &out), 0) << out;
  EXPECT_NE(out.find("2 snapshots"), std::string::npos) << out;
  EXPECT_NE(out.find("60 tokens"), std::string::npos) << out;
  EXPECT_EQ(files(dir, ".snap").size(), 2u);
  ASSERT_EQ(test::run_command(cmd + "prune --max 1", &out), 0) << out;
  EXPECT_NE(out.find("0 snapshots"), std::string::npos) << out;
  EXPECT_TRUE(files(dir, ".snap").empty());
  EXPECT_TRUE(files(dir, ".rows").empty());
  ASSERT_EQ(test::run_command(cmd + "clear", &out), 0) << out;
  EXPECT_FALSE(fs::exists(dir));
  EXPECT_EQ(test::run_command(cmd + "tidy", &out), 2);
  EXPECT_NE(out.find("'tidy' is not ls, prune or clear"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(cmd + "ls --max 1", &out), 2);
  EXPECT_EQ(test::run_command(cmd + "prune --max lots", &out), 2);
}

INSTANTIATE_TEST_SUITE_P(EveryArchitecture, PromptCacheTest,
                         ::testing::Values(Arch::kKimiLinear, Arch::kK3, Arch::kDeepSeekV3),
                         [](const auto& i) {
                           return i.param == Arch::kK3           ? "K3"
                                  : i.param == Arch::kDeepSeekV3 ? "DeepSeekV3"
                                                                 : "KimiLinear";
                         });

}  // namespace
}  // namespace waste
