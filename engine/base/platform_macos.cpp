// The platform layer on macOS (see platform.h). Not yet built on macOS: written against the
// documented calls, to be compiled and tested there before it is relied on.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/sysctl.h>
#include <unistd.h>

#include "engine/base/platform.h"

namespace waste {

// F_NOCACHE has no alignment rule of its own; callers keep to kDirectIoAlign as on Linux, so the
// same reads run on both.
int open_direct(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0 && ::fcntl(fd, F_NOCACHE, 1) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

void advise_random_reads(int fd) {
  ::fcntl(fd, F_RDAHEAD, 0);
}

std::unique_ptr<AsyncReader> AsyncReader::open(unsigned, std::string* why) {
  *why = "asynchronous direct reads are not available on macOS";
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

std::string notify_service_manager(const std::string&) {
  return {};  // launchd has no readiness protocol
}

}  // namespace waste
