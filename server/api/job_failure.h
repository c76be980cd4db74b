// How the daemon answers a job the runtime could not finish: the one place a JobFailure becomes
// an HTTP status and an error code, for every API's sink.
#pragma once

#include "server/runtime/engine_worker.h"

namespace waste {

struct HttpFailure {
  int status;
  const char* code;
};

inline HttpFailure http_failure(JobFailure failure) {
  switch (failure) {
    case JobFailure::kShuttingDown:
      return {503, "shutting_down"};
    case JobFailure::kEngineError:
      break;
  }
  return {500, "engine_error"};
}

}  // namespace waste
