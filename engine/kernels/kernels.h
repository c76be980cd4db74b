// The numeric kernels: trunk matrix products and the VQ expert rows (docs/FORMAT.md §8). Every
// kernel exists as a scalar reference and as SIMD variants for each CPU family (x86_64:
// AVX2, AVX-512; arm64: NEON); one table is chosen at run time from what the CPU reports. Kernels
// are single-threaded over a row range: callers split rows across threads, so results never depend
// on the thread count.
#pragma once

#include <cstdint>
#include <string>

#include "engine/kernels/matrix.h"

namespace waste {

enum class Isa { kScalar, kAvx2, kAvx512, kNeon };

const char* isa_name(Isa isa);

// The best instruction set this CPU supports. WASTE_ISA=scalar|avx2|avx512|neon lowers the choice
// (asking for more than the CPU has is an error naming what is missing).
Isa detect_isa();
bool cpu_supports(Isa isa);

// What the CPU reports (x86_64: CPUID and XGETBV; arm64: the OS, from the platform layer); the
// pieces an instruction set needs, so errors can name them. A CPU of one family has none of the
// other's.
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, os_avx = false;  // os_*: XCR0 saves the state
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false, os_avx512 = false;
  // Not part of any Isa: only the VQ encoder's integer screens use them (vq_select_x86.cpp).
  bool avx512vnni = false, avx512vbmi2 = false, avxvnni = false;
  // arm64: Advanced SIMD (every arm64 CPU; kNeon needs it), half-precision vector arithmetic
  // (Armv8.2 FP16), SDOT/UDOT (Armv8.2 DotProd) and the 8-bit matrix multiplies (Armv8.6 I8MM).
  bool neon = false, fp16 = false, dotprod = false, i8mm = false;
};
// Defined once per CPU family (isa_x86.cpp, isa_arm64.cpp; the build compiles its target's).
CpuFeatures cpu_features();
// The features `cpu` has, by their usual names, space separated ("avx2 fma f16c ...", "neon
// dotprod ..."), for the daemon's and the benchmark's reports.
std::string cpu_feature_names(const CpuFeatures& cpu);
bool cpu_supports(Isa isa, const CpuFeatures& cpu);
// detect_isa's choice for a WASTE_ISA value (null or empty: unset) on a CPU with `cpu`.
Isa choose_isa(const char* requested, const CpuFeatures& cpu);

// VQ codebooks for one (layer, matrix kind): `stages` books of `entries` codes of 8 floats,
// each entry-major ([entries][8]: code c's eight components are contiguous).
struct VqBooks {
  const float* const* stage = nullptr;  // stage[s] -> entries * 8 floats
  int stages = 0;
  int entries = 0;
};

// A VQ-coded matrix of an expert record: rows x (nv*8) weights, indices blocked in 64-row tiles
// ([row_block][vector_position][row_in_block][stage]), one f16 scale per row.
struct VqMatrix {
  int64_t rows = 0;
  int64_t nv = 0;                    // input length / 8
  const uint8_t* idx = nullptr;      // ceil(rows/64)*64 * nv * stages bytes
  const uint16_t* scales = nullptr;  // rows f16 (exact decode, subnormals kept)
};

// What of matmul's blocking (kernels_body.h) the RAM plan needs: tokens per block, columns per
// span, the most the panels of a block's inputs hold, the rows of a block and the widest vector
// of any table (for the block's running sums), and the most tokens the few-token loop takes.
constexpr int64_t kMatmulBlockTokens = 120, kMatmulSpanCols = 512, kMatmulPanelFloats = 1 << 20;
constexpr int64_t kMatmulBlockRows = 16, kMatmulMaxLanes = 16, kMatmulFewTokens = 16;

// The floats one matmul call allocates at most, on a matrix of `cols` columns: the blocked
// loop's panels, one token's padded row and the block's running sums, or the few-token loop's
// panels. The RAM plan counts it per compute thread.
constexpr int64_t matmul_scratch_floats(int64_t cols) {
  const int64_t spans = (cols + kMatmulSpanCols - 1) / kMatmulSpanCols * kMatmulSpanCols;
  const int64_t groups = (cols + 127) / 128 * 128;
  const int64_t blocked = kMatmulBlockTokens * spans;
  int64_t panels = blocked < kMatmulPanelFloats ? blocked : kMatmulPanelFloats;
  if (panels < spans) panels = spans;  // one token wider than the cap takes its width
  const int64_t sums = kMatmulBlockRows * kMatmulBlockTokens * kMatmulMaxLanes;
  const int64_t few = kMatmulFewTokens * groups;
  return panels + spans + sums > few ? panels + spans + sums : few;
}

constexpr int64_t kVqRowBlock = 64;
constexpr int kVqDim = 8;

struct Kernels {
  Isa isa;

  // y[r] = sum_c w[r][c] * x[c] for r in [r0, r1); y is indexed by absolute row.
  // Quantized: per 128-group a float partial dot, then acc += f16(scale) * partial. Each Isa
  // fixes its summation order (docs/FORMAT.md §8.4; the SIMD ones in kernels_body.h).
  void (*matvec)(const Matrix& w, const float* x, float* y, int64_t r0, int64_t r1);

  // For t < n: y[t*y_stride + r] = row r of w times x + t*x_stride, for r in [r0, r1).
  // Each output is bit-identical to matvec on that token with the same Isa: chunked prefill
  // must give the same logits as token-by-token decode.
  void (*matmul)(const Matrix& w, const float* x, int64_t n, int64_t x_stride, float* y,
                 int64_t y_stride, int64_t r0, int64_t r1);

  // A VQ-coded expert matrix applied to n tokens (docs/FORMAT.md §8.2): for t < n and r in
  // [r0, r1) (any r0), y[t*y_stride + r] = f16(scale[r]) * reduce8(a), where eight lanes
  // a[d] (d < 8) start at 0 and, for v = 0 .. nv-1 in order,
  //   w[d] = book_0[i_0][d] + book_1[i_1][d] + ... + book_{S-1}[i_{S-1}][d]  (left to right)
  //   a[d] = fma(w[d], x_t[8v + d], a[d])
  // with i_s the row's stage-s index at position v, and
  //   reduce8(a) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
  // Every Isa gives the same bits, and each output's operations are its token's and row's
  // alone, so a result never depends on n, on which tokens share the call or on the row range:
  // an expert applied to a whole prefill window gives decode's bits.
  void (*vq_rows)(const VqBooks& books, const float* x, int64_t n, int64_t x_stride,
                  const VqMatrix& m, float* y, int64_t y_stride, int64_t r0, int64_t r1);

  // Attention scores: out[s] = scale * (q . keys[s * stride]) over len floats, for s < n. Each
  // dot runs in 16 lanes (lane l = fma(q[j], k[j], lane l) for j % 16 == l, j ascending), then
  // the lanes pairwise, 8, 4, 2 and 1 apart. Every Isa gives the same bits.
  void (*dots)(const float* q, const float* keys, int64_t n, int64_t stride, int64_t len,
               float scale, float* out);

  // Weighted sums: out[j] = fma(a[s], rows[s * stride + j], out[j]) for j < len, s ascending
  // from 0 to n - 1. Every Isa gives the same bits.
  void (*axpys)(const float* a, const float* rows, int64_t n, int64_t stride, int64_t len,
                float* out);

  // One head's delta-rule step (docs/MODEL.md §4) on its d x d state S (row i: key dim i);
  // p and o start at 0, and both passes run over i ascending:
  //   S[i][j] = S[i][j] * decay[i];  p[j] = fma(S[i][j], k[i], p[j])
  //   p[j] = beta * (v[j] - p[j])
  //   S[i][j] = fma(k[i], p[j], S[i][j]);  o[j] = fma(S[i][j], q[i], o[j])
  // Every output element is a sum over i alone, so every Isa gives the same bits.
  void (*delta_rule)(float* S, const float* q, const float* k, const float* v, const float* decay,
                     float beta, int64_t d, float* o);
};

// The table for `isa`; throws UsageError when this CPU cannot run it (instead of SIGILL later).
const Kernels& kernels_for(Isa isa);

// Each instruction set's table, defined in kernels_<isa>.cpp; use kernels_for().
namespace detail {
const Kernels& scalar_kernels();
const Kernels& avx2_kernels();
const Kernels& avx512_kernels();
const Kernels& neon_kernels();
// The table of `isa` when it is one of the build's CPU family (isa_x86.cpp, isa_arm64.cpp), else
// null: only that file names the family's tables, so a build links just the ones it compiled.
const Kernels* family_kernels(Isa isa);
}  // namespace detail

}  // namespace waste
