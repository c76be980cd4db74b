#include "engine/convert/vq_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/thread_pool.h"
#include "engine/convert/vq_tile.h"

namespace waste {

namespace {

constexpr int kLanes = 8;
constexpr int64_t kGroupFloats = kLanes * kVqDim;  // one group: 8 vectors, dimension-major

// |c|^2 in the fixed fma order every kernel relies on.
float norm2(const float* c) {
  float acc = 0.0f;
  for (int d = 0; d < kVqDim; d++) acc = std::fma(c[d], c[d], acc);
  return acc;
}

void fill_norms(const float* book, int entries, float* norms) {
  for (int c = 0; c < entries; c++) norms[c] = norm2(book + c * kVqDim);
}

// n row-major 8-vectors -> groups of 8, dimension-major, zero-padded to a whole group.
void to_groups(const float* aos, int64_t n, std::vector<float>* soa) {
  int64_t groups = (n + kLanes - 1) / kLanes;
  soa->assign((size_t)(groups * kGroupFloats), 0.0f);
  for (int64_t i = 0; i < n; i++)
    for (int d = 0; d < kVqDim; d++)
      (*soa)[(size_t)((i / kLanes) * kGroupFloats + d * kLanes + i % kLanes)] = aos[i * kVqDim + d];
}

void assign_all(const std::vector<float>& soa, const float* book, const float* norms, int entries,
                NearestFn nearest, ThreadPool* pool, uint8_t* idx) {
  int64_t groups = (int64_t)soa.size() / kGroupFloats;
  SearchBook sb = search_book(book, norms, entries);
  auto run = [&](int64_t b, int64_t e) {
    nearest(sb.view(), soa.data() + b * kGroupFloats, e - b, idx + b * kLanes);
  };
  if (pool)
    pool->parallel_for(groups, 256, run);
  else
    run(0, groups);
}

// amax of one row, at least 1e-8. Eight independent running maxima instead of one serial chain:
// max is exact and skips NaN either way, so the result is the same, without a compare latency
// per element.
float row_amax(const float* row, int64_t cols) {
  float lane[8];
  std::fill(lane, lane + 8, 1e-8f);
  int64_t j = 0;
  for (; j + 8 <= cols; j += 8)
    for (int l = 0; l < 8; l++) lane[l] = std::max(lane[l], std::fabs(row[j + l]));
  for (; j < cols; j++) lane[0] = std::max(lane[0], std::fabs(row[j]));
  float amax = 1e-8f;
  for (float m : lane) amax = std::max(amax, m);
  return amax;
}

// Rounds to what codebooks.bin stores and the engine decodes: f16, subnormals flushed to zero.
float stored_value(float v) {
  return f16_to_f32_flush(f32_to_f16(v));
}

// The 8-bit copy of a book for the VNNI screen; q.ok stays false when the screen's bounds would
// not hold (see screen_step).
void quantize_book(const float* book, const float* norms, SearchBook* sb) {
  QuantBook& q = sb->q;
  q = QuantBook{};
  const int E = sb->entries;
  if (sb->padded > 256) return;  // the screen's integer ranges assume at most 256 entries
  double amax = 0, nmax = 0;
  for (int i = 0; i < E * kVqDim; i++) {
    if (!std::isfinite(book[i])) return;
    amax = std::max(amax, (double)std::fabs(book[i]));
  }
  for (int c = 0; c < E; c++) {
    if (!std::isfinite(norms[c]) || norms[c] < 0) return;
    nmax = std::max(nmax, (double)norms[c]);
  }
  if (!(amax >= 0x1p-60 && amax <= 0x1p60)) return;
  q.step = amax / 127;
  q.abs_max = amax;
  q.norm_max = nmax;
  sb->neg.assign((size_t)sb->padded * kVqDim, 0);
  sb->bias.assign((size_t)sb->padded, 0);
  for (int c = 0; c < E; c++) {
    double l1 = 0;
    int32_t sum = 0;
    for (int d = 0; d < kVqDim; d++) {
      double v = book[c * kVqDim + d];
      double qc = std::clamp(std::nearbyint(v / q.step), -127.0, 127.0);
      q.round_err = std::max(q.round_err, std::fabs(v - qc * q.step));
      l1 += std::fabs(qc) * q.step;
      sum += (int32_t)qc;
      // Block of 16 entries: 64 bytes of dims 0-3 (4 per entry), then 64 bytes of dims 4-7.
      sb->neg[(size_t)(c / 16 * 128 + d / 4 * 64 + c % 16 * 4 + d % 4)] = (int8_t)-qc;
    }
    q.l1_max = std::max(q.l1_max, l1);
    sb->bias[(size_t)c] = 128 * sum;
  }
  q.neg = sb->neg.data();
  q.bias = sb->bias.data();
  q.ok = true;
}

}  // namespace

SearchBook search_book(const float* book, const float* norms, int entries) {
  SearchBook sb;
  sb.entries = entries;
  sb.padded = (entries + 15) / 16 * 16;
  sb.t.assign((size_t)kVqDim * sb.padded, 0.0f);
  sb.rows.assign(book, book + (size_t)entries * kVqDim);
  sb.norms.assign((size_t)sb.padded, std::numeric_limits<float>::infinity());
  for (int c = 0; c < entries; c++) {
    for (int d = 0; d < kVqDim; d++) sb.t[(size_t)d * sb.padded + c] = book[c * kVqDim + d];
    sb.norms[c] = norms[c];
  }
  quantize_book(book, norms, &sb);
  return sb;
}

SearchView SearchBook::view() const {
  QuantBook qv = q;
  qv.neg = neg.data();  // a copied SearchBook must not point into the original
  qv.bias = bias.data();
  return {t.data(), rows.data(), norms.data(), entries, padded, qv};
}

namespace detail {

// The reference: one vector, one entry at a time, strict `<` in ascending order.
void nearest_scalar(const SearchView& b, const float* xs, int64_t n_groups, uint8_t* idx) {
  const int P = b.padded;
  for (int64_t g = 0; g < n_groups; g++) {
    const float* x = xs + g * kGroupFloats;
    for (int lane = 0; lane < kLanes; lane++) {
      float m2[kVqDim];
      for (int d = 0; d < kVqDim; d++) m2[d] = -2.0f * x[d * kLanes + lane];
      float best = std::numeric_limits<float>::infinity();
      int bi = 0;
      for (int c = 0; c < b.entries; c++) {
        float acc = b.norms[c];
        for (int d = 0; d < kVqDim; d++) acc = std::fma(m2[d], b.t[d * P + c], acc);
        if (acc < best) {
          best = acc;
          bi = c;
        }
      }
      idx[g * kLanes + lane] = (uint8_t)bi;
    }
  }
}

// Why the screen never drops the float argmin. Reals throughout unless fl() says otherwise;
// u = 2^-24. For a vector x and entry c let N_c be the stored float |c|^2 and
//   f_c = the float fma chain of nearest_scalar,   g_c = N_c - 2 x.c (exact).
// (1) |f_c - g_c| <= E. Each of the 8 fmas rounds once: |err| <= u|result| + 2^-150 (the second
//     term for subnormal results), every partial result is at most S = N_c + sum_d |2 x_d c_d|
//     in magnitude (times (1+u)^8), and -2x_d is exact. So |f_c - g_c| <= 8.01 u S + 8 2^-150,
//     and E = 16u (norm_max + 2 ||x||_1 abs_max) + 2^-140 is generous. With |x_d|, |c_d| <=
//     2^60 nothing overflows, so every f_c is finite (no NaN, no inf).
// (2) Scores. xhat_d = qx_d / inv_step, chat_d = qc_d step, U = 2 step / inv_step, and
//     s_c = Nint_c - sum_d qx_d qc_d with Nint_c = rint(N_c / U) (inv_unit = fl(1/U) and the
//     double product add < 2^-20 units for Nint_c <= 2^29). Then U s_c = U Nint_c - 2 xhat.chat,
//     |U Nint_c - N_c| <= U (1/2 + 2^-20), and
//       |x.c - xhat.chat| <= sum |x_d| |c_d - chat_d| + sum |x_d - xhat_d| |chat_d|
//                         <= ||x||_1 round_err + ex l1_max,
//     where ex = (1/2 + 2^-16) / inv_step bounds |x_d - xhat_d| (x_d inv_step is within 2^-17
//     of its float product for |x_d inv_step| <= 127, which rint then moves by at most 1/2).
//     So |U s_c - g_c| <= B = U (1/2 + 2^-20) + 2 (||x||_1 round_err + ex l1_max).
// (3) Let c* be any entry with the smallest f. For every j: g_c* <= f_c* + E <= f_j + E <=
//     g_j + 2E, so U s_c* <= g_c* + B <= g_j + 2E + B <= U s_j + 2E + 2B, i.e.
//       s_c* <= min_j s_j + (2B + 2E) / U.
//     (2B + 2E) / U = slack_a + slack_b ||x||_1 below, both scaled up by 1 + 2^-20 (twice for
//     slack_b) to cover the float ||x||_1 (8 terms: relative error < 2^-21) and the double
//     arithmetic here; the kernels add 1 after rounding up.
// (4) A kernel therefore evaluates f exactly as nearest_scalar does, with strict `<` from +inf,
//     on every entry within the slack of the smallest score, in ascending order. The scalar
//     answer is the lowest-index c* and it is among them, so the first minimum among them is c*.
// Ranges: Nint_c <= 2^29 and slack <= 2^28 (checked here), |bias_c| < 2^17, |sum u_d qc_d| <
// 2^18, so scores and thresholds stay below 2^30, the score padded entries get: never chosen.
ScreenStep screen_step(const QuantBook& q, float x_max) {
  ScreenStep st{};
  if (!q.ok || !(x_max >= 0x1p-60f && x_max <= 0x1p60f)) return st;  // NaN fails too
  st.inv_step = 127.0f / x_max;
  const double dx = 1.0 / (double)st.inv_step, unit = 2.0 * dx * q.step;
  st.inv_unit = 1.0 / unit;
  const double m = 1 + 0x1p-20, ex = dx * (0.5 + 0x1p-16);
  // 2B + 2E over U, split into the part independent of ||x||_1 and its coefficient.
  st.slack_a =
      m * (1 + 0x1p-19 + (4 * ex * q.l1_max + 0x1p-19 * q.norm_max + 0x1p-139) * st.inv_unit);
  st.slack_b = m * m * (4 * q.round_err + 0x1p-18 * q.abs_max) * st.inv_unit;
  const double worst = st.slack_a + st.slack_b * 8 * (double)x_max * m;
  st.ok = q.norm_max * st.inv_unit <= 0x1p29 && worst <= 0x1p28;
  return st;
}

}  // namespace detail

bool cpu_has_avx512vnni() {
  CpuFeatures f = cpu_features();
  return cpu_supports(Isa::kAvx512, f) && f.avx512vnni && f.avx512vbmi2;
}

bool cpu_has_avxvnni() {
  CpuFeatures f = cpu_features();
  return cpu_supports(Isa::kAvx2, f) && f.avxvnni;
}

NearestFn nearest_kernel(Isa isa) {
  // The x86 kernels' files are compiled for x86_64 targets alone (cmake/waste_library.cmake).
#if defined(__x86_64__)
  if (isa == Isa::kAvx512 && cpu_has_avx512vnni()) return detail::nearest_vnni;
  if (isa == Isa::kAvx512 && cpu_supports(Isa::kAvx512)) return detail::nearest_avx512;
  if (isa != Isa::kScalar && cpu_has_avxvnni()) return detail::nearest_avxvnni;
  if (isa != Isa::kScalar && cpu_supports(Isa::kAvx2)) return detail::nearest_avx2;
#endif
  return detail::nearest_scalar;
}

uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = seed;
  for (uint64_t v : {a, b, c}) {
    h += 0x9e3779b97f4a7c15ull + v;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return h;
}

void normalize_rows(const float* w, int64_t rows, int64_t cols, float* x, float* scale) {
  for (int64_t r = 0; r < rows; r++) {
    const float* row = w + r * cols;
    const float amax = row_amax(row, cols);
    scale[r] = amax;
    // Four quotients per instruction (a portable vector type; the compiler would not vectorize
    // the division itself): each is the same correctly rounded quotient.
    using Float4 = float __attribute__((vector_size(16)));
    float* out = x + r * cols;
    int64_t k = 0;
    for (; k + 4 <= cols; k += 4) {
      Float4 v;
      std::memcpy(&v, row + k, sizeof v);
      v = v / amax;
      std::memcpy(out + k, &v, sizeof v);
    }
    for (; k < cols; k++) out[k] = row[k] / amax;
  }
}

std::vector<uint32_t> sample_ids(uint64_t n, uint64_t count, Rng& rng) {
  count = std::min(count, n);
  std::vector<uint32_t> perm((size_t)n);
  for (uint64_t i = 0; i < n; i++) perm[i] = (uint32_t)i;
  for (uint64_t i = 0; i < count; i++) {
    uint64_t j = i + rng.below((uint32_t)(n - i));
    std::swap(perm[i], perm[j]);
  }
  perm.resize((size_t)count);
  return perm;
}

KindBooks train_books(std::vector<float> x, const VqRecipe& r, uint64_t seed, Isa isa,
                      ThreadPool* pool, const char* what) {
  const int64_t n = (int64_t)x.size() / kVqDim;
  const int E = r.entries;
  if (n < E)
    fail("{}: {} training vectors are fewer than the {} codebook entries (experts too small)", what,
         n, E);
  NearestFn nearest = nearest_kernel(isa);
  KindBooks out;
  out.stages = r.stages;
  out.entries = E;
  out.values.resize((size_t)r.stages * E * kVqDim);
  out.norms.resize((size_t)r.stages * E);
  std::vector<float> soa, c((size_t)E * kVqDim), norms((size_t)E);
  std::vector<uint8_t> idx;
  std::vector<double> sums((size_t)E * kVqDim);
  std::vector<int64_t> counts((size_t)E);
  for (int s = 0; s < r.stages; s++) {
    // Forgy initialisation: distinct training vectors chosen by the seeded generator.
    Rng rng(derive_seed(seed, (uint64_t)s, 0x696e6974 /* "init" */, 0));
    std::vector<uint32_t> ids = sample_ids((uint64_t)n, (uint64_t)E, rng);
    for (int k = 0; k < E; k++)
      std::memcpy(&c[(size_t)k * kVqDim], &x[(size_t)ids[k] * kVqDim], kVqDim * sizeof(float));
    to_groups(x.data(), n, &soa);
    idx.resize(soa.size() / kVqDim);
    for (int it = 0; it < r.iters; it++) {
      fill_norms(c.data(), E, norms.data());
      assign_all(soa, c.data(), norms.data(), E, nearest, pool, idx.data());
      // Sums in double, in vector order: the same for any thread count.
      std::fill(sums.begin(), sums.end(), 0.0);
      std::fill(counts.begin(), counts.end(), 0);
      for (int64_t i = 0; i < n; i++) {
        int k = idx[(size_t)i];
        counts[k]++;
        for (int d = 0; d < kVqDim; d++) sums[(size_t)k * kVqDim + d] += x[(size_t)i * kVqDim + d];
      }
      // Empty clusters keep their centroid (as the original does).
      for (int k = 0; k < E; k++)
        if (counts[k] > 0)
          for (int d = 0; d < kVqDim; d++)
            c[(size_t)k * kVqDim + d] = (float)(sums[(size_t)k * kVqDim + d] / (double)counts[k]);
    }
    // The final book is what the engine will decode; the next stage trains on the residual
    // left by exactly these values.
    float* book = out.values.data() + (size_t)s * E * kVqDim;
    for (size_t i = 0; i < c.size(); i++) book[i] = stored_value(c[i]);
    fill_norms(book, E, out.norms.data() + (size_t)s * E);
    assign_all(soa, book, out.norm(s), E, nearest, pool, idx.data());
    for (int64_t i = 0; i < n; i++)
      for (int d = 0; d < kVqDim; d++)
        x[(size_t)i * kVqDim + d] -= book[(size_t)idx[(size_t)i] * kVqDim + d];
  }
  return out;
}

std::vector<uint16_t> books_f16(const KindBooks& b) {
  std::vector<uint16_t> out(b.values.size());
  for (size_t i = 0; i < out.size(); i++) out[i] = f32_to_f16(b.values[i]);
  return out;
}

EncodeError encode_matrix(const float* w, int64_t rows, int64_t cols, const KindBooks& b,
                          NearestFn nearest, const TileOps& tile, uint8_t* idx, uint16_t* scales) {
  const int64_t nv = cols / kVqDim;
  const int S = b.stages;
  // Rows are normalized a tile at a time (TileOps::load divides by these), as normalize_rows
  // would: no normalized copy of the whole matrix to allocate and read back.
  std::vector<float> scale((size_t)rows), s16((size_t)rows);
  for (int64_t r = 0; r < rows; r++) {
    scale[r] = row_amax(w + r * cols, cols);
    scales[r] = f32_to_f16(scale[r]);
    s16[r] = f16_to_f32(scales[r]);
  }
  std::vector<SearchBook> sbs;
  for (int s = 0; s < S; s++) sbs.push_back(search_book(b.book(s), b.norm(s), b.entries));
  TileError te;
  float res[kTileFloats], sum[kTileFloats];
  uint8_t ids[kVqRowBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kVqRowBlock) {
    int64_t n = std::min<int64_t>(kVqRowBlock, rows - r0);
    for (int64_t v = 0; v < nv; v++) {
      tile.load(w + r0 * cols + v * kVqDim, cols, n, scale.data() + r0, res);
      std::fill(std::begin(sum), std::end(sum), 0.0f);
      uint8_t* out = idx + ((r0 / kVqRowBlock) * nv + v) * kVqRowBlock * S;
      for (int s = 0; s < S; s++) {
        SearchView sv = sbs[(size_t)s].view();
        nearest(sv, res, kVqRowBlock / kLanes, ids);
        for (int64_t i = 0; i < n; i++) out[i * S + s] = ids[i];
        tile.apply(sv, ids, res, sum);
      }
      tile.add_error(w + r0 * cols + v * kVqDim, cols, n, s16.data() + r0, sum, &te);
    }
  }
  return te.total();
}

}  // namespace waste
