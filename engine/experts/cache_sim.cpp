#include "engine/experts/cache_sim.h"

#include <fstream>
#include <limits>
#include <map>
#include <set>

#include <simdjson.h>

#include "engine/base/error.h"
#include "engine/base/json_fields.h"

namespace waste {

RoutingTrace read_routing_trace(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail<IoError>("{}: cannot read", path);
  RoutingTrace t;
  simdjson::dom::parser parser;
  std::string line;
  for (int n = 1; std::getline(f, line); n++) {
    if (line.empty()) continue;
    std::string where = fmt::format("{}:{}", path, n);
    simdjson::padded_string p(line);
    json::element doc;
    if (parser.parse(p).get(doc)) fail("{}: not valid JSON", where);
    std::vector<std::vector<int>> layers;
    for (json::element l : json::items(json::get_array(doc, "layers", where))) {
      if (!l.is_array()) fail("{}: layers[] must be arrays of expert ids", where);
      std::vector<int> ids;
      for (json::element e : json::items(l)) ids.push_back((int)json::as_int(e, where, 0, 65535));
      layers.push_back(std::move(ids));
    }
    t.push_back(std::move(layers));
  }
  if (t.empty()) fail("{}: no tokens in the trace", path);
  return t;
}

int accesses_per_token(const RoutingTrace& t) {
  int n = 0;
  for (const auto& l : t[0]) n += (int)l.size();
  return n;
}

SimResult simulate_policy(const RoutingTrace& t, int slots, CachePolicy policy) {
  ExpertCache cache(slots, policy, kLrfuHalfLifeTokens * accesses_per_token(t));
  SimResult r;
  std::vector<int> pinned;
  for (const auto& token : t)
    for (size_t l = 0; l < token.size(); l++) {
      for (int e : token[l]) {
        uint32_t key = ExpertCache::key((int)l, e);
        int s = cache.find(key);
        if (s >= 0) {
          r.hits++;
          cache.touch(s);
        } else {
          r.misses++;
          s = cache.admit(key);
          if (s < 0) fail<UsageError>("{} slots cannot hold one layer's experts", slots);
        }
        cache.pin(s);
        pinned.push_back(s);
      }
      for (int s : pinned) cache.unpin(s);
      pinned.clear();
    }
  return r;
}

SimResult simulate_optimal(const RoutingTrace& t, int slots) {
  // Flatten into one access stream, then precompute each access's next use.
  std::vector<uint32_t> stream;
  for (const auto& token : t)
    for (size_t l = 0; l < token.size(); l++)
      for (int e : token[l]) stream.push_back(ExpertCache::key((int)l, e));
  const size_t n = stream.size(), never = std::numeric_limits<size_t>::max();
  std::vector<size_t> next(n, never);
  std::map<uint32_t, size_t> seen;
  for (size_t i = n; i-- > 0;) {
    auto it = seen.find(stream[i]);
    if (it != seen.end()) next[i] = it->second;
    seen[stream[i]] = i;
  }
  SimResult r;
  std::map<uint32_t, size_t> resident;            // key -> its next use
  std::set<std::pair<size_t, uint32_t>> by_next;  // (next use, key)
  for (size_t i = 0; i < n; i++) {
    uint32_t k = stream[i];
    auto it = resident.find(k);
    if (it != resident.end()) {
      r.hits++;
      by_next.erase({it->second, k});
    } else {
      r.misses++;
      if ((int)resident.size() == slots) {
        auto victim = std::prev(by_next.end());
        resident.erase(victim->second);
        by_next.erase(victim);
      }
    }
    resident[k] = next[i];
    by_next.insert({next[i], k});
  }
  return r;
}

}  // namespace waste
