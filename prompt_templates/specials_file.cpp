#include "prompt_templates/specials_file.h"

#include "engine/base/error.h"
#include "engine/base/file_read.h"
#include "protocol/json/python_json.h"

namespace waste {

// A specials.json array of {id, text}, or a release's tokenizer_config.json (its
// added_tokens_decoder). Read with the Python-compatible parser: the release's config holds a
// 31-digit integer that simdjson refuses.
std::vector<SpecialToken> read_specials_file(const std::string& path) {
  PyJson root = py_loads(read_small_file(path, 64 << 20), path);
  std::vector<SpecialToken> out;
  if (root.type == PyJson::Type::kArray) {
    for (const PyJson& e : root.items) {
      const PyJson *id = e.find("id"), *text = e.find("text");
      if (!id || !text || id->type != PyJson::Type::kInt || text->type != PyJson::Type::kString)
        fail("{}: each entry needs an integer id and a string text", path);
      out.push_back({std::stoi(id->text), text->text});
    }
    return out;
  }
  const PyJson* added = root.find("added_tokens_decoder");
  if (!added || added->type != PyJson::Type::kObject)
    fail("{}: neither a specials array nor a tokenizer_config.json with added_tokens_decoder",
         path);
  for (const PyMember& m : added->members) {
    const PyJson* content = m.value.find("content");
    if (!content || content->type != PyJson::Type::kString)
      fail("{}: added_tokens_decoder.{}.content is missing", path, m.key);
    out.push_back({std::stoi(m.key), content->text});
  }
  return out;
}

}  // namespace waste
