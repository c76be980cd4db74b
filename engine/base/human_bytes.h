// Byte counts for people: what the planner, the downloader and the daemon's log print.
#pragma once

#include <cstdint>
#include <string>

namespace waste {

// "1.23 GiB" style.
std::string human_bytes(uint64_t n);

}  // namespace waste
