// An error to answer in OpenAI's shape: HTTP status, type, the offending parameter and a code.
#pragma once

#include <stdexcept>
#include <string>

namespace waste {

class ApiError : public std::runtime_error {
 public:
  ApiError(int http_status, std::string message, std::string param_name = "",
           std::string error_code = "", std::string error_type = "")
      : std::runtime_error(std::move(message)),
        status(http_status),
        param(std::move(param_name)),
        code(std::move(error_code)),
        type(error_type.empty() ? default_type(http_status) : std::move(error_type)) {}

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
