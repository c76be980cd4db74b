#include "server/cli/model_args.h"

#include <filesystem>
#include <iostream>
#include <iterator>

#include <fmt/format.h>

#include "config/option_values.h"
#include "engine/base/error.h"
#include "engine/format/container.h"
#include "prompt_templates/chat_format.h"
#include "prompt_templates/specials_file.h"

extern char** environ;

namespace waste::cli {

std::set<std::string> model_valued_flags(std::set<std::string> extra) {
  for (const Option<EngineOptions>& o : engine_option_table())
    if (!o.boolean) extra.insert(o.doc.flag);
  extra.insert("--ids");
  return extra;
}

std::set<std::string> model_boolean_flags(std::set<std::string> extra) {
  for (const Option<EngineOptions>& o : engine_option_table())
    if (o.boolean) extra.insert(o.doc.flag);
  return extra;
}

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; e++) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

EngineOptions engine_options(const Args& a) {
  EngineOptions eo;
  const std::map<std::string, std::string> env = environment();
  for (const Option<EngineOptions>& o : engine_option_table()) {
    auto apply = [&](const std::string& value, const std::string& source) {
      try {
        o.set(eo, value);
      } catch (const UsageError& e) {
        throw UsageFailure{fmt::format("{} ({}): {}", source, o.doc.flag, e.what())};
      }
    };
    if (auto it = env.find(o.doc.env); it != env.end()) apply(it->second, o.doc.env);
    if (auto v = a.get(o.doc.flag)) apply(o.boolean && v->empty() ? "true" : *v, o.doc.flag);
  }
  return eo;
}

std::unique_ptr<ModelHost> open_model(const std::string& path, const Args& a) {
  return std::make_unique<ModelHost>(path, engine_options(a));
}

std::vector<int32_t> end_ids(const ModelHost& m) {
  if (m.tokenizer()) return ChatFormat(*m.tokenizer(), m.eos(), {}).end_ids();
  if (auto eos = m.eos()) return {*eos};
  return {};
}

std::vector<int32_t> prompt_ids(const ModelHost& m, const Args& a) {
  const auto& pos = a.positional();
  if (auto ids = a.get("--ids")) {
    if (pos.size() != 1) throw UsageFailure{"give either PROMPT or --ids, not both"};
    std::vector<int32_t> out;
    size_t at = 0;
    while (at <= ids->size()) {
      size_t comma = ids->find(',', at);
      std::string item =
          ids->substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      try {
        out.push_back((int32_t)option_int(item, INT32_MIN, INT32_MAX));
      } catch (const UsageError& e) {
        throw UsageFailure{fmt::format("--ids: {}", e.what())};
      }
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return out;
  }
  if (pos.size() != 2) throw UsageFailure{"expected MODEL and PROMPT (or --ids)"};
  if (!m.tokenizer())
    throw UsageFailure{"this container has no tokenizer.model; pass token ids with --ids"};
  std::string text = pos[1];
  if (text == "-") text = read_stdin();
  std::vector<int32_t> out;
  for (int id : m.tokenizer()->encode_text(text)) out.push_back(id);
  return out;
}

std::string read_stdin() {
  return std::string(std::istreambuf_iterator<char>(std::cin), {});
}

void write_token_ids(JsonWriter& w, std::span<const int32_t> ids) {
  w.key("token_ids").begin_array();
  for (int32_t id : ids) w.value((int64_t)id);
  w.end_array();
}

std::string decode_text(const ModelHost& m, const std::vector<int32_t>& ids) {
  if (!m.tokenizer()) return "";
  std::vector<int> v(ids.begin(), ids.end());
  return m.tokenizer()->decode(v);
}

std::unique_ptr<Tokenizer> open_tokenizer(const Args& a, size_t model_index) {
  if (auto t = a.get("--tokenizer")) {
    // Without --specials, the special tokens come from beside the tokenizer, as a release or a
    // container keeps them; without them K3's markup would not tokenize as markup.
    std::optional<std::string> sp = a.get("--specials");
    for (const char* name : {"tokenizer_config.json", "specials.json"}) {
      const std::filesystem::path beside = std::filesystem::path(*t).parent_path() / name;
      if (!sp && std::filesystem::exists(beside)) sp = beside.string();
    }
    std::vector<SpecialToken> specials;
    if (sp) specials = read_specials_file(*sp);
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
