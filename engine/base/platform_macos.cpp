// The platform layer on macOS (see platform.h). Never compiled by this project's own machines:
// written against Apple's headers and manual pages, built and tested only by the hosted macOS
// workflow (.github/workflows/macos.yml), so read it before relying on it.
#include <sys/types.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netinet/tcp_fsm.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "engine/base/platform.h"

namespace waste {

namespace {

// A sysctl integer by name, or 0 where this macOS has none by that name.
int sysctl_int(const char* name) {
  int value = 0;
  size_t size = sizeof value;
  if (sysctlbyname(name, &value, &size, nullptr, 0) != 0 || size != sizeof value) return 0;
  return value;
}

}  // namespace

// F_NOCACHE is a property of the open file, set after open(); see kDirectIoAlign for what it does
// not do.
int open_direct(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ::fcntl(fd, F_NOCACHE, 1) == -1) {
    const int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

void advise_random_reads(int fd) {
  ::fcntl(fd, F_RDAHEAD, 0);
}

// None yet: macOS's POSIX AIO (at most kern.aioprocmax reads in flight per process) is the
// candidate, unmeasured; until then the expert store reads with threads, as it does wherever
// io_uring is refused.
std::unique_ptr<AsyncReader> AsyncReader::open(unsigned, std::string* why) {
  *why = "macOS has no asynchronous reader here; the expert store reads with threads";
  return nullptr;
}

UsableMemory usable_memory() {
  uint64_t bytes = 0;
  size_t size = sizeof bytes;
  if (sysctlbyname("hw.memsize", &bytes, &size, nullptr, 0) != 0) bytes = 0;
  return {bytes, "physical RAM"};
}

namespace {

// A hw.optional flag: 1 where the CPU has the feature, 0 or absent (an older macOS, an Intel
// Mac) where it does not.
bool sysctl_flag(const char* name) {
  int value = 0;
  size_t size = sizeof value;
  return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}

}  // namespace

Arm64Features arm64_cpu_features() {
  Arm64Features f;
  f.neon = sysctl_flag("hw.optional.neon") || sysctl_flag("hw.optional.AdvSIMD");
  f.fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16") || sysctl_flag("hw.optional.neon_fp16");
  f.dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
  f.i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
  return f;
}

uint64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (uint64_t)u.ru_maxrss;  // macOS counts bytes
}

// hw.perflevel0 is the fastest kind of core (macOS 12 on); a Mac with one kind of core has
// only perflevel0, so it counts them all.
int compute_cpus() {
  if (int n = sysctl_int("hw.perflevel0.logicalcpu"); n > 0) return n;
  if (int n = sysctl_int("hw.logicalcpu"); n > 0) return n;
  return (int)std::max(1u, std::thread::hardware_concurrency());
}

// F_PREALLOCATE reserves blocks past the end of the file but leaves its size alone, hence the
// ftruncate. A contiguous run is asked for first, then any blocks.
int reserve_file(int fd, uint64_t bytes) {
  fstore_t store{};
  store.fst_flags = F_ALLOCATECONTIG | F_ALLOCATEALL;
  store.fst_posmode = F_PEOFPOSMODE;
  store.fst_offset = 0;
  store.fst_length = (off_t)bytes;
  if (::fcntl(fd, F_PREALLOCATE, &store) == -1) {
    store.fst_flags = F_ALLOCATEALL;
    if (::fcntl(fd, F_PREALLOCATE, &store) == -1 && errno == ENOSPC) return ENOSPC;
  }
  return ::ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;
}

int64_t file_mtime_ns(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return (int64_t)st.st_mtimespec.tv_sec * 1000000000 + st.st_mtimespec.tv_nsec;
}

// A connection whose protocol block is already gone answers ECONNRESET.
bool tcp_peer_gone(int fd) {
  tcp_connection_info info{};
  socklen_t len = sizeof info;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONNECTION_INFO, &info, &len) != 0)
    return errno == ECONNRESET;
  return info.tcpi_state == TCPS_CLOSED;
}

bool service_manager_notifications() {
  return false;
}

std::string notify_service_manager(const std::string&) {
  return {};  // launchd has no readiness protocol
}

bool mount_scratch_tmpfs(const std::string&, uint64_t, bool) {
  return false;
}

bool resize_scratch_tmpfs(const std::string&, uint64_t) {
  return false;
}

void unmount_scratch_tmpfs(const std::string&) {}

}  // namespace waste
