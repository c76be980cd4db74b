#include "tests/test_util.h"

#include "engine/base/platform.h"
#include "prompt_templates/specials_file.h"
#include "protocol/json/json_writer.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace waste::test {

std::filesystem::path source_dir() {
  return WASTE_SOURCE_DIR;
}
std::filesystem::path fixtures_dir() {
  return source_dir() / "tests/fixtures";
}
std::filesystem::path waste_binary() {
  return WASTE_BINARY;
}

const Tokenizer& k3_tokenizer() {
  static const Tokenizer tok(
      fixtures_dir() / "k3/tiktoken.model",
      read_specials_file((fixtures_dir() / "k3/tokenizer_config.json").string()));
  return tok;
}

const Tokenizer& k2_tokenizer(bool think) {
  static const std::vector<SpecialToken> k2 = {{163584, "[BOS]"},
                                               {163585, "[EOS]"},
                                               {163586, "<|im_end|>"},
                                               {163587, "<|im_user|>"},
                                               {163588, "<|im_assistant|>"},
                                               {163594, "<|im_system|>"},
                                               {163595, "<|tool_calls_section_begin|>"},
                                               {163596, "<|tool_calls_section_end|>"},
                                               {163597, "<|tool_call_begin|>"},
                                               {163598, "<|tool_call_argument_begin|>"},
                                               {163599, "<|tool_call_end|>"},
                                               {163601, "<|im_middle|>"}};
  auto with_think = k2;
  with_think.push_back({163606, "<think>"});
  with_think.push_back({163607, "</think>"});
  static const Tokenizer plain(fixtures_dir() / "k3/tiktoken.model", k2);
  static const Tokenizer thinking(fixtures_dir() / "k3/tiktoken.model", with_think);
  return think ? thinking : plain;
}

TempDir::TempDir() {
  std::random_device rd;
  auto base = std::filesystem::temp_directory_path();
  for (int i = 0; i < 100; i++) {
    auto p = base / ("waste-test-" + std::to_string(rd()));
    if (std::filesystem::create_directory(p)) {
      path_ = p;
      return;
    }
  }
  throw std::runtime_error("could not create a temporary folder");
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string readme_snippet(const std::string& name,
                           const std::vector<std::pair<std::string, std::string>>& substitutions) {
  const std::string readme = read_file(source_dir() / "README.md");
  const std::string marker = "<!-- test: " + name + " -->\n";
  const size_t at = readme.find(marker);
  if (at == std::string::npos)
    throw std::runtime_error("README.md has no '" + marker.substr(0, marker.size() - 1) + "'");
  // The fence is the next line; its indentation (a list item's) is taken off every line.
  std::istringstream lines(readme.substr(at + marker.size()));
  std::string line;
  std::getline(lines, line);
  const size_t indent = line.find_first_not_of(' ');
  if (indent == std::string::npos || line.compare(indent, 3, "```") != 0)
    throw std::runtime_error("README.md: no fenced block after the marker of '" + name + "'");
  std::string text;
  bool closed = false;
  while (std::getline(lines, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first == indent && line.compare(first, 3, "```") == 0) {
      closed = true;
      break;
    }
    text += line.substr(std::min(indent, first == std::string::npos ? line.size() : first)) + "\n";
  }
  if (!closed) throw std::runtime_error("README.md: the block of '" + name + "' is not closed");
  for (const auto& [from, to] : substitutions) {
    size_t pos = text.find(from);
    if (pos == std::string::npos)
      throw std::runtime_error("README.md: the block of '" + name + "' has no '" + from + "'");
    for (; pos != std::string::npos; pos = text.find(from, pos + to.size()))
      text.replace(pos, from.size(), to);
  }
  return text;
}

std::string long_request(const std::filesystem::path& container, int max_tokens, bool stream) {
  std::string specials = read_file(container / "specials.json");
  size_t at = specials.find("<|im_end|>");
  size_t id_at = specials.rfind("\"id\": ", at) + 6;
  std::string id = specials.substr(id_at, specials.find(',', id_at) - id_at);
  return R"({"messages":[{"role":"user","content":"go"}],"temperature":1,"seed":3,"max_tokens":)" +
         std::to_string(max_tokens) + R"(,"logit_bias":{")" + id + R"(":-100},"stream":)" +
         (stream ? "true" : "false") + "}";
}

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

SmallFilesystem::SmallFilesystem(uint64_t bytes, bool read_only)
    : mounted_(mount_scratch_tmpfs(dir_.path().string(), bytes, read_only)) {}

SmallFilesystem::~SmallFilesystem() {
  if (mounted_) unmount_scratch_tmpfs(dir_.path().string());
}

bool SmallFilesystem::resize(uint64_t bytes) {
  return resize_scratch_tmpfs(dir_.path().string(), bytes);
}

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

int run_command(const std::string& cmd, std::string* out) {
  // In a subshell, so the line's own redirections come after ours: appended to the line, "2>&1"
  // would undo a "2>/dev/null" at its end.
  FILE* p = popen(("(" + cmd + ") 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) s.append(buf, n);
  int st = pclose(p);
  if (out) *out = s;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int validate_json(const std::vector<std::pair<std::string, std::string>>& cases, std::string* out) {
  TempDir tmp;
  std::string lines;
  for (const auto& [schema, text] : cases) {
    std::string quoted;
    append_json_string(&quoted, text);
    lines += "{\"schema\":" + schema + ",\"output\":" + quoted + "}\n";
  }
  write_file(tmp / "cases.jsonl", lines);
  return run_command("/usr/bin/python3 " +
                         (source_dir() / "scripts/reference/validate_json.py").string() + " < " +
                         (tmp / "cases.jsonl").string(),
                     out);
}

}  // namespace waste::test
