// Every file the daemon and the commands write, onto a full disk (ENOSPC) and a read-only one
// (EROFS): each writer fails with a message that names the file and the reason, leaves nothing
// half-written under the name it was writing, and the daemon reports what stopped it.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/synth/synth.h"
#include "tests/http_client.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::string waste(const std::string& args) {
  return test::waste_binary().string() + " " + args;
}

// Everything under `dir`, for messages.
std::string listing(const fs::path& dir) {
  std::string out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) out += e.path().string() + "\n";
  return out;
}

struct Disk {
  const char* name;
  bool read_only;
  const char* reason;  // strerror of the failure
};

class DiskFullTest : public ::testing::TestWithParam<Disk> {
 protected:
  void SetUp() override {
    disk_ = std::make_unique<test::SmallFilesystem>(256 * 1024, GetParam().read_only);
    if (!disk_->ok()) GTEST_SKIP() << "this machine lets no test mount a tmpfs";
    if (!GetParam().read_only) fill(*disk_ / kFiller);
  }

  // Writes `path` until the disk has no room left.
  static void fill(const fs::path& path) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string block(4096, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }

  // Nothing but the filler is on the disk.
  bool clean() const {
    for (const auto& e : fs::directory_iterator(disk_->path()))
      if (e.path().filename() != kFiller) return false;
    return true;
  }

  static constexpr const char* kFiller = "filler";
  static void SetUpTestSuite() {
    models_ = new test::TempDir();
    write_synthetic(models_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 8});
  }
  static void TearDownTestSuite() { delete models_; }
  static std::string kl() { return (models_->path() / "kl.waste").string(); }

  std::unique_ptr<test::SmallFilesystem> disk_;
  static test::TempDir* models_;
};
test::TempDir* DiskFullTest::models_ = nullptr;

TEST_P(DiskFullTest, SynthFailsClearlyAndLeavesNoContainer) {
  std::string out;
  const fs::path target = *disk_ / "m.waste";
  EXPECT_EQ(test::run_command(waste("synth " + target.string() + " --preset tiny"), &out), 1)
      << out;
  EXPECT_NE(out.find(GetParam().reason), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(target)) << listing(disk_->path());
  EXPECT_TRUE(clean()) << "left behind:\n" << listing(disk_->path());
}

TEST_P(DiskFullTest, DumpedLogitsAreWholeOrAbsent) {
  std::string out;
  const fs::path target = *disk_ / "logits.bin";
  EXPECT_EQ(test::run_command(
                waste("eval " + kl() + " --ids 1,2,3 --threads 1 --dump-logits " + target.string()),
                &out),
            1)
      << out;
  EXPECT_NE(out.find(GetParam().reason), std::string::npos) << out;
  EXPECT_NE(out.find(target.string()), std::string::npos) << out;  // the file is named
  EXPECT_TRUE(clean()) << "left behind:\n" << listing(disk_->path());
}

TEST_P(DiskFullTest, ASavedChatSessionFailsWithoutEndingTheChat) {
  std::string out;
  const fs::path target = *disk_ / "chat.session";
  const std::string script = "printf 'hello\\n/save " + target.string() + "\\n/stats\\n' | " +
                             waste("chat " + kl() + " -n 4 --threads 1");
  EXPECT_EQ(test::run_command(script, &out), 0) << out;
  EXPECT_NE(out.find("error: "), std::string::npos) << out;
  EXPECT_NE(out.find(GetParam().reason), std::string::npos) << out;
  EXPECT_NE(out.find("position "), std::string::npos) << out;  // /stats after it still answered
  EXPECT_TRUE(clean()) << "left behind:\n" << listing(disk_->path());
}

// The daemon with no MODEL writes its demo model first: on a disk that cannot take it, /health
// says why and the daemon stops with exit code 1.
TEST_P(DiskFullTest, TheDaemonSaysWhyItCouldNotWriteItsDemoModel) {
  test::Daemon d({"--port", "0", "--threads", "1"}, {{"XDG_CACHE_HOME", disk_->path().string()}});
  EXPECT_EQ(d.wait_exit(60), 1) << d.log();
  EXPECT_NE(d.log().find("could not load the model"), std::string::npos) << d.log();
  EXPECT_NE(d.log().find(GetParam().reason), std::string::npos) << d.log();
}

INSTANTIATE_TEST_SUITE_P(Disks, DiskFullTest,
                         ::testing::Values(Disk{"full", false, "No space left on device"},
                                           Disk{"read_only", true, "Read-only file system"}),
                         [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace waste
