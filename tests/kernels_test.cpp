// The numeric kernels: the scalar reference against double-precision dequantize-and-dot and
// hand-computed layouts, every SIMD table this CPU runs against the reference, matmul against
// matvec bit for bit, the f16 scale decode, and the WASTE_ISA choice.
#include "engine/kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/base/error.h"
#include "engine/base/f16.h"

namespace waste {
namespace {

using Rand = std::mt19937_64;

constexpr double kRelTol = 1e-5;
constexpr double kAbsTol = 1e-30;
constexpr float kSentinel = 7777.0f;

float uniform(Rand& g, float lo, float hi) {
  return std::uniform_real_distribution<float>(lo, hi)(g);
}
int below(Rand& g, int n) {
  return (int)(g() % (uint64_t)n);
}

// Mostly normal magnitudes of either sign, some subnormals (which the trunk decode must keep).
uint16_t random_scale(Rand& g) {
  uint16_t sign = below(g, 4) == 0 ? 0x8000 : 0;
  if (below(g, 16) == 0) return sign | (uint16_t)(1 + below(g, 1023));
  return sign | f32_to_f16(uniform(g, 1e-3f, 0.1f));
}

std::vector<float> random_floats(Rand& g, int64_t n) {
  std::vector<float> v(n);
  for (float& f : v) f = uniform(g, -1.0f, 1.0f);
  return v;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

// --- Trunk matrices: logical weights kept beside the packed bytes, so the double reference
// never goes through a decoder.

struct TestMatrix {
  TensorFormat fmt = TensorFormat::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<float> f32;        // F32 weights
  std::vector<int> q;            // quantized: rows x cols integer codes (unbiased)
  std::vector<uint8_t> bytes;    // the stored rows
  std::vector<uint16_t> scales;  // rows x groups

  int64_t groups() const { return (cols + kQuantGroup - 1) / kQuantGroup; }
  Matrix view() const {
    const void* data = fmt == TensorFormat::kF32 ? (const void*)f32.data() : bytes.data();
    return Matrix{fmt, rows, cols, data, scales.data()};
  }
  double weight(int64_t r, int64_t c) const {
    if (fmt == TensorFormat::kF32) return f32[r * cols + c];
    return q[r * cols + c] * (double)f16_to_f32(scales[r * groups() + c / kQuantGroup]);
  }
};

// Packs codes per docs/FORMAT.md §3.2: Q8G one int8 per input, Q4G code q+8 with the even input in
// the low nibble; rows padded with zero bytes to whole groups.
void pack(TestMatrix* m) {
  int64_t rb = m->view().row_bytes();
  m->bytes.assign(m->rows * rb, 0);
  for (int64_t r = 0; r < m->rows; r++)
    for (int64_t c = 0; c < m->cols; c++) {
      int q = m->q[r * m->cols + c];
      if (m->fmt == TensorFormat::kQ8G) {
        m->bytes[r * rb + c] = (uint8_t)(int8_t)q;
      } else {
        m->bytes[r * rb + c / 2] |= (uint8_t)((q + 8) << (c % 2 ? 4 : 0));
      }
    }
}

TestMatrix make_matrix(TensorFormat fmt, int64_t rows, int64_t cols, uint64_t seed) {
  Rand g(seed);
  TestMatrix m;
  m.fmt = fmt;
  m.rows = rows;
  m.cols = cols;
  if (fmt == TensorFormat::kF32) {
    m.f32 = random_floats(g, rows * cols);
    return m;
  }
  bool q4 = fmt == TensorFormat::kQ4G;
  m.q.resize(rows * cols);
  for (int& q : m.q) q = q4 ? below(g, 16) - 8 : below(g, 255) - 127;
  m.scales.resize(rows * m.groups());
  for (uint16_t& s : m.scales) s = random_scale(g);
  pack(&m);
  return m;
}

// Per row: the double-precision product and sum |w_rc * x_c| (the error scale).
struct Reference {
  std::vector<double> y, mag;
};

Reference reference(const TestMatrix& m, const float* x) {
  Reference ref{std::vector<double>(m.rows), std::vector<double>(m.rows)};
  for (int64_t r = 0; r < m.rows; r++)
    for (int64_t c = 0; c < m.cols; c++) {
      double p = m.weight(r, c) * x[c];
      ref.y[r] += p;
      ref.mag[r] += std::fabs(p);
    }
  return ref;
}

const TensorFormat kFormats[] = {TensorFormat::kF32, TensorFormat::kQ8G, TensorFormat::kQ4G};

std::string shape(const TestMatrix& m, int64_t r0, int64_t r1) {
  return std::string(format_name(m.fmt)) + " " + std::to_string(m.rows) + "x" +
         std::to_string(m.cols) + " rows [" + std::to_string(r0) + "," + std::to_string(r1) + ")";
}

// Rows in [r0, r1) within tolerance of `want`; the others still hold the sentinel.
void expect_rows(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<double>& mag, int64_t r0, int64_t r1, const std::string& what) {
  for (int64_t r = 0; r < (int64_t)got.size(); r++) {
    if (r < r0 || r >= r1) {
      ASSERT_EQ(got[r], kSentinel) << what << ": row " << r << " is outside the range";
      continue;
    }
    double err = std::fabs(got[r] - want[r]);
    ASSERT_LE(err, kRelTol * mag[r] + kAbsTol)
        << what << ": row " << r << " got " << got[r] << " want " << want[r];
  }
}

std::vector<float> run_matvec(const Kernels& k, const TestMatrix& m, const float* x, int64_t r0,
                              int64_t r1) {
  std::vector<float> y(m.rows, kSentinel);
  k.matvec(m.view(), x, y.data(), r0, r1);
  return y;
}

const Kernels& scalar() {
  return kernels_for(Isa::kScalar);
}

// --- The scalar reference against hand-computed values: pins the byte layouts to the doc.

TEST(ScalarReference, Q4GNibbleOrderBiasAndGroupScales) {
  // Row 0: inputs 0,1 from byte 0x9F: low nibble 15 -> q=7 (input 0), high 9 -> q=1 (input 1).
  // Input 128 (group 1) from byte 64 = 0x03: q = 3 - 8 = -5. Scales 2.0 and 0.5.
  std::vector<uint8_t> bytes(128, 0x88);
  bytes[0] = 0x9F;
  bytes[64] = 0x83;
  std::vector<uint16_t> scales = {0x4000, 0x3800};
  std::vector<float> x(129, 0.0f);
  x[0] = 1.0f;
  x[1] = 10.0f;
  x[128] = 100.0f;
  Matrix w{TensorFormat::kQ4G, 1, 129, bytes.data(), scales.data()};
  float y = 0;
  scalar().matvec(w, x.data(), &y, 0, 1);
  EXPECT_EQ(y, 2.0f * (7 * 1 + 1 * 10) + 0.5f * (-5 * 100));
}

TEST(ScalarReference, Q8GSignedCodesAndRowStride) {
  // 2 rows x 3 inputs: each row is padded to 128 bytes, so row 1 starts at byte 128.
  std::vector<uint8_t> bytes(256, 0);
  bytes[0] = 0xFF;  // -1
  bytes[2] = 0x81;  // -127
  bytes[128] = 0x05;
  bytes[129] = 0x7F;                                // 127
  std::vector<uint16_t> scales = {0x3C00, 0xC000};  // 1.0, -2.0
  float x[3] = {1.0f, 2.0f, 3.0f};
  Matrix w{TensorFormat::kQ8G, 2, 3, bytes.data(), scales.data()};
  float y[2] = {0, 0};
  scalar().matvec(w, x, y, 0, 2);
  EXPECT_EQ(y[0], -1.0f - 127.0f * 3);
  EXPECT_EQ(y[1], -2.0f * (5 + 127 * 2));
}

TEST(ScalarReference, SubnormalScaleIsKept) {
  std::vector<uint8_t> bytes(128, 0);
  bytes[0] = 100;
  uint16_t scale = 0x0003;  // 3 * 2^-24
  float x = 1.0f;
  Matrix w{TensorFormat::kQ8G, 1, 1, bytes.data(), &scale};
  float y = 0;
  scalar().matvec(w, &x, &y, 0, 1);
  EXPECT_EQ(y, 300.0f * std::ldexp(1.0f, -24));
}

TEST(ScalarReference, MatvecMatchesDoubleDot) {
  Rand g(1);
  for (TensorFormat fmt : kFormats)
    for (int64_t cols : {1, 2, 7, 100, 128, 129, 300}) {
      TestMatrix m = make_matrix(fmt, 5, cols, g());
      std::vector<float> x = random_floats(g, cols);
      Reference ref = reference(m, x.data());
      std::vector<float> y = run_matvec(scalar(), m, x.data(), 1, 4);
      expect_rows(y, ref.y, ref.mag, 1, 4, shape(m, 1, 4));
    }
}

// --- VQ: logical indices kept beside the blocked bytes.

struct TestVq {
  int stages = 0, entries = 0;
  int64_t rows = 0, nv = 0;
  std::vector<std::vector<float>> books;  // [stage] -> [entries][8]
  std::vector<const float*> book_ptrs;
  std::vector<uint8_t> logical;  // [row][v][stage]
  std::vector<uint8_t> idx;      // blocked per docs/FORMAT.md §4.4
  std::vector<uint16_t> scales;

  VqBooks view_books() const { return VqBooks{book_ptrs.data(), stages, entries}; }
  VqMatrix view() const { return VqMatrix{rows, nv, idx.data(), scales.data()}; }
  int index(int64_t r, int64_t v, int s) const { return logical[(r * nv + v) * stages + s]; }
};

// Byte ((r/64*nv + v)*64 + r%64)*stages + s holds stage s of (row r, vector v); padding rows
// stay zero.
void block_indices(TestVq* q) {
  int64_t padded = (q->rows + kVqRowBlock - 1) / kVqRowBlock * kVqRowBlock;
  q->idx.assign(padded * q->nv * q->stages, 0);
  for (int64_t r = 0; r < q->rows; r++)
    for (int64_t v = 0; v < q->nv; v++)
      for (int s = 0; s < q->stages; s++) {
        int64_t at = ((r / kVqRowBlock * q->nv + v) * kVqRowBlock + r % kVqRowBlock) * q->stages;
        q->idx[at + s] = (uint8_t)q->index(r, v, s);
      }
}

TestVq make_vq(int stages, int entries, int64_t rows, int64_t nv, uint64_t seed) {
  Rand g(seed);
  TestVq q;
  q.stages = stages;
  q.entries = entries;
  q.rows = rows;
  q.nv = nv;
  for (int s = 0; s < stages; s++) q.books.push_back(random_floats(g, kVqDim * entries));
  for (const auto& b : q.books) q.book_ptrs.push_back(b.data());
  q.logical.resize(rows * nv * stages);
  for (uint8_t& i : q.logical) i = (uint8_t)below(g, entries);
  q.scales.resize(rows);
  for (uint16_t& s : q.scales) s = random_scale(g);
  block_indices(&q);
  return q;
}

// Row r's weight (v, d) as the books sum it, in double, and the row's product with x.
Reference vq_reference(const TestVq& q, const float* x) {
  Reference ref{std::vector<double>(q.rows), std::vector<double>(q.rows)};
  for (int64_t r = 0; r < q.rows; r++) {
    double scale = f16_to_f32(q.scales[r]);
    for (int64_t v = 0; v < q.nv; v++)
      for (int d = 0; d < kVqDim; d++) {
        double w = 0;
        for (int s = 0; s < q.stages; s++) w += q.books[s][q.index(r, v, s) * kVqDim + d];
        ref.y[r] += scale * w * x[v * kVqDim + d];
        ref.mag[r] += std::fabs(scale * w * x[v * kVqDim + d]);
      }
  }
  return ref;
}

// kernels.h's definition of one output, written out from the logical indices.
float vq_defined(const TestVq& q, const float* x, int64_t r) {
  float a[kVqDim] = {};
  for (int64_t v = 0; v < q.nv; v++)
    for (int d = 0; d < kVqDim; d++) {
      float w = q.books[0][q.index(r, v, 0) * kVqDim + d];
      for (int s = 1; s < q.stages; s++) w += q.books[s][q.index(r, v, s) * kVqDim + d];
      a[d] = std::fma(w, x[v * kVqDim + d], a[d]);
    }
  const float sum = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  return f16_to_f32(q.scales[r]) * sum;
}

std::vector<float> run_vq_rows(const Kernels& k, const TestVq& q, const float* x, int64_t r0,
                               int64_t r1) {
  std::vector<float> y(q.rows, kSentinel);
  k.vq_rows(q.view_books(), x, 1, q.nv * kVqDim, q.view(), y.data(), q.rows, r0, r1);
  return y;
}

std::string vq_shape(const TestVq& q, int64_t r0, int64_t r1) {
  return "vq " + std::to_string(q.rows) + " rows nv=" + std::to_string(q.nv) +
         " stages=" + std::to_string(q.stages) + " entries=" + std::to_string(q.entries) +
         " rows [" + std::to_string(r0) + "," + std::to_string(r1) + ")";
}

TEST(ScalarReference, VqIndexBlockingByHand) {
  // 65 rows (two 64-row blocks), nv=2, 2 stages, 4 entries. Book s's code c is 100s + c in
  // dimension 0 and 0 elsewhere, and x is 1 at dimension 0 of each position (1000 at v = 1), so
  // each row's sum spells out the indices it read.
  TestVq q;
  q.stages = 2;
  q.entries = 4;
  q.rows = 65;
  q.nv = 2;
  q.idx.assign(128 * 2 * 2, 0);
  q.idx[((0 * 2 + 1) * 64 + 1) * 2 + 0] = 3;  // row 1, v 1, stage 0 -> byte 130
  q.idx[((0 * 2 + 1) * 64 + 1) * 2 + 1] = 2;  // row 1, v 1, stage 1 -> byte 131
  q.idx[((1 * 2 + 0) * 64 + 0) * 2 + 1] = 1;  // row 64, v 0, stage 1 -> byte 257
  q.idx[((1 * 2 + 1) * 64 + 0) * 2 + 0] = 2;  // row 64, v 1, stage 0 -> byte 384
  EXPECT_EQ(q.idx[130], 3);
  EXPECT_EQ(q.idx[257], 1);
  EXPECT_EQ(q.idx[384], 2);
  q.scales.assign(65, 0x3C00);
  q.scales[64] = 0x4000;  // 2.0
  q.books.assign(2, std::vector<float>(4 * kVqDim, 0.0f));
  for (int s = 0; s < 2; s++)
    for (int c = 0; c < 4; c++) q.books[s][c * kVqDim] = 100.0f * s + c;
  for (const auto& b : q.books) q.book_ptrs.push_back(b.data());
  std::vector<float> x(2 * kVqDim, 0.0f);
  x[0] = 1.0f;
  x[kVqDim] = 1000.0f;
  std::vector<float> y = run_vq_rows(scalar(), q, x.data(), 0, 65);
  const float zero_row = 100 + 1000 * 100;  // every index 0
  EXPECT_EQ(y[0], zero_row);
  EXPECT_EQ(y[1], 100 + 1000 * (3 + 102));
  EXPECT_EQ(y[64], 2.0f * (101 + 1000 * (2 + 100)));
}

TEST(ScalarReference, VqRowsMatchDouble) {
  Rand g(3);
  for (int stages = 1; stages <= 4; stages++)
    for (int64_t rows : {1, 65, 130}) {
      TestVq q = make_vq(stages, 64, rows, 7, g());
      std::vector<float> x = random_floats(g, q.nv * kVqDim);
      Reference ref = vq_reference(q, x.data());
      std::vector<float> y = run_vq_rows(scalar(), q, x.data(), 0, rows);
      expect_rows(y, ref.y, ref.mag, 0, rows, vq_shape(q, 0, rows));
    }
}

// --- f16: the decoders used for scales and codebooks.

TEST(F16, SpecificValues) {
  EXPECT_EQ(f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);               // max finite
  EXPECT_EQ(f16_to_f32(0x7C00), 65536.0f);               // exponent 31 stays finite
  EXPECT_EQ(f16_to_f32(0xFFFF), -131008.0f);
  float nz = f16_to_f32(0x8000);
  EXPECT_EQ(nz, 0.0f);
  EXPECT_TRUE(std::signbit(nz));
  EXPECT_FALSE(std::signbit(f16_to_f32(0x0000)));
  EXPECT_EQ(f16_to_f32_flush(0x0001), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32_flush(0x83FF)));
  EXPECT_EQ(f16_to_f32_flush(0x0400), std::ldexp(1.0f, -14));
}

// --- Every table this CPU runs.

class IsaTest : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_supports(GetParam())) GTEST_SKIP() << "this CPU cannot run " << isa_name(GetParam());
  }
  const Kernels& k() const { return kernels_for(GetParam()); }
};

std::string isa_param_name(const testing::TestParamInfo<Isa>& info) {
  return isa_name(info.param);
}

using SimdTest = IsaTest;
INSTANTIATE_TEST_SUITE_P(Simd, SimdTest, testing::Values(Isa::kAvx2, Isa::kAvx512, Isa::kNeon),
                         isa_param_name);
INSTANTIATE_TEST_SUITE_P(All, IsaTest,
                         testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon),
                         isa_param_name);

TEST_P(IsaTest, TableIsTheOneAskedFor) {
  EXPECT_EQ(k().isa, GetParam());
}

TEST_P(SimdTest, MatvecMatchesScalar) {
  Rand g(10);
  for (TensorFormat fmt : kFormats)
    for (int64_t rows : {1, 3, 4, 5, 9, 67})
      for (int64_t cols : {1, 7, 16, 100, 128, 129, 255, 300, 1000}) {
        TestMatrix m = make_matrix(fmt, rows, cols, g());
        std::vector<float> x = random_floats(g, cols);
        Reference ref = reference(m, x.data());
        int64_t r0 = rows > 2 ? 1 : 0, r1 = rows > 3 ? rows - 1 : rows;
        for (auto [a, b] : {std::pair{(int64_t)0, rows}, std::pair{r0, r1}}) {
          std::vector<float> want = run_matvec(scalar(), m, x.data(), a, b);
          std::vector<float> got = run_matvec(k(), m, x.data(), a, b);
          std::vector<double> wanted(want.begin(), want.end());
          expect_rows(got, wanted, ref.mag, a, b, shape(m, a, b));
        }
      }
}

// Shapes at the edges of matmul's blocking (kernels_body.h): rows 1-3 past whole tiles of 2, 3
// or 4 and past blocks of 15 or 16, from an odd first row; few tokens (up to 16: Q8G and Q4G
// take their own loop), tokens past whole tiles of 3, 4 or 6 and past a block of 120; rows
// ending exactly at a vector (16, 48 on AVX-512), a part of one, within a span of 512 columns,
// at its end and past it. Then rows wide enough that fewer than 120 tokens fill a block's
// panels (108 for 9,000 columns), so the last block is a partial one.
TEST_P(IsaTest, MatmulIsBitIdenticalToMatvec) {
  Rand g(11);
  for (TensorFormat fmt : kFormats)
    for (int64_t rows : {1, 3, 5, 9, 13, 17, 34})
      for (int64_t cols : {7, 16, 48, 300, 520, 1024, 1043, 9000})
        for (int64_t n : {2, 3, 5, 7, 16, 17, 40, 125}) {
          if (cols > 2000 && rows > 5) continue;  // the wide rows' point is the token blocks
          TestMatrix m = make_matrix(fmt, rows, cols, g());
          int64_t xs = cols + 3, ys = rows + 2, r0 = rows > 1 ? 1 : 0;
          std::vector<float> x = random_floats(g, n * xs);
          std::vector<float> y(n * ys, kSentinel);
          k().matmul(m.view(), x.data(), n, xs, y.data(), ys, r0, rows);
          for (int64_t t = 0; t < n; t++) {
            std::vector<float> want = run_matvec(k(), m, x.data() + t * xs, r0, rows);
            for (int64_t r = 0; r < ys; r++) {
              float expect = r < rows ? want[r] : kSentinel;
              ASSERT_TRUE(same_bits(y[t * ys + r], expect))
                  << shape(m, r0, rows) << " n=" << n << " token " << t << " row " << r
                  << ": matmul " << y[t * ys + r] << " matvec " << expect;
            }
          }
        }
}

// The SIMD trunk rows in the order kernels_body.h fixes for an instruction set of L lanes,
// written out: lane l takes the inputs c with c % L == l, in ascending order, each with one fma
// (F32: straight through the row, zeros past its end; Q8G: a partial per 128-group, then
// total = fma(scale, partial, total)); then lanes l and l + L/2 are added, then l + L/4, down
// to one. (Q4G's lanes take its decode order's inputs, which only the instruction set's file
// knows; MatmulIsBitIdenticalToMatvec and MatvecMatchesScalar cover it.)
float trunk_defined(const TestMatrix& m, const float* x, int64_t r, int lanes) {
  std::vector<float> total(lanes, 0.0f), part(lanes, 0.0f);
  const int64_t step = m.fmt == TensorFormat::kF32 ? m.cols : kQuantGroup;
  for (int64_t c0 = 0; c0 < m.cols; c0 += step) {
    std::vector<float>& acc = m.fmt == TensorFormat::kF32 ? total : part;
    std::fill(part.begin(), part.end(), 0.0f);
    const int64_t end =
        m.fmt == TensorFormat::kF32 ? (m.cols + lanes - 1) / lanes * lanes : c0 + kQuantGroup;
    for (int64_t c = c0; c < end; c++) {
      const bool in = c < m.cols;
      const float w = !in                           ? 0.0f
                      : m.fmt == TensorFormat::kF32 ? m.f32[r * m.cols + c]
                                                    : (float)m.q[r * m.cols + c];
      acc[c % lanes] = std::fma(w, in ? x[c] : 0.0f, acc[c % lanes]);
    }
    if (m.fmt != TensorFormat::kF32) {
      const float s = f16_to_f32(m.scales[r * m.groups() + c0 / kQuantGroup]);
      for (int l = 0; l < lanes; l++) total[l] = std::fma(s, part[l], total[l]);
    }
  }
  for (int w = lanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; l++) total[l] = total[l] + total[l + w];
  return total[0];
}

TEST_P(SimdTest, TrunkRowsFollowTheirDefinedOrder) {
  const int lanes = GetParam() == Isa::kAvx512 ? 16 : GetParam() == Isa::kAvx2 ? 8 : 4;
  Rand g(12);
  for (TensorFormat fmt : {TensorFormat::kF32, TensorFormat::kQ8G})
    for (int64_t rows : {1, 5, 17})
      for (int64_t cols : {1, 7, 16, 100, 128, 129, 300, 1043}) {
        TestMatrix m = make_matrix(fmt, rows, cols, g());
        std::vector<float> x = random_floats(g, cols);
        std::vector<float> got = run_matvec(k(), m, x.data(), 0, rows);
        for (int64_t r = 0; r < rows; r++)
          ASSERT_TRUE(same_bits(got[r], trunk_defined(m, x.data(), r, lanes)))
              << shape(m, 0, rows) << " row " << r << ": " << got[r] << " vs "
              << trunk_defined(m, x.data(), r, lanes);
      }
}

// The attention kernels follow kernels.h's orders exactly, written out here independently: 16
// lanes of fmas then the lanes pairwise for a score, positions ascending for a weighted sum.
TEST_P(IsaTest, AttentionDotsAndSumsFollowTheirDefinedOrder) {
  Rand g(31);
  for (int64_t len : {1, 7, 15, 16, 17, 63, 64, 129, 512, 576})
    for (int64_t n : {1, 3, 4, 5, 9, 64}) {
      const int64_t stride = len + 5;
      std::vector<float> q = random_floats(g, len), keys = random_floats(g, n * stride);
      std::vector<float> got(n + 1, kSentinel);
      k().dots(q.data(), keys.data(), n, stride, len, 0.125f, got.data());
      for (int64_t s = 0; s < n; s++) {
        float lane[16] = {};
        for (int64_t j = 0; j < len; j++)
          lane[j % 16] = std::fma(q[j], keys[s * stride + j], lane[j % 16]);
        for (int w = 8; w > 0; w /= 2)
          for (int l = 0; l < w; l++) lane[l] += lane[l + w];
        ASSERT_TRUE(same_bits(got[s], lane[0] * 0.125f))
            << "len " << len << " n " << n << " s " << s;
      }
      ASSERT_EQ(got[n], kSentinel);
      std::vector<float> a = random_floats(g, n), out = random_floats(g, len + 1), want = out;
      k().axpys(a.data(), keys.data(), n, stride, len, out.data());
      for (int64_t s = 0; s < n; s++)
        for (int64_t j = 0; j < len; j++) want[j] = std::fma(a[s], keys[s * stride + j], want[j]);
      for (int64_t j = 0; j <= len; j++)  // the element past len is left alone
        ASSERT_TRUE(same_bits(out[j], want[j])) << "len " << len << " n " << n << " j " << j;
    }
}

// The delta rule follows kernels.h's definition exactly, written out here independently, for
// head sizes around every instruction set's span (and its masked tail); and it is the delta
// rule: the float64 update of the same state agrees to rounding.
TEST_P(IsaTest, DeltaRuleFollowsItsDefinedOrder) {
  Rand g(37);
  for (int64_t d : {1, 5, 8, 16, 31, 32, 64, 100, 128, 129, 256}) {
    std::vector<float> S = random_floats(g, d * d), q = random_floats(g, d),
                       kk = random_floats(g, d), v = random_floats(g, d), decay(d);
    for (float& x : decay) x = 0.5f + 0.5f * std::fabs(random_floats(g, 1)[0]);
    const float beta = 0.7f;
    std::vector<float> want_S = S, p(d, 0.0f), want_o(d, 0.0f);
    std::vector<double> dS(S.begin(), S.end()), dp(d, 0.0), dout(d, 0.0);
    for (int64_t i = 0; i < d; i++)
      for (int64_t j = 0; j < d; j++) {
        want_S[i * d + j] *= decay[i];
        p[j] = std::fma(want_S[i * d + j], kk[i], p[j]);
        dS[i * d + j] *= decay[i];
        dp[j] += dS[i * d + j] * kk[i];
      }
    for (int64_t j = 0; j < d; j++) {
      p[j] = beta * (v[j] - p[j]);
      dp[j] = beta * (v[j] - dp[j]);
    }
    for (int64_t i = 0; i < d; i++)
      for (int64_t j = 0; j < d; j++) {
        want_S[i * d + j] = std::fma(kk[i], p[j], want_S[i * d + j]);
        want_o[j] = std::fma(want_S[i * d + j], q[i], want_o[j]);
        dS[i * d + j] += kk[i] * dp[j];
        dout[j] += dS[i * d + j] * q[i];
      }
    std::vector<float> o(d + 1, kSentinel);
    k().delta_rule(S.data(), q.data(), kk.data(), v.data(), decay.data(), beta, d, o.data());
    for (int64_t x = 0; x < d * d; x++) ASSERT_TRUE(same_bits(S[x], want_S[x])) << "d " << d;
    for (int64_t j = 0; j < d; j++) {
      ASSERT_TRUE(same_bits(o[j], want_o[j])) << "d " << d << " j " << j;
      EXPECT_NEAR(o[j], dout[j], 1e-6 * d * (1 + std::fabs(dout[j]))) << "d " << d;
    }
    ASSERT_EQ(o[d], kSentinel);  // the element past d is left alone
  }
}

// The expert rows follow kernels.h's definition exactly (vq_defined), for any number of tokens
// (both of the SIMD kernels' ways: summed in place, and a panel), strides and row ranges,
// every stage count and the tiles' edges; rows outside the range and other tokens' places are
// left alone.
TEST_P(IsaTest, VqRowsFollowTheirDefinedOrder) {
  Rand g(29);
  for (int stages = 1; stages <= 5; stages++)
    for (int entries : {16, 256})
      for (int64_t nv : {1, 5, 40})
        for (int64_t rows : {1, 7, 65, 150}) {
          TestVq q = make_vq(stages, entries, rows, nv, g());
          const int64_t width = nv * kVqDim, x_stride = width + 3, y_stride = rows + 2;
          const int64_t n = 1 + (int64_t)below(g, 40);
          std::vector<float> x = random_floats(g, std::max<int64_t>(n, 7) * x_stride);
          std::vector<std::pair<int64_t, int64_t>> ranges = {{0, rows}};
          if (rows > 5) ranges.push_back({3, rows - 1});
          for (auto [a, b] : ranges)
            // 4-7: each table's last count that sums as the positions go by, and the first that
            // keeps its sums for a panel.
            for (int64_t tokens : {(int64_t)1, (int64_t)4, (int64_t)5, (int64_t)6, (int64_t)7, n}) {
              std::vector<float> y(tokens * y_stride, kSentinel);
              k().vq_rows(q.view_books(), x.data(), tokens, x_stride, q.view(), y.data(), y_stride,
                          a, b);
              for (int64_t t = 0; t < tokens; t++)
                for (int64_t r = 0; r < y_stride; r++) {
                  float got = y[t * y_stride + r];
                  if (r < a || r >= b) {
                    ASSERT_EQ(got, kSentinel)
                        << vq_shape(q, a, b) << " token " << t << " row " << r;
                    continue;
                  }
                  float want = vq_defined(q, x.data() + t * x_stride, r);
                  ASSERT_TRUE(same_bits(got, want))
                      << vq_shape(q, a, b) << " n=" << tokens << " token " << t << " row " << r
                      << ": " << got << " vs " << want;
                }
            }
        }
}

// Each of the 65536 f16 patterns as a trunk scale (one code 1 times input 1) and as a VQ row
// scale (a code of one times an input of one): every table must reproduce f16_to_f32 exactly.
TEST_P(IsaTest, ScaleDecodeIsExactForEveryF16) {
  const int64_t n = 65536;
  std::vector<uint16_t> scales(n);
  for (int64_t i = 0; i < n; i++) scales[i] = (uint16_t)i;
  float one = 1.0f;
  for (TensorFormat fmt : {TensorFormat::kQ8G, TensorFormat::kQ4G}) {
    bool q4 = fmt == TensorFormat::kQ4G;
    std::vector<uint8_t> bytes(n * (q4 ? 64 : 128), 0);  // Q4G padding codes decode as -8
    for (int64_t r = 0; r < n; r++) bytes[r * (q4 ? 64 : 128)] = q4 ? 9 : 1;
    Matrix w{fmt, n, 1, bytes.data(), scales.data()};
    std::vector<float> y(n);
    k().matvec(w, &one, y.data(), 0, n);
    for (int64_t r = 0; r < n; r++)
      ASSERT_EQ(y[r], f16_to_f32((uint16_t)r)) << format_name(fmt) << " scale 0x" << std::hex << r;
  }
  std::vector<uint8_t> idx(n, 0);
  std::vector<float> book(16 * kVqDim, 0.0f), x(kVqDim, 0.0f);
  book[0] = x[0] = 1.0f;  // code 0 times x is exactly 1
  const float* stage = book.data();
  std::vector<float> y(n);
  k().vq_rows(VqBooks{&stage, 1, 16}, x.data(), 1, kVqDim,
              VqMatrix{n, 1, idx.data(), scales.data()}, y.data(), n, 0, n);
  for (int64_t r = 0; r < n; r++)
    ASSERT_EQ(y[r], f16_to_f32((uint16_t)r)) << "vq scale 0x" << std::hex << r;
}

// --- Choosing the instruction set.

CpuFeatures all_features() {
  CpuFeatures f;
  f.avx2 = f.fma = f.f16c = f.os_avx = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = f.os_avx512 = true;
  return f;
}

// An arm64 CPU with every feature CpuFeatures names.
CpuFeatures all_arm64_features() {
  CpuFeatures f;
  f.neon = f.fp16 = f.dotprod = f.i8mm = true;
  return f;
}

std::string usage_error(const char* requested, const CpuFeatures& cpu) {
  try {
    choose_isa(requested, cpu);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ChooseIsa, BestAvailableWhenUnset) {
  CpuFeatures f = all_features();
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kAvx512);
  EXPECT_EQ(choose_isa("", f), Isa::kAvx512);
  f.os_avx512 = false;
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kAvx2);
  f.f16c = false;
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kScalar);
  f = all_arm64_features();
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kNeon);
  f.dotprod = f.i8mm = f.fp16 = false;
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kNeon);
  f.neon = false;
  EXPECT_EQ(choose_isa(nullptr, f), Isa::kScalar);
}

TEST(ChooseIsa, RequestLowersTheChoice) {
  EXPECT_EQ(choose_isa("scalar", all_features()), Isa::kScalar);
  EXPECT_EQ(choose_isa("avx2", all_features()), Isa::kAvx2);
  EXPECT_EQ(choose_isa("avx512", all_features()), Isa::kAvx512);
  EXPECT_EQ(choose_isa("scalar", CpuFeatures{}), Isa::kScalar);
  EXPECT_EQ(choose_isa("neon", all_arm64_features()), Isa::kNeon);
  EXPECT_EQ(choose_isa("scalar", all_arm64_features()), Isa::kScalar);
}

TEST(ChooseIsa, MissingFeatureIsNamed) {
  CpuFeatures f = all_features();
  f.avx512bw = false;
  f.avx512vl = false;
  std::string msg = usage_error("avx512", f);
  EXPECT_NE(msg.find("avx512bw"), std::string::npos) << msg;
  EXPECT_NE(msg.find("avx512vl"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("avx512dq"), std::string::npos) << msg;
  EXPECT_EQ(choose_isa("avx2", f), Isa::kAvx2);
  f = all_features();
  f.fma = false;
  msg = usage_error("avx2", f);
  EXPECT_NE(msg.find("fma"), std::string::npos) << msg;
  f = all_features();
  f.os_avx512 = false;
  msg = usage_error("avx512", f);
  EXPECT_NE(msg.find("OS support"), std::string::npos) << msg;
}

// Asking one CPU family for the other's instruction set names what it lacks, as for any other.
TEST(ChooseIsa, OtherFamilyIsRefused) {
  std::string msg = usage_error("neon", all_features());
  EXPECT_NE(msg.find("lacks neon"), std::string::npos) << msg;
  msg = usage_error("avx2", all_arm64_features());
  EXPECT_NE(msg.find("lacks avx2"), std::string::npos) << msg;
  msg = usage_error("avx512", all_arm64_features());
  EXPECT_NE(msg.find("avx512f"), std::string::npos) << msg;
}

TEST(ChooseIsa, UnknownValueIsNamed) {
  std::string msg = usage_error("sve", all_arm64_features());
  EXPECT_NE(msg.find("sve"), std::string::npos) << msg;
  EXPECT_NE(usage_error("AVX2", all_features()), "");
}

// Sets WASTE_ISA for one scope and puts the previous value back.
class ScopedIsaEnv {
 public:
  explicit ScopedIsaEnv(const char* value) {
    if (const char* old = std::getenv("WASTE_ISA")) old_ = old;
    setenv("WASTE_ISA", value, 1);
  }
  ~ScopedIsaEnv() {
    if (old_) {
      setenv("WASTE_ISA", old_->c_str(), 1);
    } else {
      unsetenv("WASTE_ISA");
    }
  }

 private:
  std::optional<std::string> old_;
};

TEST(DetectIsa, HonoursWasteIsa) {
  {
    ScopedIsaEnv env("scalar");
    EXPECT_EQ(detect_isa(), Isa::kScalar);
  }
  {
    ScopedIsaEnv env("bogus");
    EXPECT_THROW(detect_isa(), UsageError);
  }
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    ScopedIsaEnv env(isa_name(isa));
    if (cpu_supports(isa)) {
      EXPECT_EQ(detect_isa(), isa);
    } else {
      EXPECT_THROW(detect_isa(), UsageError);
      EXPECT_THROW(kernels_for(isa), UsageError);
    }
  }
  {
    ScopedIsaEnv env("");
    EXPECT_EQ(detect_isa(), choose_isa(nullptr, cpu_features()));
  }
}

TEST(DetectIsa, CpuAgreesWithItself) {
  EXPECT_TRUE(cpu_supports(Isa::kScalar));
  if (cpu_supports(Isa::kAvx512)) {
    EXPECT_TRUE(cpu_supports(Isa::kAvx2));
  }
  EXPECT_EQ(cpu_supports(Isa::kAvx2), cpu_supports(Isa::kAvx2, cpu_features()));
  EXPECT_EQ(cpu_supports(Isa::kNeon), cpu_features().neon);
  const CpuFeatures f = cpu_features();
  EXPECT_FALSE(f.neon && (f.avx2 || f.avx512f)) << cpu_feature_names(f);
}

// What this CPU reports, when the run says what to expect: the arm64 stage of scripts/test runs
// this suite under qemu CPU models with and without DotProd/I8MM and names their features here,
// so a HWCAP misread (or a model that did not take effect) fails instead of testing one path twice.
TEST(DetectIsa, ReportsTheExpectedFeatures) {
  const char* expected = std::getenv("WASTE_EXPECT_CPU_FEATURES");
  if (!expected) GTEST_SKIP() << "WASTE_EXPECT_CPU_FEATURES is not set";
  EXPECT_EQ(cpu_feature_names(cpu_features()), expected);
}

TEST(Names, CpuFeatures) {
  EXPECT_EQ(cpu_feature_names(CpuFeatures{}), "");
  EXPECT_EQ(cpu_feature_names(all_arm64_features()), "neon fp16 dotprod i8mm");
  CpuFeatures f;
  f.avx2 = f.fma = f.avxvnni = true;
  EXPECT_EQ(cpu_feature_names(f), "avx2 fma avxvnni");
}

TEST(Names, IsaAndFormat) {
  EXPECT_STREQ(isa_name(Isa::kScalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::kAvx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::kAvx512), "avx512");
  EXPECT_STREQ(isa_name(Isa::kNeon), "neon");
  EXPECT_STREQ(format_name(TensorFormat::kF32), "F32");
  EXPECT_STREQ(format_name(TensorFormat::kQ8G), "Q8G");
  EXPECT_STREQ(format_name(TensorFormat::kQ4G), "Q4G");
}

}  // namespace
}  // namespace waste
