// Stop strings over streamed text: text is released only once it can no longer be the start of
// a stop string, so a client never sees part of a stop sequence.
#pragma once

#include <string>
#include <vector>

namespace waste {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds text; returns what is safe to emit. After a stop string is found, stopped() is true,
  // the returned text ends just before it, and later pushes return nothing.
  std::string push(const std::string& text);
  // What is still held back (at the end of generation it is emitted).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string found (the one that occurs first), once stopped().
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace waste
