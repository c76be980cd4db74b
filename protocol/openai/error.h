// OpenAI's error body: {"error": {"message", "type", "param", "code"}}, with null for an absent
// param or code, as OpenAI sends them (SDKs surface these fields as they are).
#pragma once

#include <string>

#include "protocol/api_error.h"

namespace waste {

std::string openai_error_body(const std::string& message, const std::string& type,
                              const std::string& param = "", const std::string& code = "");
inline std::string openai_error_body(const ApiError& e) {
  return openai_error_body(e.message, e.type, e.param, e.code);
}

// An error the transport answers by itself (a bad request line, an unknown path, a missing key):
// "invalid_request_error" below 500, "server_error" from 500 on, as OpenAI types them.
inline std::string openai_refusal_body(int status, const std::string& message,
                                       const std::string& code) {
  return openai_error_body(message, status >= 500 ? "server_error" : "invalid_request_error", "",
                           code);
}

}  // namespace waste
