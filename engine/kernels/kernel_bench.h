// `waste bench --kernels`: every kernel of the table (kernels.h) on every instruction set this
// CPU runs, at the shapes of the real models, on one thread and on a pool, beside the fp32 FMA
// peak (fma_peak.h) measured in the same run. No model is needed: the inputs are random.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/kernels/kernels.h"

namespace waste {

// Whose shapes to measure: "kimi-linear" (Kimi-Linear 48B) or "k3" (docs/MODEL.md §1).
const std::vector<std::string>& kernel_bench_models();

struct KernelBenchOptions {
  std::vector<std::string> models;  // empty: all of kernel_bench_models()
  int threads = 0;                  // the pool's (0: one per hardware thread)
  // Calls per timing. 0: enough calls to fill min_seconds, the best of three such batches.
  int64_t iters = 0;
  double min_seconds = 0.05;
  // Small shapes of its own instead of a model's, one call each: that every kernel runs, for
  // tests and emulators, not figures to compare.
  bool quick = false;
};

// One kernel at one shape, instruction set and thread count. Per call: the work in `unit`s, the
// bytes of weights, indices, keys or state it streams, and its floating-point operations (a
// multiply-add counts two; vq_rows counts the dense product's, two per weight and token).
struct KernelTiming {
  std::string kernel;  // the table's field: "matvec", "matmul", "vq_rows", ...
  std::string format;  // matvec and matmul: the trunk format ("F32", "Q8G", "Q4G"); else empty
  std::string model;
  std::string shape;  // readable, e.g. "12288x7168 x 16 tokens"
  std::string unit;   // what units counts: "row", "row-token", "key", "head"
  Isa isa = Isa::kScalar;
  int threads = 1;
  double seconds = 0;  // one call, the best timing
  double units = 0, bytes = 0, flops = 0;
};

// The FMA loop in the widest vectors this CPU has, on one thread and on the pool: the better of a
// measurement before the kernels and one after them. None on a CPU with only the scalar Isa.
struct FmaPeak {
  Isa isa = Isa::kScalar;
  int threads = 1;
  double flops_per_second = 0;
  double flops_per_call = 0;  // one thread's loop, timed per call
};

struct KernelBench {
  std::vector<Isa> isas;  // those measured: every Isa this CPU supports, in enum order
  int threads = 1;        // the pool's
  std::vector<FmaPeak> peaks;
  std::vector<KernelTiming> timings;
};

// Throws UsageError for a model name it does not know.
KernelBench bench_kernels(const KernelBenchOptions& o);

// Every Isa this build knows, in enum order, whatever the CPU.
std::vector<Isa> known_isas();

}  // namespace waste
