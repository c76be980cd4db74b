#include "tests/test_util.h"

#include "prompt_templates/specials_file.h"
#include "protocol/json/json_writer.h"

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace waste::test {

std::filesystem::path shared_dir() {
  return WASTE_SHARED_DIR;
}
std::filesystem::path source_dir() {
  return WASTE_SOURCE_DIR;
}
std::filesystem::path waste_binary() {
  return WASTE_BINARY;
}

const Tokenizer& k3_tokenizer() {
  static const Tokenizer tok(
      shared_dir() / "fixtures/k3/tiktoken.model",
      read_specials_file((shared_dir() / "fixtures/k3/tokenizer_config.json").string()));
  return tok;
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

void write_file(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

int run_command(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
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
