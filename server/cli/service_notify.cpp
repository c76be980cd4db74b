#include "server/cli/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace waste::cli {

void notify_service(const std::string& state) {
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || !*path) return;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const size_t n = std::strlen(path);
  if (n >= sizeof addr.sun_path) return;
  std::memcpy(addr.sun_path, path, n);
  if (addr.sun_path[0] == '@') addr.sun_path[0] = '\0';  // an abstract socket
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const socklen_t len = (socklen_t)(offsetof(sockaddr_un, sun_path) + n);
  if (::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL, (const sockaddr*)&addr, len) < 0)
    spdlog::warn("could not tell the service manager '{}': {}", state, std::strerror(errno));
  ::close(fd);
}

}  // namespace waste::cli
