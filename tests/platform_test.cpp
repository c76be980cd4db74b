// The platform layer (engine/base/platform.h): the cgroup rule on a fake hierarchy, direct reads,
// the asynchronous reader, peak RSS, the CPU count, reserved files, modification times and the
// TCP peer check. The readiness notification is reliability_test's: it takes a daemon that loads
// a model.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/base/platform.h"
#include "tests/test_util.h"

namespace waste {
namespace {

constexpr uint64_t G = 1ull << 30;

TEST(UsableMemory, HonoursTheSmallestCgroupLimitV2AndV1) {
  test::TempDir d;
  namespace fs = std::filesystem;
  const UsableMemory physical{64 * G, "physical RAM"};
  fs::create_directories(d / "cg/a/b");
  test::write_file(d / "cg/a/memory.max", "8589934592\n");
  test::write_file(d / "cg/a/b/memory.max", "max\n");
  test::write_file(d / "cg/a/b/memory.high", "6442450944\n");
  test::write_file(d / "self", "0::/a/b\n");
  UsableMemory m = cgroup_limited(physical, d / "cg", d / "self");
  EXPECT_EQ(m.bytes, 6 * G);
  EXPECT_NE(m.source.find("memory.high"), std::string::npos);

  fs::create_directories(d / "v1/memory/svc");
  test::write_file(d / "v1/memory/svc/memory.limit_in_bytes", "2147483648\n");
  test::write_file(d / "v1/memory/memory.limit_in_bytes", "9223372036854771712\n");
  test::write_file(d / "self1", "4:cpu,cpuacct:/x\n7:memory:/svc\n");
  m = cgroup_limited(physical, d / "v1", d / "self1");
  EXPECT_EQ(m.bytes, 2 * G);
  // No limits: physical RAM.
  test::write_file(d / "self2", "0::/nothing\n");
  m = cgroup_limited(physical, d / "cg", d / "self2");
  EXPECT_EQ(m.source, "physical RAM");
  EXPECT_EQ(m.bytes, 64 * G);
  // A limit above physical RAM does not raise it.
  m = cgroup_limited({G, "physical RAM"}, d / "cg", d / "self");
  EXPECT_EQ(m.bytes, G);
}

TEST(UsableMemory, ThisMachineHasSome) {
  UsableMemory m = usable_memory();
  EXPECT_GT(m.bytes, 64ull << 20);
  EXPECT_FALSE(m.source.empty());
}

TEST(ComputeCpus, AtLeastOneAndNoMoreThanTheMachineHas) {
  const int n = compute_cpus();
  EXPECT_GE(n, 1);
  const int machine = (int)std::thread::hardware_concurrency();  // 0 where unknown
  if (machine > 0) {
    EXPECT_LE(n, machine);
  }
}

TEST(ReserveFile, SizesTheFileAndNamesAFullDisk) {
  test::TempDir d;
  int fd = ::open((d / "f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(reserve_file(fd, 3 << 20), 0);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 3 << 20);
  ::close(fd);

  test::SmallFilesystem disk(1 << 20, false);
  if (!disk.ok()) GTEST_SKIP() << "this machine lets no test mount a tmpfs";
  fd = ::open((disk / "f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(reserve_file(fd, 4 << 20), ENOSPC);
  ::close(fd);
}

TEST(FileMtime, ReadsNanoseconds) {
  test::TempDir d;
  test::write_file(d / "f", "x");
  const int64_t ns = 1700000000123456789;
  const timespec t[2] = {{0, UTIME_OMIT}, {(time_t)(ns / 1000000000), (long)(ns % 1000000000)}};
  ASSERT_EQ(::utimensat(AT_FDCWD, (d / "f").c_str(), t, 0), 0);
  EXPECT_EQ(file_mtime_ns((d / "f").string()), ns);
  EXPECT_EQ(file_mtime_ns((d / "missing").string()), 0);
}

// A loopback connection, the server's end and the client's.
struct TcpPair {
  TcpPair() {
    int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (listener < 0 || ::bind(listener, (sockaddr*)&a, sizeof a) != 0 ||
        ::listen(listener, 1) != 0 || ::getsockname(listener, (sockaddr*)&a, &len) != 0)
      throw std::runtime_error("cannot listen on loopback");
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    if (client < 0 || ::connect(client, (sockaddr*)&a, sizeof a) != 0)
      throw std::runtime_error("cannot connect on loopback");
    server = ::accept(listener, nullptr, nullptr);
    ::close(listener);
  }
  ~TcpPair() {
    if (client >= 0) ::close(client);
    ::close(server);
  }
  TcpPair(const TcpPair&) = delete;
  TcpPair& operator=(const TcpPair&) = delete;
  int server = -1, client = -1;
};

// The daemon's probe of a client that stopped sending: one that only half-closed still waits for
// its answer; one that reset the connection is gone.
TEST(TcpPeerGone, AHalfCloseIsNotGoneAResetIs) {
  TcpPair half;
  EXPECT_FALSE(tcp_peer_gone(half.server));
  ASSERT_EQ(::shutdown(half.client, SHUT_WR), 0);
  char c;
  ASSERT_EQ(::recv(half.server, &c, 1, 0), 0);  // the FIN has arrived
  EXPECT_FALSE(tcp_peer_gone(half.server));

  TcpPair reset;
  linger abort_on_close{1, 0};  // close() sends a reset
  ASSERT_EQ(
      ::setsockopt(reset.client, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close), 0);
  ::close(reset.client);
  reset.client = -1;
  EXPECT_TRUE(test::eventually([&] { return tcp_peer_gone(reset.server); }));
}

// A file of `n` bytes, byte i being i * 7 mod 251 (no period that divides the alignment).
std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = (char)(i * 7 % 251);
  return s;
}

struct AlignedBytes {
  explicit AlignedBytes(size_t n)
      : p(static_cast<char*>(std::aligned_alloc(kDirectIoAlign, n))), size(n) {}
  ~AlignedBytes() { std::free(p); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  char* p;
  size_t size;
};

// Direct reads of aligned blocks return the file's bytes; a file system that refuses direct I/O
// (tmpfs) refuses it at open with EINVAL, which callers take as "read through the cache".
TEST(DirectRead, AlignedBlocksReadBack) {
  test::TempDir d;
  const std::string bytes = pattern(4 * kDirectIoAlign);
  test::write_file(d / "f", bytes);
  int fd = open_direct((d / "f").string());
  if (fd < 0) {
    EXPECT_EQ(errno, EINVAL);
    GTEST_SKIP() << "the temp folder's file system refuses direct reads";
  }
  AlignedBytes buf(2 * kDirectIoAlign);
  ASSERT_EQ(::pread(fd, buf.p, buf.size, (off_t)kDirectIoAlign), (ssize_t)buf.size);
  EXPECT_EQ(std::string(buf.p, buf.size), bytes.substr(kDirectIoAlign, buf.size));
  ::close(fd);
  EXPECT_EQ(open_direct((d / "missing").string()), -1);
  EXPECT_EQ(errno, ENOENT);
}

// Where the OS has an asynchronous reader: reads complete with their tags and bytes, a short one
// reports what it got, a bad descriptor reports its errno, and wake() ends a wait with nothing.
TEST(AsyncReader, ReadsCompleteWithTheirTagsAndWakeEndsAWait) {
  std::string why;
  std::unique_ptr<AsyncReader> r = AsyncReader::open(4, &why);
  if (!r) {
    EXPECT_FALSE(why.empty());
    GTEST_SKIP() << why;
  }
  test::TempDir d;
  const std::string bytes = pattern(3 * kDirectIoAlign);
  test::write_file(d / "f", bytes);
  int fd = ::open((d / "f").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  AlignedBytes a(kDirectIoAlign), b(2 * kDirectIoAlign);
  r->queue(fd, a.p, a.size, 2 * kDirectIoAlign, 7);
  r->queue(fd, b.p, b.size, 2 * kDirectIoAlign, 9);  // runs past the end: short
  r->queue(-1, b.p, b.size, 0, 11);
  std::vector<AsyncReader::Completion> done;
  while (done.size() < 3) ASSERT_EQ(r->wait(done), "");
  std::map<uint64_t, int> result;
  for (const AsyncReader::Completion& c : done) result[c.tag] = c.result;
  const int block = (int)kDirectIoAlign;
  EXPECT_EQ(result, (std::map<uint64_t, int>{{7, block}, {9, block}, {11, -EBADF}}));
  EXPECT_EQ(std::string(a.p, a.size), bytes.substr(2 * kDirectIoAlign));
  r->wake();
  done.clear();
  EXPECT_EQ(r->wait(done), "");
  EXPECT_TRUE(done.empty());
  ::close(fd);
}

TEST(PeakRss, GrowsWhenMoreMemoryIsTouched) {
  const uint64_t before = peak_rss_bytes();
  EXPECT_GT(before, 0u);
  const size_t n = 256ull << 20;
  std::vector<char> big(n);
  // Written through a volatile pointer, so every page is resident: clang elides a vector that is
  // filled and then only read back (with libc++, big(n, 1) and a read of its last byte never
  // allocated at all).
  volatile char* bytes = big.data();
  for (size_t i = 0; i < n; i += 4096) bytes[i] = 1;
  EXPECT_GE(peak_rss_bytes(), before + n / 2);
  EXPECT_EQ(bytes[n - 1], 0);
}

}  // namespace
}  // namespace waste
