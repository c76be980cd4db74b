// The platform layer: everything the daemon does differently on Linux and macOS, behind one
// header, so no other file includes an OS-specific header or asks which OS it is on. Each OS has
// its own source (platform_linux.cpp, platform_macos.cpp; the build compiles only the one for the
// OS it targets). Plain POSIX file calls that mean the same on both stay where they are used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace waste {

// Direct reads bypass the page cache (O_DIRECT on Linux, F_NOCACHE on macOS): the expert cache
// decides what stays in RAM, and the disk benchmark measures the device, not the cache. Their
// buffers, offsets and lengths must all be multiples of this: Linux refuses O_DIRECT reads not
// aligned to the device's logical block (4096 covers every disk waste is meant for); F_NOCACHE
// has no rule of its own, so callers keep to the same one and the same reads run on both. One
// difference remains: F_NOCACHE stops new pages entering the cache, but pages of the file already
// cached (it was just written, or read without F_NOCACHE) still answer, where O_DIRECT always
// reads the device.
constexpr size_t kDirectIoAlign = 4096;

// Opens `path` read-only for direct reads, or returns -1 (errno set) where the OS or file system
// refuses. A file system may still refuse the reads themselves: callers probe one read.
int open_direct(const std::string& path);

// Tells the OS that reads of the (non-direct) file `fd` are random, so it does not read ahead
// bytes no one asked for. Best effort: does nothing where the OS has no such hint.
void advise_random_reads(int fd);

// Many direct reads in flight from one thread (io_uring on Linux), so a layer's misses reach the
// device together without a thread per read. Where the OS offers none, open() says why and the
// caller reads with threads instead.
class AsyncReader {
 public:
  struct Completion {
    uint64_t tag = 0;
    int result = 0;  // bytes read, or -errno
  };

  // Room for `depth` reads queued or in flight. Null, with the reason in `*why`, where the OS
  // lets this process have none (an old kernel, a seccomp filter, a container's policy).
  static std::unique_ptr<AsyncReader> open(unsigned depth, std::string* why);
  virtual ~AsyncReader() = default;

  // Queues a read of `len` bytes of `fd` at `offset` into `buf`; its completion carries `tag`
  // (any value but UINT64_MAX, which the reader keeps for itself).
  // At most `depth` reads may be queued or in flight at once.
  virtual void queue(int fd, void* buf, size_t len, uint64_t offset, uint64_t tag) = 0;
  // Sends what was queued, waits until at least one read completes or wake() is called, and
  // appends every completion that is ready to `out` (none after a bare wake). Returns an empty
  // string, or what failed if the reader itself broke (its reads are then lost).
  virtual std::string wait(std::vector<Completion>& out) = 0;
  // From any thread: makes a wait() under way return (or the next one, if none is).
  virtual void wake() = 0;
};

// What the engine may use of RAM: physical RAM, lowered by the OS's limit on this process where
// one applies (Linux: the smallest cgroup v1 or v2 limit on its cgroup or any ancestor; macOS:
// none).
struct UsableMemory {
  uint64_t bytes = 0;
  std::string source;  // "physical RAM" or the file that limits it
};
UsableMemory usable_memory();

// Linux's cgroup rule on a given hierarchy: `physical` lowered by the smallest finite limit that
// `proc_cgroup` (a /proc/self/cgroup) leads to under `root` (a /sys/fs/cgroup). Plain file
// reads, compiled everywhere, so that tests can lay out a fake hierarchy on any OS.
UsableMemory cgroup_limited(UsableMemory physical, const std::filesystem::path& root,
                            const std::filesystem::path& proc_cgroup);

// The most RAM this process has held resident since it started, in bytes.
uint64_t peak_rss_bytes();

// The arm64 CPU features the OS reports (Linux: the AT_HWCAP/AT_HWCAP2 words; macOS: the
// hw.optional sysctls), since reading the ID registers directly is not allowed everywhere. Only
// arm64 builds call it (engine/kernels/isa_arm64.cpp), so it is defined for them alone
// (platform_linux_arm64.cpp) and on macOS, where an Intel Mac reports none.
struct Arm64Features {
  bool neon = false;     // Advanced SIMD
  bool fp16 = false;     // half-precision vector arithmetic (Armv8.2 FP16)
  bool dotprod = false;  // SDOT/UDOT (Armv8.2 DotProd)
  bool i8mm = false;     // SMMLA/USDOT (Armv8.6 I8MM)
};
Arm64Features arm64_cpu_features();

// Tells the service manager the daemon's state ("READY=1", "STOPPING=1", "STATUS=..."), so that
// a `Type=notify` unit counts the daemon as serving only once the model is loaded. On Linux, when
// $NOTIFY_SOCKET names a unix datagram socket (a path, or an abstract name after '@'), the state
// is sent to it as one datagram (systemd's sd_notify protocol, written directly); otherwise, and
// on macOS, nothing happens. Returns what failed, or an empty string: best effort, a missing or
// unreachable socket is not an error of the daemon's.
std::string notify_service_manager(const std::string& state);

// Whether this OS has a service manager that notify_service_manager() can tell anything
// (Linux: systemd's protocol; macOS: launchd has none).
bool service_manager_notifications();

// How many threads the engine computes on when not told: the CPUs this process may run on (on
// Linux its affinity mask, which taskset and cpusets narrow). On macOS only the performance
// cores count: the thread pool splits work into equal parts, so a part on a slower efficiency
// core would hold back every step. At least 1.
int compute_cpus();

// Sizes the new, empty file `fd` to `bytes`, reserving its blocks on disk where the file system
// can (posix_fallocate on Linux, F_PREALLOCATE on macOS), so that a disk too small for it fails
// now rather than midway through filling it. Returns 0, or the errno of what failed: ENOSPC when
// the disk has no room. A file system that cannot reserve gets a plain (sparse) size instead.
int reserve_file(int fd, uint64_t bytes);

// The modification time of `path` in nanoseconds since the Unix epoch, or 0 where it cannot be
// read.
int64_t file_mtime_ns(const std::string& path);

// Whether the OS has seen the TCP connection on socket `fd` close (the peer reset it, or both
// sides have finished): a peer that only half-closed is still there. False while it is open and
// where the OS cannot tell.
bool tcp_peer_gone(int fd);

// For tests of a full or read-only disk: a tmpfs of `bytes` mounted on the empty folder `dir`
// (read-only when asked), resized, and unmounted. Each returns false where this process may not
// do it (on Linux, without the right to mount; macOS has no tmpfs): the tests that need one skip.
bool mount_scratch_tmpfs(const std::string& dir, uint64_t bytes, bool read_only);
bool resize_scratch_tmpfs(const std::string& dir, uint64_t bytes);
void unmount_scratch_tmpfs(const std::string& dir);

}  // namespace waste
