#include "protocol/openai/error.h"

#include "protocol/json/json_writer.h"

namespace waste {

std::string openai_error_body(const std::string& message, const std::string& type,
                              const std::string& param, const std::string& code) {
  JsonWriter w;
  w.begin_object().key("error").begin_object();
  w.key("message").value(message);
  w.key("type").value(type);
  w.key("param");
  param.empty() ? w.null() : w.value(param);
  w.key("code");
  code.empty() ? w.null() : w.value(code);
  w.end_object().end_object();
  return w.str();
}

}  // namespace waste
