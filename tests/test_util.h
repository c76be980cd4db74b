// Small helpers shared by the test suites: scratch folders, fixture paths, running the CLI.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace waste::test {

// The source tree, as configured by CMake, and the release files and traces the suites read
// (tests/fixtures/, each file's source and licence in its README).
std::filesystem::path source_dir();
std::filesystem::path fixtures_dir();
// The `waste` executable under test.
std::filesystem::path waste_binary();

// The real K3 tokenizer from tests/fixtures/k3 (rank file and the release's specials),
// loaded once per test program.
const Tokenizer& k3_tokenizer();
// Kimi K2's vocabulary as Kimi-Linear ships it: the same ranks with the K2 chat and tool-call
// tokens at K2's ids (docs/PROMPT_FORMAT.md §1.2). With `think`, also <think> and </think> as
// single tokens, as in K2-Thinking's vocabulary.
const Tokenizer& k2_tokenizer(bool think = false);

// A fresh folder under the build tree's temp area, removed when the object goes away.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// A tmpfs of `bytes` mounted on a fresh folder (read-only when asked), unmounted when the object
// goes: a full or read-only disk for the tests of every writer (through the platform layer).
// ok() is false where this machine lets no test mount one (not root, or macOS); such tests skip,
// saying so.
class SmallFilesystem {
 public:
  SmallFilesystem(uint64_t bytes, bool read_only);
  ~SmallFilesystem();
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;
  bool ok() const { return mounted_; }
  const std::filesystem::path& path() const { return dir_.path(); }
  std::filesystem::path operator/(const std::string& name) const { return dir_ / name; }
  // Remounts with another size (a disk that got room again).
  bool resize(uint64_t bytes);

 private:
  TempDir dir_;
  bool mounted_ = false;
};

std::string read_file(const std::filesystem::path& p);

// A chat request on a Kimi-Linear `container` that runs `max_tokens` long: <|im_end|> is banned,
// so random weights cannot stop early.
std::string long_request(const std::filesystem::path& container, int max_tokens, bool stream);
void write_file(const std::filesystem::path& p, const std::string& bytes);

// The fenced block that follows the line "<!-- test: NAME -->" in README.md, without its fences
// and their indentation, with each (from, to) replaced: the configurations the README shows are
// the ones the tests run. Throws std::runtime_error when the marker, its block or a `from` is
// missing, so the README cannot drift from a test unnoticed.
std::string readme_snippet(
    const std::string& name,
    const std::vector<std::pair<std::string, std::string>>& substitutions = {});

// Polls `pred` every few milliseconds until it holds or `timeout` passes; whether it held.
bool eventually(const std::function<bool()>& pred,
                std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Runs a shell command line; returns its exit status and fills `out` with stdout+stderr (what
// the command line does not redirect itself: `... 2>/dev/null` keeps its stderr out).
int run_command(const std::string& cmd, std::string* out);

// Checks each (schema, JSON text) with Python's jsonschema (scripts/reference/validate_json.py,
// format checking on); returns its exit status (0: all valid) and its report in `out`.
int validate_json(const std::vector<std::pair<std::string, std::string>>& cases, std::string* out);

}  // namespace waste::test
