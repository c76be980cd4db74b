// `attention_bench MODEL grow N1,N2,...` and `attention_bench MODEL at P W`: what attention costs
// as the context grows, for docs/PERFORMANCE.md (issue 37).
//   grow: one session fed N1 tokens, then N2 more, ...; seconds of each step.
//   at:   every MLA layer's cache filled with P positions of synthetic latents (no forward pass
//         writes them, so 128K positions cost no hour of prefill), then a W-token window; each
//         layer's milliseconds per window token.
// Options after those: --threads N, --chunk N (the prefill window, default 64), --repeat N (at:
// the same window N times, each on a copy of the filled session).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/base/stopwatch.h"
#include "engine/format/container.h"
#include "engine/model/model.h"

namespace waste {
namespace {

std::vector<int32_t> tokens(int64_t n, int64_t from, int vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = from; i < from + n; i++) ids.push_back((int32_t)((i * 37 + 11) % vocab));
  return ids;
}

std::vector<int64_t> list(const std::string& s) {
  std::vector<int64_t> v;
  for (size_t at = 0; at < s.size();) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    v.push_back(std::stoll(s.substr(at, end - at)));
    at = end + 1;
  }
  return v;
}

void grow(Model& m, const std::vector<int64_t>& steps) {
  int64_t total = 0;
  for (int64_t n : steps) total += n;
  Session s = m.new_session(total);
  std::vector<float> logits(m.config().vocab);
  for (int64_t n : steps) {
    const std::vector<int32_t> ids = tokens(n, s.pos(), m.config().vocab);
    const auto t0 = SteadyClock::now();
    m.forward(s, ids, logits.data());
    const double sec = seconds_since(t0);
    std::printf("{\"from\":%lld,\"tokens\":%lld,\"seconds\":%.3f,\"ms_per_token\":%.3f}\n",
                (long long)(s.pos() - n), (long long)n, sec, 1e3 * sec / n);
  }
}

// Latents of the magnitude the forward pass caches (normalized: about 1 per channel), from a
// fixed linear congruential sequence.
void fill(const ModelConfig& c, Session& s, int64_t positions) {
  s.tokens = tokens(positions, 0, c.vocab);
  uint32_t x = 12345;
  for (int l = 0; l < c.n_layers; l++) {
    if (c.is_kda[l]) continue;
    std::vector<float>& lat = s.mla[l].latents;
    lat.reserve((size_t)(s.ctx() * s.latent_width()));
    lat.resize((size_t)(positions * s.latent_width()));
    for (float& f : lat) {
      x = x * 1664525u + 1013904223u;
      f = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
  }
}

// Each repeat runs the same window on a copy of the filled session; after the first, the
// window's experts are cached, so a layer's figure is its arithmetic rather than its reads.
void at(Model& m, int64_t positions, int64_t window, int repeats) {
  Session filled = m.new_session(positions + window);
  fill(m.config(), filled, positions);
  const std::vector<int32_t> ids = tokens(window, positions, m.config().vocab);
  std::vector<float> logits(m.config().vocab);
  for (int r = 0; r < repeats; r++) {
    Session s = filled;
    const std::vector<double> before = m.layer_seconds();
    const auto t0 = SteadyClock::now();
    m.forward(s, ids, logits.data());
    const double sec = seconds_since(t0);
    std::printf(
        "{\"positions\":%lld,\"window\":%lld,\"repeat\":%d,\"seconds\":%.3f,"
        "\"layer_ms_per_token\":[",
        (long long)positions, (long long)window, r, sec);
    for (size_t l = 0; l < before.size(); l++)
      std::printf("%s%.3f", l ? "," : "", 1e3 * (m.layer_seconds()[l] - before[l]) / window);
    std::printf("]}\n");
    std::fflush(stdout);
  }
}

int run(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: attention_bench MODEL grow N1,N2,... | MODEL at POSITIONS WINDOW "
                 "[--threads N] [--chunk N] [--repeat N]\n");
    return 2;
  }
  const std::string mode = argv[2];
  const int first_option = mode == "at" ? 5 : 4;
  ModelOptions opt;
  int repeats = 1;
  for (int i = first_option; i + 1 < argc; i += 2) {
    const std::string o = argv[i];
    if (o == "--threads")
      opt.threads = std::atoi(argv[i + 1]);
    else if (o == "--chunk")
      opt.chunk = std::atoi(argv[i + 1]);
    else if (o == "--repeat")
      repeats = std::atoi(argv[i + 1]);
    else
      throw std::runtime_error("unknown option " + o);
  }
  auto c = Container::open(argv[1]);
  Model m(*c, opt);
  if (mode == "grow")
    grow(m, list(argv[3]));
  else if (mode == "at" && argc >= 5)
    at(m, std::stoll(argv[3]), std::stoll(argv[4]), repeats);
  else
    return 2;
  return 0;
}

}  // namespace
}  // namespace waste

int main(int argc, char** argv) {
  try {
    return waste::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
}
