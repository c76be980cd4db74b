// Errors the engine reports. Every message names the file, field or object that is wrong, so a
// user can act on it without reading the code.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace waste {

// A container, session file or request that the engine refuses (bad format, bad shape, bad id).
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A read or write that failed or came back short.
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request the engine cannot honour with the given state or limits (context full, budget too
// small, id out of range).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename E = FormatError, typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace waste
