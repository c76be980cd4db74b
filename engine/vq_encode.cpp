#include "engine/vq_encode.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/error.h"
#include "engine/f16.h"
#include "engine/thread_pool.h"

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

// Rounds to what codebooks.bin stores and the engine decodes: f16, subnormals flushed to zero.
float stored_value(float v) {
  return f16_to_f32_flush(f32_to_f16(v));
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
  return sb;
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

}  // namespace detail

NearestFn nearest_kernel(Isa isa) {
  if (isa == Isa::kAvx512 && cpu_supports(Isa::kAvx512)) return detail::nearest_avx512;
  if (isa != Isa::kScalar && cpu_supports(Isa::kAvx2)) return detail::nearest_avx2;
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
    // Eight independent running maxima instead of one serial chain: max is exact and skips NaN
    // either way, so the result is the same, without a compare latency per element.
    float lane[8];
    std::fill(lane, lane + 8, 1e-8f);
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8)
      for (int l = 0; l < 8; l++) lane[l] = std::max(lane[l], std::fabs(row[j + l]));
    for (; j < cols; j++) lane[0] = std::max(lane[0], std::fabs(row[j]));
    float amax = 1e-8f;
    for (float m : lane) amax = std::max(amax, m);
    scale[r] = amax;
    for (int64_t k = 0; k < cols; k++) x[r * cols + k] = row[k] / amax;
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
                          NearestFn nearest, uint8_t* idx, uint16_t* scales) {
  const int64_t nv = cols / kVqDim;
  const int S = b.stages;
  std::vector<float> x((size_t)(rows * cols)), scale((size_t)rows), s16((size_t)rows);
  normalize_rows(w, rows, cols, x.data(), scale.data());
  for (int64_t r = 0; r < rows; r++) {
    scales[r] = f32_to_f16(scale[r]);
    s16[r] = f16_to_f32(scales[r]);
  }
  std::vector<SearchBook> sbs;
  for (int s = 0; s < S; s++) sbs.push_back(search_book(b.book(s), b.norm(s), b.entries));
  EncodeError err;
  constexpr int64_t kGroups = kVqRowBlock / kLanes;
  float res[kGroups * kGroupFloats], sum[kVqRowBlock * kVqDim];
  uint8_t ids[kVqRowBlock];
  for (int64_t r0 = 0; r0 < rows; r0 += kVqRowBlock) {
    int64_t n = std::min<int64_t>(kVqRowBlock, rows - r0);
    for (int64_t v = 0; v < nv; v++) {
      // The 64 rows of one vector position, 8 rows per group: the layout of the index block.
      std::fill(std::begin(res), std::end(res), 0.0f);
      std::fill(std::begin(sum), std::end(sum), 0.0f);
      for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < kVqDim; d++)
          res[(i / kLanes) * kGroupFloats + d * kLanes + i % kLanes] =
              x[(size_t)((r0 + i) * cols + v * kVqDim + d)];
      uint8_t* out = idx + ((r0 / kVqRowBlock) * nv + v) * kVqRowBlock * S;
      for (int s = 0; s < S; s++) {
        const float* book = b.book(s);
        nearest(sbs[(size_t)s].view(), res, kGroups, ids);
        for (int64_t i = 0; i < n; i++) {
          out[i * S + s] = ids[i];
          const float* cv = book + ids[i] * kVqDim;
          for (int d = 0; d < kVqDim; d++) {
            res[(i / kLanes) * kGroupFloats + d * kLanes + i % kLanes] -= cv[d];
            sum[i * kVqDim + d] += cv[d];
          }
        }
      }
      for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < kVqDim; d++) {
          double ref = w[(r0 + i) * cols + v * kVqDim + d];
          double got = (double)s16[(size_t)(r0 + i)] * (double)sum[i * kVqDim + d];
          err.err2 += (ref - got) * (ref - got);
          err.ref2 += ref * ref;
        }
    }
  }
  return err;
}

}  // namespace waste
