// The platform layer on Linux (see platform.h).
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "engine/base/platform.h"

namespace waste {

int open_direct(const std::string& path) {
  return ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
}

void advise_random_reads(int fd) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
}

namespace {

// An io_uring with one extra entry for the read of an eventfd that wake() pokes: a thread blocked
// in the ring does not see a condition variable, and without it a new read would wait for an
// unrelated completion.
class UringReader final : public AsyncReader {
 public:
  UringReader() = default;
  UringReader(const UringReader&) = delete;
  UringReader& operator=(const UringReader&) = delete;

  // Returns 0 or -errno.
  int init(unsigned depth) {
    if (int rc = io_uring_queue_init(depth + 1, &ring_, 0); rc < 0) return rc;
    ready_ = true;
    wake_fd_ = eventfd(0, EFD_CLOEXEC);
    if (wake_fd_ >= 0) arm_wake();
    return 0;
  }

  ~UringReader() override {
    if (ready_) io_uring_queue_exit(&ring_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  void queue(int fd, void* buf, size_t len, uint64_t offset, uint64_t tag) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, offset);
    io_uring_sqe_set_data64(sqe, tag);
  }

  std::string wait(std::vector<Completion>& out) override {
    io_uring_submit(&ring_);
    io_uring_cqe* cqe = nullptr;
    int rc;
    while ((rc = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR) {
    }
    if (rc < 0) return fmt::format("io_uring wait failed: {}", std::strerror(-rc));
    while (cqe) {
      const uint64_t tag = io_uring_cqe_get_data64(cqe);
      const int res = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      if (tag == kWakeTag)
        arm_wake();  // sent with the next wait's submit
      else
        out.push_back({tag, res});
      if (io_uring_peek_cqe(&ring_, &cqe) != 0) cqe = nullptr;
    }
    return {};
  }

  void wake() override {
    if (wake_fd_ < 0) return;
    uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof one) < 0) {
      // The counter cannot overflow at these rates; a failed poke only delays the read.
    }
  }

 private:
  static constexpr uint64_t kWakeTag = ~0ull;

  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, wake_fd_, &wake_counter_, sizeof wake_counter_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  io_uring ring_{};
  bool ready_ = false;
  int wake_fd_ = -1;
  uint64_t wake_counter_ = 0;
};

}  // namespace

std::unique_ptr<AsyncReader> AsyncReader::open(unsigned depth, std::string* why) {
  auto r = std::make_unique<UringReader>();
  if (int rc = r->init(depth); rc < 0) {
    *why = fmt::format("io_uring is not available ({})", std::strerror(-rc));
    return nullptr;
  }
  return r;
}

UsableMemory usable_memory() {
  UsableMemory m;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  m.bytes = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
  m.source = "physical RAM";
  return cgroup_limited(m, "/sys/fs/cgroup", "/proc/self/cgroup");
}

uint64_t peak_rss_bytes() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return (uint64_t)u.ru_maxrss * 1024;  // Linux counts kibibytes
}

int compute_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return (int)std::max(1u, std::thread::hardware_concurrency());
}

int reserve_file(int fd, uint64_t bytes) {
  const int rc = ::posix_fallocate(fd, 0, (off_t)bytes);
  if (rc == 0 || rc == ENOSPC) return rc;
  return ::ftruncate(fd, (off_t)bytes) == 0 ? 0 : errno;  // e.g. EOPNOTSUPP: no reserving here
}

int64_t file_mtime_ns(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

bool tcp_peer_gone(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  return ::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 && info.tcpi_state == TCP_CLOSE;
}

bool service_manager_notifications() {
  return true;
}

std::string notify_service_manager(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::strlen(path);
  if (n >= sizeof addr.sun_path) return {};
  std::memcpy(addr.sun_path, path, n);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  const socklen_t len = (socklen_t)(offsetof(sockaddr_un, sun_path) + n);
  std::string err;
  if (::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, (const sockaddr*)&addr, len) < 0)
    err = std::strerror(errno);
  ::close(fd);
  return err;
}

bool mount_scratch_tmpfs(const std::string& dir, uint64_t bytes, bool read_only) {
  const std::string opts = "size=" + std::to_string(bytes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) != 0) return false;
  if (!read_only) return true;
  if (::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, opts.c_str()) == 0)
    return true;
  unmount_scratch_tmpfs(dir);
  return false;
}

bool resize_scratch_tmpfs(const std::string& dir, uint64_t bytes) {
  const std::string opts = "size=" + std::to_string(bytes);
  return ::mount(nullptr, dir.c_str(), nullptr, MS_REMOUNT, opts.c_str()) == 0;
}

void unmount_scratch_tmpfs(const std::string& dir) {
  ::umount2(dir.c_str(), MNT_DETACH);
}

}  // namespace waste
