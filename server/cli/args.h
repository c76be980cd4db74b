// A small command-line parser: positional words and --flags (with a value or boolean), checked
// against what each command declares, so a typo is an error rather than silently ignored.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace waste::cli {

class Args {
 public:
  // `valued` flags take the next word as their value; `boolean` flags take none.
  Args(int argc, char** argv, int first, const std::set<std::string>& valued,
       const std::set<std::string>& boolean);

  const std::vector<std::string>& positional() const { return positional_; }
  bool has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::optional<std::string> get(const std::string& flag) const;
  std::string get_or(const std::string& flag, const std::string& def) const;
  // A flag's number in [lo, hi] (`def` when it is not given); UsageFailure naming the flag.
  int64_t get_int(const std::string& flag, int64_t def, int64_t lo, int64_t hi) const;
  double get_number(const std::string& flag, double def, double lo, double hi) const;
  // Every value of a flag given more than once (`--image a.png --image b.png`), in order; get()
  // returns the last.
  std::vector<std::string> get_all(const std::string& flag) const;

 private:
  std::vector<std::string> positional_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;
};

// Thrown for a bad command line; main prints it with the usage line.
struct UsageFailure {
  std::string message;
};

}  // namespace waste::cli
