#include "engine/kernels/kernel_bench.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string_view>

#include <fmt/format.h>

#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/rng.h"
#include "engine/base/stopwatch.h"
#include "engine/base/thread_pool.h"
#include "engine/kernels/fma_peak.h"

namespace waste {

namespace {

// The shapes of one model (docs/MODEL.md §1-§2). Trunk: a KDA q/k/v projection [C, hidden], the
// most frequent large trunk matrix. Experts: a routed expert's gate or up [moe_inter, expert_in],
// coded VQ3R (3 stages of 256 entries). Attention: MLA's absorbed scores and weighted sums over
// `positions` cached latents (kv_lora + rope = 576 floats per position, 512 of them values), and
// one KDA delta-rule step per head. A prefill window: the trunk product for that many tokens in
// one call, and an expert applied to its share of them (window · top_k / n_experts tokens).
struct Shapes {
  const char* name;
  int64_t trunk_rows, trunk_cols, window;
  int64_t expert_rows, expert_in, expert_tokens;
  int64_t mla_heads, kda_heads, positions;
};

constexpr Shapes kModels[] = {
    {"kimi-linear", 4096, 2304, 360, 1024, 2304, 11, 32, 32, 4096},  // 360 · 8 / 256
    {"k3", 12288, 7168, 360, 3072, 3584, 6, 96, 96, 4096},           // 360 · 16 / 896
};
// --quick's: every kernel's code paths (more than one row block, several quantization groups and
// positions, a window that is no multiple of matmul's tiles) at a size that runs in a moment even
// under a sanitizer or an emulator.
constexpr Shapes kQuick = {"quick", 256, 512, 41, 128, 512, 7, 4, 4, 256};

constexpr int kStages = 3, kEntries = 256;
constexpr int64_t kLatent = 576, kValues = 512, kKdaDim = 128;
constexpr int64_t kTokens = 16;  // matmul's (a prefill piece)

// One measured kernel at one shape: `run(k, b, e)` does the part [b, e) of one call's `work`
// items; the pool splits them in multiples of `grain`.
struct Case {
  std::string kernel, format, shape, unit;
  double units = 0, bytes = 0, flops = 0;
  int64_t work = 0, grain = 1;
  // The scalar reference is left out where one call would take many seconds at its speed.
  bool vector_only = false;
  std::function<void(const Kernels&, int64_t, int64_t)> run = nullptr;
};

std::vector<float> random_floats(Rng& rng, size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (float& x : v) x = rng.uniform(lo, hi);
  return v;
}

std::vector<uint8_t> random_bytes(Rng& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng.next();
    for (size_t j = i; j < std::min(n, i + 8); j++, r >>= 8) v[j] = (uint8_t)r;
  }
  return v;
}

std::vector<uint16_t> random_scales(Rng& rng, size_t n) {
  std::vector<uint16_t> v(n);
  for (uint16_t& s : v) s = f32_to_f16(rng.uniform(0.002f, 0.02f));
  return v;
}

// Seconds per call of `call`: the warm-up call's time when it alone fills min_seconds (then the
// better of it and one more), else the best of three batches that each fill it; with a fixed
// count, one batch of that many after the warm-up.
double time_calls(const std::function<void()>& call, const KernelBenchOptions& o) {
  SteadyClock::time_point t0 = SteadyClock::now();
  call();
  double first = seconds_since(t0);
  int64_t n = o.iters, batches = 1;
  if (n == 0 && first >= o.min_seconds) {
    n = 1;
  } else if (n == 0) {
    n = std::clamp<int64_t>((int64_t)std::ceil(o.min_seconds / std::max(first, 1e-9)), 1, 1 << 24);
    batches = 3;
  }
  double best = o.iters == 0 ? first : 1e300;
  for (int64_t b = 0; b < batches; b++) {
    t0 = SteadyClock::now();
    for (int64_t i = 0; i < n; i++) call();
    best = std::min(best, seconds_since(t0) / (double)n);
  }
  return best;
}

// The trunk matrix's storage: floats for F32, codes and scales for the quantized formats.
struct TrunkData {
  std::vector<float> f32;
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;
};

Matrix trunk_matrix(TensorFormat fmt, int64_t rows, int64_t cols, Rng& rng, TrunkData& d) {
  Matrix w;
  w.fmt = fmt;
  w.rows = rows;
  w.cols = cols;
  if (fmt == TensorFormat::kF32) {
    d.f32 = random_floats(rng, rows * cols, -1, 1);
    w.data = d.f32.data();
    return w;
  }
  d.codes = random_bytes(rng, rows * w.row_bytes());
  if (fmt == TensorFormat::kQ8G)
    for (uint8_t& q : d.codes) q = q == 0x80 ? 0 : q;  // int8 codes lie in [-127, 127]
  d.scales = random_scales(rng, rows * w.groups());
  w.data = d.codes.data();
  w.scales = d.scales.data();
  return w;
}

// The trunk product of `fmt` for one token (matvec), kTokens (matmul, a prefill piece) and a
// whole window (matmul, vector instruction sets only for a model's shapes), rows split.
void trunk_cases(const Shapes& s, TensorFormat fmt, Rng& rng,
                 const std::function<void(const Case&)>& measure) {
  TrunkData data;
  const Matrix w = trunk_matrix(fmt, s.trunk_rows, s.trunk_cols, rng, data);
  const double weight_bytes = (double)w.rows * w.row_bytes() + 2.0 * data.scales.size();
  const std::vector<float> x = random_floats(rng, std::max(kTokens, s.window) * w.cols, -1, 1);
  std::vector<float> y(std::max(kTokens, s.window) * w.rows);
  const std::string shape = fmt::format("{}x{}", w.rows, w.cols);
  Case mv{"matvec", format_name(fmt), shape, "row"};
  mv.units = (double)w.rows;
  mv.bytes = weight_bytes;
  mv.flops = 2.0 * w.rows * w.cols;
  mv.work = w.rows;
  mv.grain = 64;
  mv.run = [&](const Kernels& k, int64_t b, int64_t e) { k.matvec(w, x.data(), y.data(), b, e); };
  measure(mv);
  for (int64_t tokens : {kTokens, s.window}) {
    Case mm{"matmul", format_name(fmt), fmt::format("{} x {} tokens", shape, tokens), "row-token"};
    mm.units = (double)w.rows * tokens;
    mm.bytes = weight_bytes;
    mm.flops = 2.0 * w.rows * w.cols * tokens;
    mm.work = w.rows;
    mm.grain = 64;
    mm.vector_only = tokens == s.window && &s != &kQuick;
    mm.run = [&, tokens](const Kernels& k, int64_t b, int64_t e) {
      k.matmul(w, x.data(), tokens, w.cols, y.data(), w.rows, b, e);
    };
    measure(mm);
  }
}

// A routed expert's gate matrix for one token (decode) and for its share of a prefill window,
// rows split. Its operations are counted as the dense product's (two per weight and token).
void expert_cases(const Shapes& s, Rng& rng, const std::function<void(const Case&)>& measure) {
  const int64_t rows = s.expert_rows, nv = s.expert_in / kVqDim;
  std::vector<std::vector<float>> stage_data;
  std::vector<const float*> stage_ptrs;
  for (int st = 0; st < kStages; st++) {
    stage_data.push_back(random_floats(rng, (size_t)kVqDim * kEntries, -0.1f, 0.1f));
    stage_ptrs.push_back(stage_data.back().data());
  }
  const VqBooks books{stage_ptrs.data(), kStages, kEntries};
  const int64_t padded = (rows + kVqRowBlock - 1) / kVqRowBlock * kVqRowBlock;
  const std::vector<uint8_t> idx = random_bytes(rng, padded * nv * kStages);
  const std::vector<uint16_t> scales = random_scales(rng, rows);
  const VqMatrix m{rows, nv, idx.data(), scales.data()};
  const double index_bytes = (double)idx.size() + 2.0 * rows;
  const std::vector<float> x = random_floats(rng, s.expert_tokens * nv * kVqDim, -1, 1);
  std::vector<float> y(s.expert_tokens * rows);
  const std::string shape = fmt::format("{}x{} {}x{}", rows, nv * kVqDim, kStages, kEntries);
  for (int64_t tokens : {(int64_t)1, s.expert_tokens}) {
    Case c{"vq_rows", "", fmt::format("{} x {} tokens", shape, tokens), "row-token"};
    c.units = (double)rows * tokens;
    c.bytes = index_bytes;
    c.flops = 2.0 * rows * nv * kVqDim * tokens;
    c.work = rows;
    c.grain = kVqRowBlock;
    c.run = [&, tokens](const Kernels& k, int64_t b, int64_t e) {
      k.vq_rows(books, x.data(), tokens, nv * kVqDim, m, y.data(), rows, b, e);
    };
    measure(c);
  }
}

// MLA's scores and weighted sums, heads split; KDA's delta rule, heads split.
void attention_cases(const Shapes& s, Rng& rng, const std::function<void(const Case&)>& measure) {
  const int64_t H = s.mla_heads, P = s.positions;
  const std::vector<float> q = random_floats(rng, H * kLatent, -1, 1);
  const std::vector<float> cache = random_floats(rng, P * kLatent, -1, 1);
  const std::vector<float> weights = random_floats(rng, H * P, 0, 1.0f / P);
  std::vector<float> scores(H * P), sums(H * kValues);
  const std::string positions = fmt::format("{} heads x {} positions", H, P);
  Case d{"dots", "", fmt::format("{} x {}", positions, kLatent), "key"};
  d.units = (double)H * P;
  d.bytes = 4.0 * H * P * kLatent;
  d.flops = 2.0 * H * P * kLatent;
  d.work = H;
  d.run = [&](const Kernels& k, int64_t b, int64_t e) {
    for (int64_t h = b; h < e; h++)
      k.dots(q.data() + h * kLatent, cache.data(), P, kLatent, kLatent, 0.07f,
             scores.data() + h * P);
  };
  measure(d);
  Case a{"axpys", "", fmt::format("{} x {}", positions, kValues), "row"};
  a.units = (double)H * P;
  a.bytes = 4.0 * H * P * kValues;
  a.flops = 2.0 * H * P * kValues;
  a.work = H;
  a.run = [&](const Kernels& k, int64_t b, int64_t e) {
    for (int64_t h = b; h < e; h++)
      k.axpys(weights.data() + h * P, cache.data(), P, kLatent, kValues, sums.data() + h * kValues);
  };
  measure(a);

  // Unit keys and beta 1/2 keep the state bounded (it tends to v k^T) however often it runs.
  const int64_t K = s.kda_heads, D = kKdaDim;
  std::vector<float> state(K * D * D, 0.0f), out(K * D);
  std::vector<float> keys = random_floats(rng, K * D, -1, 1);
  for (int64_t h = 0; h < K; h++) {
    double norm = 0;
    for (int64_t i = 0; i < D; i++) norm += (double)keys[h * D + i] * keys[h * D + i];
    for (int64_t i = 0; i < D; i++) keys[h * D + i] /= (float)std::sqrt(norm);
  }
  const std::vector<float> qs = random_floats(rng, K * D, -1, 1);
  const std::vector<float> vs = random_floats(rng, K * D, -1, 1);
  const std::vector<float> decay = random_floats(rng, K * D, 0.9f, 1.0f);
  Case dr{"delta_rule", "", fmt::format("{} heads x {}x{}", K, D, D), "head"};
  dr.units = (double)K;
  dr.bytes = 2.0 * 4 * K * D * D;  // the state, read and written
  dr.flops = (double)K * (7.0 * D * D + 2.0 * D);
  dr.work = K;
  dr.run = [&](const Kernels& k, int64_t b, int64_t e) {
    for (int64_t h = b; h < e; h++)
      k.delta_rule(state.data() + h * D * D, qs.data() + h * D, keys.data() + h * D,
                   vs.data() + h * D, decay.data() + h * D, 0.5f, D, out.data() + h * D);
  };
  measure(dr);
}

// The FMA loop's rate on one thread and on every thread of `pool`.
void measure_peaks(Isa isa, ThreadPool& pool, const KernelBenchOptions& o,
                   std::vector<FmaPeak>& peaks) {
  // Rounds per call: half a millisecond at 256 GFLOP/s per core (a 16-lane loop of 16 chains does
  // 512 operations a round), so that waking the pool's threads costs little beside it.
  constexpr int64_t kRounds = 1 << 18;
  KernelBenchOptions timed = o;
  timed.iters = 0;
  if (o.iters > 0) timed.min_seconds = std::min(o.min_seconds, 0.005);
  double flops = 0;
  const double one = time_calls([&] { flops = fma_loop(isa, kRounds); }, timed);
  std::vector<double> each(pool.size());  // one loop per thread
  const double all = time_calls(
      [&] {
        pool.parallel_for(pool.size(), 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; i++) each[i] = fma_loop(isa, kRounds);
        });
      },
      timed);
  double all_flops = 0;
  for (double f : each) all_flops += f;
  const FmaPeak got[2] = {{isa, 1, flops / one, flops}, {isa, pool.size(), all_flops / all, flops}};
  for (const FmaPeak& g : got) {
    auto it = std::find_if(peaks.begin(), peaks.end(),
                           [&](const FmaPeak& p) { return p.threads == g.threads; });
    if (it == peaks.end()) {
      peaks.push_back(g);
    } else {
      it->flops_per_second = std::max(it->flops_per_second, g.flops_per_second);
    }
    if (pool.size() == 1) break;
  }
}

}  // namespace

const std::vector<std::string>& kernel_bench_models() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Shapes& s : kModels) v.push_back(s.name);
    return v;
  }();
  return names;
}

std::vector<Isa> known_isas() {
  // isa_name names every enumerator and only those, so this follows the enum as it grows.
  std::vector<Isa> out;
  for (int i = 0; std::string_view(isa_name((Isa)i)) != "unknown"; i++) out.push_back((Isa)i);
  return out;
}

KernelBench bench_kernels(const KernelBenchOptions& o) {
  std::vector<const Shapes*> models;
  for (const std::string& name : o.models) {
    auto it = std::find_if(std::begin(kModels), std::end(kModels),
                           [&](const Shapes& s) { return name == s.name; });
    if (it == std::end(kModels))
      fail<UsageError>("kernel bench: unknown model '{}' (kimi-linear or k3)", name);
    models.push_back(&*it);
  }
  if (o.quick && !o.models.empty())
    fail<UsageError>("kernel bench: quick runs its own small shapes, not a model's");
  if (o.quick) models.push_back(&kQuick);
  if (models.empty())
    for (const Shapes& s : kModels) models.push_back(&s);
  KernelBenchOptions timing = o;
  if (o.quick && timing.iters == 0) timing.iters = 1;

  KernelBench r;
  for (Isa isa : known_isas())
    if (cpu_supports(isa)) r.isas.push_back(isa);
  ThreadPool pool(o.threads);
  r.threads = pool.size();
  // The widest vectors: the last Isa in enum order that this CPU supports (none: scalar only).
  const Isa peak_isa = r.isas.back();
  if (peak_isa != Isa::kScalar) measure_peaks(peak_isa, pool, timing, r.peaks);

  for (const Shapes* s : models) {
    Rng rng(7);
    auto measure = [&](const Case& c) {
      for (Isa isa : r.isas) {
        if (c.vector_only && isa == Isa::kScalar) continue;
        const Kernels& k = kernels_for(isa);
        for (int threads : {1, pool.size()}) {
          KernelTiming t{c.kernel, c.format, s->name, c.shape, c.unit, isa, threads};
          t.units = c.units;
          t.bytes = c.bytes;
          t.flops = c.flops;
          if (threads == 1) {
            t.seconds = time_calls([&] { c.run(k, 0, c.work); }, timing);
          } else {
            t.seconds = time_calls(
                [&] {
                  pool.parallel_for(c.work, c.grain, [&](int64_t b, int64_t e) { c.run(k, b, e); });
                },
                timing);
          }
          r.timings.push_back(t);
          if (pool.size() == 1) break;
        }
      }
    };
    for (TensorFormat fmt : {TensorFormat::kF32, TensorFormat::kQ8G, TensorFormat::kQ4G})
      trunk_cases(*s, fmt, rng, measure);
    expert_cases(*s, rng, measure);
    attention_cases(*s, rng, measure);
  }
  if (peak_isa != Isa::kScalar) measure_peaks(peak_isa, pool, timing, r.peaks);
  return r;
}

}  // namespace waste
