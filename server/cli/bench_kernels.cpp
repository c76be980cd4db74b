// `waste bench --kernels`: the kernels alone (engine/kernels/kernel_bench.h), per instruction set
// and thread count, each beside the FMA peak measured in the same run. Figures from a real Apple
// Silicon machine can be set beside the x86 ones in docs/PERFORMANCE.md; under emulation the
// figures are not speeds, and the command says so.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/kernels/kernel_bench.h"
#include "protocol/json/json_writer.h"
#include "server/cli/args.h"
#include "server/cli/commands.h"

namespace waste::cli {

namespace {

struct Row {
  const KernelTiming* t;
  double ns_per_unit, gbps, gflops, of_peak;  // of_peak 0: no peak measured
};

Row row(const KernelTiming& t, const KernelBench& b) {
  Row r{&t, 1e9 * t.seconds / t.units, t.bytes / t.seconds / 1e9, t.flops / t.seconds / 1e9, 0};
  for (const FmaPeak& p : b.peaks)
    if (p.threads == t.threads && p.flops_per_second > 0)
      r.of_peak = t.flops / t.seconds / p.flops_per_second;
  return r;
}

std::string isa_list(const std::vector<Isa>& isas) {
  std::string s;
  for (Isa isa : isas) s += (s.empty() ? "" : ", ") + std::string(isa_name(isa));
  return s;
}

}  // namespace

int cmd_bench_kernels(int argc, char** argv) {
  Args a(argc, argv, 2, {"--arch", "--threads", "--kernel-iters"},
         {"--kernels", "--quick", "--json"});
  if (!a.positional().empty())
    throw UsageFailure{"--kernels measures the kernels alone and takes no MODEL"};
  KernelBenchOptions o;
  if (auto arch = a.get("--arch")) {
    const std::vector<std::string>& known = kernel_bench_models();
    if (std::find(known.begin(), known.end(), *arch) == known.end())
      throw UsageFailure{fmt::format("--arch {} is not {}", *arch, fmt::join(known, " or "))};
    o.models = {*arch};
  }
  o.quick = a.has("--quick");
  if (o.quick && a.has("--arch"))
    throw UsageFailure{"--quick measures its own small shapes; it takes no --arch"};
  o.threads = (int)a.get_int("--threads", 0, 0, 4096);
  o.iters = a.get_int("--kernel-iters", 0, 0, 1 << 24);
  // scripts/emulate sets it for the programs it runs under qemu; there is no portable way for a
  // program to see that itself.
  const char* emulator = std::getenv("WASTE_EMULATED");
  const bool emulated = emulator && *emulator;
  // Said above and below the table; the JSON says it in "emulated" and "emulator".
  const std::string warning = fmt::format(
      "running under emulation ({}): these timings measure the emulator, not a CPU, and are not "
      "speeds",
      emulated ? emulator : "");

  const KernelBench b = bench_kernels(o);
  std::vector<Row> rows;
  for (const KernelTiming& t : b.timings) rows.push_back(row(t, b));

  if (a.has("--json")) {
    JsonWriter w;
    w.begin_object();
    w.key("emulated").value(emulated);
    if (emulated) w.key("emulator").value(emulator);
    w.key("threads").value(b.threads);
    w.key("isas").begin_array();
    for (Isa isa : b.isas) w.value(isa_name(isa));
    w.end_array();
    w.key("fma_peak").begin_array();
    for (const FmaPeak& p : b.peaks)
      w.begin_object()
          .key("isa")
          .value(isa_name(p.isa))
          .key("threads")
          .value(p.threads)
          .key("gflops")
          .value(p.flops_per_second / 1e9)
          .key("flops_per_call")
          .value(p.flops_per_call)
          .end_object();
    w.end_array();
    w.key("kernels").begin_array();
    for (const Row& r : rows) {
      const KernelTiming& t = *r.t;
      w.begin_object();
      w.key("kernel").value(t.kernel).key("format").value(t.format);
      w.key("model").value(t.model).key("shape").value(t.shape).key("unit").value(t.unit);
      w.key("isa").value(isa_name(t.isa)).key("threads").value(t.threads);
      w.key("seconds_per_call").value(t.seconds).key("ns_per_unit").value(r.ns_per_unit);
      w.key("bytes_per_call").value(t.bytes).key("gbps").value(r.gbps);
      w.key("flops_per_call").value(t.flops).key("gflops").value(r.gflops);
      w.key("of_peak").value(r.of_peak);
      w.end_object();
    }
    w.end_array();
    w.end_object();
    fmt::print("{}\n", w.str());
    return 0;
  }

  if (emulated) fmt::print("warning: {}\n", warning);
  fmt::print("kernels on {} (this CPU's instruction sets), 1 and {} threads{}\n", isa_list(b.isas),
             b.threads,
             o.quick ? "; --quick: one call each at small shapes, not figures to compare" : "");
  if (b.peaks.empty()) {
    fmt::print("fp32 FMA peak: none (no vector instruction set), so no fraction of it\n");
  } else {
    fmt::print("fp32 FMA peak ({} loop, in registers):", isa_name(b.peaks[0].isa));
    for (const FmaPeak& p : b.peaks)
      fmt::print(" {} thread{} {:.1f} GFLOP/s;", p.threads, p.threads == 1 ? "" : "s",
                 p.flops_per_second / 1e9);
    fmt::print(" 'of peak' is each kernel's GFLOP/s over the peak at its thread count\n");
  }
  std::string model;
  for (const Row& r : rows) {
    const KernelTiming& t = *r.t;
    if (t.model != model) {
      model = t.model;
      fmt::print("\n{}\n{:<15} {:<6} {:<40} {:<9} {:<7} {:>3} {:>10} {:>7} {:>8} {:>7}\n", model,
                 "kernel", "format", "shape", "unit", "isa", "thr", "ns/unit", "GB/s", "GFLOP/s",
                 "of peak");
    }
    fmt::print("{:<15} {:<6} {:<40} {:<9} {:<7} {:>3} {:>10.2f} {:>7} {:>8.2f} {:>7}\n", t.kernel,
               t.format.empty() ? "-" : t.format, t.shape, t.unit, isa_name(t.isa), t.threads,
               r.ns_per_unit, t.bytes > 0 ? fmt::format("{:.2f}", r.gbps) : "-", r.gflops,
               r.of_peak > 0 ? fmt::format("{:.1f}%", 100 * r.of_peak) : "-");
  }
  if (emulated) fmt::print("\nwarning: {}\n", warning);
  return 0;
}

}  // namespace waste::cli
