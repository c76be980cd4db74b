// Every API's parsers read a body through here: `parse` gets the body's top-level object, and a
// body or field the JSON reader refuses becomes an ApiError (400) that names the field in
// `param`, for the API to answer in its own error shape.
#pragma once

#include <string_view>

#include "protocol/api_error.h"
#include "protocol/json/json_reader.h"

namespace waste {

template <class Parse>
auto parse_body(std::string_view text, Parse&& parse) {
  try {
    json::Body body(text);
    return parse(body.root());
  } catch (const json::FieldError& e) {
    throw ApiError(400, e.message, e.path);
  }
}

}  // namespace waste
