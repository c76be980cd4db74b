// A request refused: the HTTP status, a message, the offending parameter, a code and a type, for
// each API to answer in its own error shape.
#pragma once

#include <stdexcept>
#include <string>

namespace waste {

class ApiError : public std::runtime_error {
 public:
  ApiError(int http_status, std::string message_text, std::string param_name = "",
           std::string error_code = "", std::string error_type = "")
      : std::runtime_error(message_text),
        message(std::move(message_text)),
        status(http_status),
        param(std::move(param_name)),
        code(std::move(error_code)),
        type(error_type.empty() ? default_type(http_status) : std::move(error_type)) {}

  // The whole message: what() ends at an embedded NUL, and a field's value may hold one.
  std::string message;
  int status;
  std::string param;
  std::string code;
  std::string type;

 private:
  static std::string default_type(int status) {
    if (status == 401) return "authentication_error";
    if (status == 404) return "not_found_error";
    if (status == 429) return "rate_limit_error";
    if (status >= 500) return "server_error";
    return "invalid_request_error";
  }
};

}  // namespace waste
