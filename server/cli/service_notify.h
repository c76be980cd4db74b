// The systemd readiness protocol (sd_notify), written directly: when $NOTIFY_SOCKET names a unix
// datagram socket (a path, or an abstract name after '@'), each state ("READY=1",
// "STOPPING=1", "STATUS=...") is sent to it as one datagram; otherwise nothing happens. With
// `Type=notify` systemd then knows the daemon is serving only once the model is loaded.
#pragma once

#include <string>

namespace waste::cli {

// Best effort: a missing or unreachable socket is not an error of the daemon's.
void notify_service(const std::string& state);

}  // namespace waste::cli
