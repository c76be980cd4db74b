// The body of GET /metrics: the daemon's counters in Prometheus' text format (version 0.0.4).
#pragma once

#include <cstdint>
#include <string>

#include "server/api/serving_model.h"
#include "server/http/http.h"

namespace waste {

// `model` is null until the model is loaded (only the always-present series are written then);
// `rejected` counts requests refused with 429.
std::string metrics_text(const ServingModel* model, uint64_t rejected,
                         const http::ServerStats& http);

}  // namespace waste
