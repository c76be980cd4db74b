#include "engine/convert/convert_verify.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "engine/base/error.h"
#include "engine/base/f16.h"
#include "engine/base/thread_pool.h"
#include "engine/convert/convert_plan.h"
#include "engine/format/expert_record.h"

namespace waste {

namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Index bytes of rows past the matrix, up to the 64-row block, must be zero.
bool padding_is_zero(const VqMatrix& m, int stages) {
  int64_t padded = (m.rows + kVqRowBlock - 1) / kVqRowBlock * kVqRowBlock;
  if (padded == m.rows) return true;
  int64_t rb = m.rows / kVqRowBlock;
  for (int64_t v = 0; v < m.nv; v++)
    for (int64_t i = m.rows % kVqRowBlock; i < kVqRowBlock; i++)
      for (int s = 0; s < stages; s++)
        if (m.idx[((rb * m.nv + v) * kVqRowBlock + i) * stages + s]) return false;
  return true;
}

double compare(const float* ref, const float* got, int64_t n) {
  double e = 0, r = 0;
  for (int64_t i = 0; i < n; i++) {
    e += ((double)ref[i] - got[i]) * ((double)ref[i] - got[i]);
    r += (double)ref[i] * ref[i];
  }
  return r > 0 ? std::sqrt(e / r) : 0;
}

// Mean over rows of |decoded peak - stored scale| / stored scale.
double peak_gap(const VqMatrix& m, const float* w) {
  double sum = 0;
  int64_t cols = m.nv * kVqDim;
  for (int64_t r = 0; r < m.rows; r++) {
    float peak = 0;
    for (int64_t j = 0; j < cols; j++) peak = std::max(peak, std::fabs(w[r * cols + j]));
    float s = f16_to_f32(m.scales[r]);
    sum += s > 0 ? std::fabs(peak - s) / s : 0;
  }
  return m.rows ? sum / (double)m.rows : 0;
}

}  // namespace

void decode_vq_matrix(const Container& c, const VqMatrix& m, int64_t base, int kind, float* out) {
  VqBooks b = c.books(base, kind);
  for (int64_t r = 0; r < m.rows; r++) {
    float s = f16_to_f32(m.scales[r]);
    for (int64_t v = 0; v < m.nv; v++) {
      const uint8_t* run =
          m.idx + (((r / kVqRowBlock) * m.nv + v) * kVqRowBlock + r % kVqRowBlock) * b.stages;
      for (int d = 0; d < kVqDim; d++) {
        float acc = 0;
        for (int st = 0; st < b.stages; st++) acc += b.stage[st][run[st] * kVqDim + d];
        out[r * m.nv * kVqDim + v * kVqDim + d] = s * acc;
      }
    }
  }
}

DeepReport verify_deep(const Container& c, Checkpoint* src, int threads) {
  DeepReport rep;
  rep.against_source = src != nullptr;
  const Manifest& man = c.manifest();
  ThreadPool pool(threads);
  std::mutex mu;
  std::vector<double> all;
  static const char* kWeights[3] = {"gate", "up", "down"};
  for (const auto& bank_entry : man.banks) {
    // Named copies: lambdas may not capture structured bindings before C++20 compilers agree.
    const int layer = bank_entry.first;
    const auto& entry = bank_entry.second;
    const ExpertBank& bank = c.bank(layer);
    DeepLayer dl;
    dl.layer = layer;
    dl.errors.assign((size_t)entry.experts * 3, 0.0);
    std::atomic<int64_t> next{0};
    pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t) {
      AlignedBuffer buf(bank.stride());
      std::vector<float> w, ref;
      for (int64_t e; (e = next++) < entry.experts;) {
        std::string where = fmt::format("{}: layer {}, expert {}", entry.file, layer, e);
        try {
          bank.read((int)e, buf.data());
          ExpertView v = view_record(buf.data(), bank.geometry());
          const VqMatrix* mats[3] = {&v.gate, &v.up, &v.down};
          for (int k = 0; k < 3; k++) {
            const VqMatrix& m = *mats[k];
            if (!padding_is_zero(m, man.quant.stages))
              fail("{}: padded index rows of matrix {} are not zero", where, kWeights[k]);
            w.resize((size_t)(m.rows * m.nv * kVqDim));
            decode_vq_matrix(c, m, v.codebook_base, k, w.data());
            double err;
            if (src) {
              std::string name = expert_tensor_name(man.tensor_prefix, layer, (int)e, k);
              int64_t rows = 0, cols = 0;
              src->read_all(name, &ref, &rows, &cols);
              if (rows != m.rows || cols != m.nv * kVqDim)
                fail("{}: source {} is {}x{}, the record {}x{}", where, name, rows, cols, m.rows,
                     m.nv * kVqDim);
              err = compare(ref.data(), w.data(), (int64_t)w.size());
            } else {
              err = peak_gap(m, w.data());
            }
            dl.errors[(size_t)e * 3 + k] = err;
          }
        } catch (const std::exception& ex) {
          std::lock_guard<std::mutex> lock(mu);
          rep.problems.push_back(ex.what());
        }
      }
    });
    dl.median = median_of(dl.errors);
    dl.max = dl.errors.empty() ? 0 : *std::max_element(dl.errors.begin(), dl.errors.end());
    all.insert(all.end(), dl.errors.begin(), dl.errors.end());
    rep.layers.push_back(std::move(dl));
  }
  rep.median = median_of(all);
  rep.max = all.empty() ? 0 : *std::max_element(all.begin(), all.end());
  return rep;
}

}  // namespace waste
