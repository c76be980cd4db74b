#include "server/cli_model.h"

#include <cstdlib>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "engine/error.h"
#include "prompt_templates/specials_file.h"

namespace waste::cli {

const std::set<std::string> kModelValuedFlags = {"--threads",    "--chunk",  "--ids",
                                                 "--ctx",        "--budget", "--lookahead",
                                                 "--io-threads", "--policy", "--io-backend"};

int64_t context_length(const Args& a) {
  return a.get_int("--ctx", 4096, 1, int64_t{1} << 24);
}

std::optional<uint64_t> requested_budget(const Args& a) {
  if (auto b = a.get("--budget")) return parse_bytes(*b);
  return std::nullopt;
}

LoadedModel load_model(const std::string& path, const Args& a) {
  LoadedModel m;
  OpenOptions opt;
  opt.verify_crc = a.has("--verify");
  opt.load_trunk = false;
  auto probe = Container::open(path, opt);  // manifest only: refuse a bad budget before loading
  m.plan = plan_memory(probe->manifest(), context_length(a));
  m.budget = plan_budget(m.plan, requested_budget(a), usable_memory().bytes);
  probe.reset();
  opt.load_trunk = true;
  m.container = Container::open(path, opt);
  ModelOptions mo;
  mo.threads = (int)a.get_int("--threads", 0, 0, 1024);
  mo.chunk = (int)a.get_int("--chunk", 64, 1, 4096);
  const char* env = std::getenv("WASTE_LOOKAHEAD");
  int64_t la_default = env ? std::atoi(env) : 6;
  mo.lookahead = (int)a.get_int("--lookahead", la_default, 0, 64);
  mo.store.io_threads = (int)a.get_int("--io-threads", mo.store.io_threads, 0, 64);
  std::string backend = a.get_or("--io-backend", "uring");
  if (backend != "threads" && backend != "uring")
    throw UsageFailure{fmt::format("--io-backend: '{}' is not threads or uring", backend)};
  mo.store.backend = backend == "uring" ? IoBackend::kUring : IoBackend::kThreads;
  mo.store.policy = parse_policy(a.get_or("--policy", policy_name(mo.store.policy)));
  mo.store.cache_bytes = m.budget.cache_bytes;
  m.model = std::make_unique<Model>(*m.container, mo);
  if (auto tp = m.container->tokenizer_path())
    m.tokenizer = std::make_unique<Tokenizer>(*tp, m.container->specials());
  return m;
}

std::vector<int32_t> prompt_ids(const LoadedModel& m, const Args& a) {
  const auto& pos = a.positional();
  if (auto ids = a.get("--ids")) {
    if (pos.size() != 1) throw UsageFailure{"give either PROMPT or --ids, not both"};
    std::vector<int32_t> out;
    size_t at = 0;
    while (at <= ids->size()) {
      size_t comma = ids->find(',', at);
      std::string item =
          ids->substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      size_t used = 0;
      long long v = -1;
      try {
        v = std::stoll(item, &used);
      } catch (...) {
        used = 0;
      }
      if (used == 0 || used != item.size() || v < INT32_MIN || v > INT32_MAX)
        throw UsageFailure{fmt::format("--ids: '{}' is not a token id", item)};
      out.push_back((int32_t)v);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return out;
  }
  if (pos.size() != 2) throw UsageFailure{"expected MODEL and PROMPT (or --ids)"};
  if (!m.tokenizer)
    throw UsageFailure{"this container has no tokenizer.model; pass token ids with --ids"};
  std::string text = pos[1];
  if (text == "-") text.assign(std::istreambuf_iterator<char>(std::cin), {});
  std::vector<int32_t> out;
  for (int id : m.tokenizer->encode_text(text)) out.push_back(id);
  return out;
}

std::string decode_text(const LoadedModel& m, const std::vector<int32_t>& ids) {
  if (!m.tokenizer) return "";
  std::vector<int> v(ids.begin(), ids.end());
  return m.tokenizer->decode(v);
}

// From MODEL (its tokenizer.model and specials.json) or --tokenizer FILE (+ --specials FILE:
// a tokenizer_config.json or a specials.json).
std::unique_ptr<Tokenizer> open_tokenizer(const Args& a, size_t model_index) {
  if (auto t = a.get("--tokenizer")) {
    std::vector<SpecialToken> specials;
    if (auto sp = a.get("--specials")) specials = read_specials_file(*sp);
    return std::make_unique<Tokenizer>(*t, specials);
  }
  if (a.positional().size() <= model_index)
    throw UsageFailure{"expected MODEL or --tokenizer FILE"};
  OpenOptions o;
  o.load_trunk = false;
  auto c = Container::open(a.positional()[model_index], o);
  if (!c->tokenizer_path())
    waste::fail("{}: the container has no tokenizer.model", c->dir().string());
  return std::make_unique<Tokenizer>(*c->tokenizer_path(), c->specials());
}

}  // namespace waste::cli
