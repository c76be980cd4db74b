// The `waste` executable's container commands, driven as a user would.
#include <gtest/gtest.h>

#include <simdjson.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/kernels/kernel_bench.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;

std::string waste_cmd(const std::string& args) {
  return test::waste_binary().string() + " " + args;
}

// A command whose stdout is parsed as JSON: its log lines (stderr; a fallback the engine took,
// such as reader threads where io_uring is missing) are left out.
std::string waste_json_cmd(const std::string& args) {
  return waste_cmd(args) + " 2>/dev/null";
}

TEST(Cli, SynthInfoVerifyRoundTrip) {
  test::TempDir d;
  std::string out;
  fs::path m = d / "m.waste";
  ASSERT_EQ(test::run_command(waste_cmd("synth " + m.string() + " --arch k3 --preset tiny"), &out),
            0)
      << out;
  ASSERT_EQ(test::run_command(waste_json_cmd("info " + m.string() + " --json"), &out), 0) << out;
  simdjson::dom::parser p;
  simdjson::dom::element info = p.parse(out).value();
  EXPECT_EQ(std::string_view(info["family"].get_string().value()), "k3");
  EXPECT_EQ(int64_t(info["moe_layers"].get_int64().value()), 5);
  EXPECT_GT(int64_t(info["params_total"].get_int64().value()),
            int64_t(info["params_active"].get_int64().value()));
  EXPECT_GT(int64_t(info["ram"]["floor_bytes"].get_int64().value()), 0);
  ASSERT_EQ(test::run_command(waste_cmd("verify " + m.string()), &out), 0) << out;
  EXPECT_NE(out.find("all 80 expert records"), std::string::npos) << out;
}

TEST(Cli, VerifyNamesTheCorruptRecordAndFails) {
  test::TempDir d;
  std::string out;
  fs::path m = d / "m.waste";
  ASSERT_EQ(test::run_command(waste_cmd("synth " + m.string()), &out), 0) << out;
  {
    std::fstream f(m / "experts-L3.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12288 * 6 + 500);
    f.put('\x77');
  }
  EXPECT_EQ(test::run_command(waste_cmd("verify " + m.string()), &out), 1) << out;
  EXPECT_NE(out.find("experts-L3.bin: layer 3, expert 6, byte offset 73728"), std::string::npos)
      << out;
  EXPECT_NE(out.find("1 of 32 expert records failed"), std::string::npos) << out;
}

double num(simdjson::dom::element e, const char* key) {
  simdjson::dom::element v = e[key].value();
  return v.is_double() ? v.get_double().value() : (double)v.get_int64().value();
}

// `waste bench` reports every figure beside a floor measured in the same run, and the figures
// agree with each other; a budget under the floor is refused before the model is loaded.
TEST(Cli, BenchFiguresComeWithTheirFloors) {
  test::TempDir d;
  std::string out;
  fs::path m = d / "m.waste";
  ASSERT_EQ(test::run_command(waste_cmd("synth " + m.string()), &out), 0) << out;
  // Two threads, so the floor (each thread's attention scores among it) is every machine's.
  ASSERT_EQ(test::run_command(waste_json_cmd("bench " + m.string() +
                                             " --tokens 5 --prompt-tokens 3 --budget 20M "
                                             "--threads 2 --json"),
                              &out),
            0)
      << out;
  simdjson::dom::parser p;
  simdjson::dom::element b = p.parse(out).value();
  EXPECT_EQ(num(b, "tokens"), 5);
  EXPECT_NEAR(num(b, "decode_tokens_per_second") * num(b, "seconds_per_token"), 1.0, 1e-9);
  EXPECT_GT(num(b, "prefill_tokens_per_second"), 0);
  EXPECT_GE(num(b, "hit_rate"), 0);
  EXPECT_LE(num(b, "hit_rate"), 1);
  EXPECT_GE(num(b, "lookahead_accuracy"), 0);
  EXPECT_LE(num(b, "lookahead_accuracy"), 1);
  EXPECT_GT(num(b, "bytes_read_per_token"), 0);  // a cold cache reads
  EXPECT_EQ(std::fmod(num(b, "bytes_read_per_token") * 5, num(b, "record_bytes")), 0)
      << "reads are whole records";
  // The pooled disk figure lies between the two measurements it pools.
  double lo = std::min(num(b, "disk_gbps_before"), num(b, "disk_gbps_after"));
  double hi = std::max(num(b, "disk_gbps_before"), num(b, "disk_gbps_after"));
  EXPECT_GT(lo, 0);
  EXPECT_GE(num(b, "disk_gbps"), lo * (1 - 1e-12));
  EXPECT_LE(num(b, "disk_gbps"), hi * (1 + 1e-12));
  EXPECT_NEAR(num(b, "floor_io_seconds_per_token"),
              num(b, "bytes_read_per_token") / (num(b, "disk_gbps") * 1e9), 1e-12);
  EXPECT_GT(num(b, "floor_compute_seconds_per_token"), 0);
  double floor =
      std::max(num(b, "floor_io_seconds_per_token"), num(b, "floor_compute_seconds_per_token"));
  EXPECT_NEAR(num(b, "floor_ratio"), floor / num(b, "seconds_per_token"), 1e-9);
  // Per layer: every layer once, in order, and together no more than the whole.
  simdjson::dom::array layers = b["layers"].get_array().value();
  double decode_ms = 0, prefill_ms = 0;
  int64_t next = 1;
  for (simdjson::dom::element l : layers) {
    EXPECT_EQ(num(l, "layer"), next++);
    EXPECT_GE(num(l, "decode_ms_per_token"), 0);
    EXPECT_GE(num(l, "prefill_ms_per_token"), 0);
    decode_ms += num(l, "decode_ms_per_token");
    prefill_ms += num(l, "prefill_ms_per_token");
  }
  EXPECT_EQ(next, 6);  // the tiny Kimi-Linear's five layers
  EXPECT_LE(decode_ms, 1e3 * num(b, "seconds_per_token"));
  EXPECT_GT(decode_ms, 0);
  EXPECT_LE(prefill_ms, 1e3 / num(b, "prefill_tokens_per_second"));
  EXPECT_TRUE(b["k3_93_layers_extrapolated"].error()) << "only K3's true shape is scaled";
  EXPECT_TRUE(b["k2_61_layers_extrapolated"].error()) << "only Kimi K2's true shape is scaled";

  EXPECT_EQ(test::run_command(waste_cmd("bench " + m.string() + " --budget 1M"), &out), 1);
  EXPECT_NE(out.find("a budget of 1.00 MiB is under this model's floor"), std::string::npos) << out;
  ASSERT_EQ(test::run_command(waste_json_cmd("plan " + m.string() + " --ctx 512 --json"), &out), 0)
      << out;
  simdjson::dom::element plan = p.parse(out).value();
  EXPECT_EQ(num(plan, "ctx"), 512);
  EXPECT_GE(num(plan, "budget_bytes"), num(plan, "floor_bytes"));
  EXPECT_LE(num(plan, "budget_bytes"), num(plan, "cap_bytes"));
  EXPECT_GE(num(plan, "window_tokens"), 64);
  EXPECT_EQ(std::fmod(num(plan, "window_tokens"), 64), 0);
}

// `waste bench --kernels` measures every kernel of the table on every instruction set this CPU
// runs, on one thread and on the pool, beside the FMA peak of the same run. What it lists is
// checked here, not how fast anything was.
TEST(Cli, BenchKernelsListsEveryKernelForEveryIsa) {
  std::string out;
  ASSERT_EQ(test::run_command(waste_cmd("bench --kernels --quick --threads 2 --json"), &out), 0)
      << out;
  simdjson::dom::parser p;
  simdjson::dom::element b = p.parse(out).value();
  std::set<std::string> supported, vector_isas, listed;
  std::string widest;  // the last vector Isa this CPU runs, in enum order
  for (Isa isa : known_isas()) {
    if (!cpu_supports(isa)) continue;
    supported.insert(isa_name(isa));
    if (isa != Isa::kScalar) vector_isas.insert(widest = isa_name(isa));
  }
  simdjson::dom::array isas = b["isas"].get_array().value();
  for (simdjson::dom::element isa : isas) listed.insert(std::string(isa.get_string().value()));
  EXPECT_EQ(listed, supported);
  EXPECT_EQ(num(b, "threads"), 2);
  const char* emulator = std::getenv("WASTE_EMULATED");  // set where the suite runs emulated
  EXPECT_EQ(b["emulated"].get_bool().value(), emulator && *emulator);

  // (kernel, format) -> "isa/threads" of each timing, which must each appear once.
  std::map<std::string, std::multiset<std::string>> seen;
  simdjson::dom::array timings = b["kernels"].get_array().value();
  for (simdjson::dom::element t : timings) {
    const std::string name = std::string(t["kernel"].get_string().value()) + " " +
                             std::string(t["format"].get_string().value());
    seen[name].insert(std::string(t["isa"].get_string().value()) + "/" +
                      std::to_string((int64_t)num(t, "threads")));
    EXPECT_EQ(std::string_view(t["model"].get_string().value()), "quick");
    EXPECT_GT(num(t, "ns_per_unit"), 0) << name;
    EXPECT_GT(num(t, "flops_per_call"), 0) << name;
    // A fraction exactly where a peak was measured.
    EXPECT_EQ(num(t, "of_peak") > 0, !vector_isas.empty()) << name;
  }
  std::multiset<std::string> every;
  for (const std::string& isa : supported)
    for (const char* threads : {"/1", "/2"}) every.insert(isa + threads);
  const std::set<std::string> kernels = {"matvec F32", "matvec Q8G", "matvec Q4G", "matmul F32",
                                         "matmul Q8G", "matmul Q4G", "vq_rows ",   "dots ",
                                         "axpys ",     "delta_rule "};
  // matmul twice: for a prefill piece and for a window; vq_rows for one token and for a window's
  // share.
  auto expected = [&](const std::string& kernel) {
    std::multiset<std::string> want = every;
    if (kernel.starts_with("matmul ") || kernel == "vq_rows ")
      want.insert(every.begin(), every.end());
    return want;
  };
  for (const std::string& k : kernels) EXPECT_EQ(seen[k], expected(k)) << k;
  EXPECT_EQ(seen.size(), kernels.size());

  // The peak comes from the widest vectors, on one thread and on both.
  std::set<int64_t> peak_threads;
  simdjson::dom::array peaks = b["fma_peak"].get_array().value();
  for (simdjson::dom::element pk : peaks) {
    EXPECT_EQ(std::string_view(pk["isa"].get_string().value()), widest);
    EXPECT_GT(num(pk, "gflops"), 0);
    // Each call is long beside waking the pool's threads (tens of microseconds): with 8 MFLOP a
    // call (33 us at 256 GFLOP/s), the two-thread peak came out below the one-thread one.
    EXPECT_GE(num(pk, "flops_per_call"), 1e8);
    peak_threads.insert((int64_t)num(pk, "threads"));
  }
  const std::set<int64_t> both = {1, 2};
  EXPECT_EQ(peak_threads, vector_isas.empty() ? std::set<int64_t>() : both);

  // The table lists the same, and says when the timings are not speeds.
  ASSERT_EQ(
      test::run_command(
          "WASTE_EMULATED='qemu test' " + waste_cmd("bench --kernels --quick --threads 2"), &out),
      0)
      << out;
  EXPECT_NE(out.find("warning: running under emulation (qemu test): these timings measure the "
                     "emulator, not a CPU, and are not speeds"),
            std::string::npos)
      << out;
  std::map<std::string, std::multiset<std::string>> rows;  // kernel format -> "isa/threads"
  std::istringstream table(out);
  for (std::string line; std::getline(table, line);) {
    std::istringstream words(line);
    std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
    if (w.size() < 8 || !kernels.count(w[0] + " " + (w[1] == "-" ? "" : w[1]))) continue;
    // kernel, format, the shape's words, unit, isa, threads, then four figures
    rows[w[0] + " " + (w[1] == "-" ? "" : w[1])].insert(w[w.size() - 6] + "/" + w[w.size() - 5]);
  }
  for (const std::string& k : kernels) EXPECT_EQ(rows[k], expected(k)) << k << "\n" << out;

  EXPECT_EQ(test::run_command(waste_cmd("bench --kernels --arch llama"), &out), 2);
  EXPECT_NE(out.find("--arch llama is not kimi-linear or k3"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("bench --kernels m.waste"), &out), 2);
  EXPECT_NE(out.find("takes no MODEL"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("bench --kernels --quick --arch k3"), &out), 2);
  EXPECT_NE(out.find("it takes no --arch"), std::string::npos) << out;
}

TEST(Cli, BadCommandLinesAreRefusedWithUsage) {
  std::string out;
  EXPECT_EQ(test::run_command(waste_cmd("info"), &out), 2);
  EXPECT_NE(out.find("usage: waste info"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("info x --bogus"), &out), 2);
  EXPECT_NE(out.find("unknown option --bogus"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("info x --ctx abc"), &out), 2);
  EXPECT_NE(out.find("'abc' is not an integer"), std::string::npos) << out;
  // Numbers are read before the model opens, and the refusal names the flag.
  EXPECT_EQ(test::run_command(waste_cmd("chat /nonexistent/m.waste --temp x"), &out), 2);
  EXPECT_NE(out.find("--temp: 'x' is not a number"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("run /nonexistent/m.waste --top-p 2"), &out), 2);
  EXPECT_NE(out.find("--top-p: 2 is out of range"), std::string::npos) << out;
  EXPECT_EQ(
      test::run_command(waste_cmd("download --repo a/b --dest /nonexistent/d --timeout 9x"), &out),
      2);
  EXPECT_NE(out.find("--timeout: '9x' is not a number"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("frobnicate"), &out), 2);
  EXPECT_EQ(test::run_command(waste_cmd("info /nonexistent/m.waste"), &out), 1);
  EXPECT_NE(out.find("/nonexistent/m.waste: not a container directory"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("synth /tmp/x --arch llama"), &out), 2);
  EXPECT_NE(out.find("'llama' is not kimi-linear, k3 or deepseek-v3"), std::string::npos) << out;
  test::TempDir d;  // a path that does not exist, so only the options can be refused
  const std::string to = (d / "m.waste").string();
  EXPECT_NE(test::run_command(waste_cmd("synth " + to + " --preset tiny --layers 3"), &out), 0);
  EXPECT_NE(
      out.find("--layers applies to presets k3-shape, and tiny and k2-shape of deepseek-v3 only"),
      std::string::npos)
      << out;
  EXPECT_NE(test::run_command(waste_cmd("synth " + to + " --preset k2-shape --layers 2"), &out), 0);
  EXPECT_NE(out.find("k2-shape is Kimi K2's shape; use --arch deepseek-v3"), std::string::npos)
      << out;
  EXPECT_NE(
      test::run_command(
          waste_cmd("synth " + to + " --arch deepseek-v3 --preset k2-shape --layers 62"), &out),
      0);
  EXPECT_NE(out.find("--layers 62 is not between 1 and 61"), std::string::npos) << out;
  EXPECT_NE(
      test::run_command(waste_cmd("synth " + to + " --arch deepseek-v3 --preset small"), &out), 0);
  EXPECT_NE(out.find("--arch deepseek-v3 has presets tiny and k2-shape"), std::string::npos) << out;
  EXPECT_NE(test::run_command(waste_cmd("synth " + to + " --preset k3-shape"), &out), 0);
  EXPECT_NE(out.find("k3-shape is K3's shape; use --arch k3"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(waste_cmd("synth " + to + " --arch k3 --preset k3-shape --layers 94"),
                              &out),
            2);
  EXPECT_NE(out.find("--layers"), std::string::npos) << out;
}

// Every command answers --help (or -h) with its usage and exit 0; the model commands list the
// engine options too.
TEST(Cli, EveryCommandAnswersHelp) {
  std::string all;
  ASSERT_EQ(test::run_command(waste_cmd("--help"), &all), 0);
  for (const char* c :
       {"serve", "health", "info", "verify", "run", "eval", "chat", "tokenize", "render", "schema",
        "plan", "bench", "cachesim", "synth", "convert", "download"}) {
    EXPECT_NE(all.find(std::string("waste ") + c), std::string::npos) << c;
    std::string out;
    EXPECT_EQ(test::run_command(waste_cmd(std::string(c) + " --help"), &out), 0) << c << out;
    EXPECT_NE(out.find("usage: waste " + std::string(c)), std::string::npos) << out;
    EXPECT_EQ(test::run_command(waste_cmd(std::string(c) + " x -h"), &out), 0) << c << out;
  }
  std::string out;
  ASSERT_EQ(test::run_command(waste_cmd("run --help"), &out), 0);
  EXPECT_NE(out.find("WASTE_IO_BACKEND"), std::string::npos) << out;
  // Each model command's usage line lists every engine option, from the one table.
  for (const char* c : {"run", "eval", "chat", "bench"}) {
    ASSERT_EQ(test::run_command(waste_cmd(std::string(c) + " --help"), &out), 0) << c;
    const std::string line = out.substr(0, out.find('\n'));
    for (const char* o : {"[--budget BUDGET]", "[--ctx CTX]", "[--threads THREADS]",
                          "[--chunk CHUNK]", "[--lookahead LOOKAHEAD]", "[--io-threads IO_THREADS]",
                          "[--io-backend IO_BACKEND]", "[--policy POLICY]", "[--verify]"})
      EXPECT_NE(line.find(o), std::string::npos) << c << ": " << o << " in " << line;
  }
}

// `waste render` and `waste tokenize` on the real K3 tokenizer reproduce the release's encoder.
TEST(Cli, RenderAndTokenizeMatchTheReleaseGoldens) {
  std::string k3 = (test::fixtures_dir() / "k3").string();
  std::string tok =
      " --tokenizer " + k3 + "/tiktoken.model --specials " + k3 + "/tokenizer_config.json";
  simdjson::dom::parser gp;
  simdjson::dom::element golden = gp.load(k3 + "/render_golden.json").value();
  simdjson::dom::array cases = golden["cases"].get_array().value();
  simdjson::dom::element c = cases.at(0).value();  // system + user, default effort
  test::TempDir d;
  std::string body = "{\"messages\":" + simdjson::minify(c["messages"]) + "}";
  test::write_file(d / "req.json", body);
  std::string out;
  ASSERT_EQ(test::run_command(waste_cmd("render" + tok + " < " + (d / "req.json").string()), &out),
            0)
      << out;
  simdjson::dom::parser p;
  simdjson::dom::element r = p.parse(out).value();
  EXPECT_EQ(simdjson::minify(r["segments"]), simdjson::minify(c["segments"]));
  EXPECT_EQ(simdjson::minify(r["token_ids"]), simdjson::minify(c["token_ids"]));
  // Without --specials, the tokenizer_config.json beside the tokenizer gives the same prompt.
  ASSERT_EQ(test::run_command(waste_cmd("render --tokenizer " + k3 + "/tiktoken.model < " +
                                        (d / "req.json").string()),
                              &out),
            0)
      << out;
  simdjson::dom::parser bp;
  EXPECT_EQ(simdjson::minify(bp.parse(out).value()["token_ids"]), simdjson::minify(c["token_ids"]));

  ASSERT_EQ(test::run_command(waste_cmd("tokenize" + tok + " 'Hello <|open|>' --json"), &out), 0)
      << out;
  simdjson::dom::parser tp;
  simdjson::dom::array ids = tp.parse(out).value()["token_ids"].get_array().value();
  EXPECT_GT(ids.size(), 2u);  // text mode: the special-token string is spelled out, not one id
  for (int64_t id : ids) EXPECT_LT(id, 163584);
}

// `waste render` with a Kimi K2 vocabulary (K2's specials at K2's ids over the same ranks)
// reproduces every case the release's K2 template rendered, segment for segment.
TEST(Cli, RenderMatchesTheK2TemplateGolden) {
  const std::string fixtures = test::fixtures_dir().string();
  test::TempDir d;
  test::write_file(
      d / "specials.json",
      R"([{"id":163584,"text":"[BOS]"},{"id":163585,"text":"[EOS]"},)"
      R"({"id":163586,"text":"<|im_end|>"},{"id":163587,"text":"<|im_user|>"},)"
      R"({"id":163588,"text":"<|im_assistant|>"},{"id":163594,"text":"<|im_system|>"},)"
      R"({"id":163595,"text":"<|tool_calls_section_begin|>"},)"
      R"({"id":163596,"text":"<|tool_calls_section_end|>"},)"
      R"({"id":163597,"text":"<|tool_call_begin|>"},)"
      R"({"id":163598,"text":"<|tool_call_argument_begin|>"},)"
      R"({"id":163599,"text":"<|tool_call_end|>"},{"id":163601,"text":"<|im_middle|>"}])");
  const std::string tok = " --tokenizer " + fixtures + "/k3/tiktoken.model --specials " +
                          (d / "specials.json").string();
  simdjson::dom::parser gp;
  simdjson::dom::element golden = gp.load(fixtures + "/k2/render_golden.json").value();
  size_t n = 0;
  for (simdjson::dom::element c : golden["cases"].get_array()) {
    test::write_file(d / "req.json", std::string(c["request"].get_string().value()));
    std::string out;
    ASSERT_EQ(
        test::run_command(waste_cmd("render" + tok + " < " + (d / "req.json").string()), &out), 0)
        << out;
    simdjson::dom::parser p;
    EXPECT_EQ(simdjson::minify(p.parse(out).value()["segments"]), simdjson::minify(c["segments"]))
        << c["name"];
    n++;
  }
  EXPECT_EQ(n, 7u);
}

// The Docker build's first step runs scripts/bootstrap in a folder that holds nothing else; its
// second configures without the test suites.
TEST(Packaging, BootstrapRunsAloneAndTheImageBuildConfiguresWithoutTests) {
  test::TempDir d;
  fs::create_directories(d / "scripts");
  fs::copy_file(test::source_dir() / "scripts/bootstrap", d / "scripts/bootstrap");
  fs::permissions(d / "scripts/bootstrap", fs::perms::owner_all, fs::perm_options::add);
  std::string out;
  EXPECT_EQ(test::run_command((d / "scripts/bootstrap").string() + " --build", &out), 0) << out;
  EXPECT_EQ(test::run_command((d / "scripts/bootstrap").string(), &out), 0) << out;
  EXPECT_NE(out.find("no tests/e2e here"), std::string::npos) << out;
  EXPECT_EQ(test::run_command((d / "scripts/bootstrap").string() + " --bogus", &out), 2) << out;
  // Where this build was told to find packages, it is told too (scripts/build gives macOS
  // Homebrew's prefixes; Debian needs none).
  std::string prefixes;
  std::ifstream cache(test::waste_binary().parent_path() / "CMakeCache.txt");
  for (std::string line; std::getline(cache, line);)
    if (line.rfind("CMAKE_PREFIX_PATH:", 0) == 0) prefixes = line.substr(line.find('=') + 1);
  ASSERT_EQ(test::run_command(
                "cmake -S " + test::source_dir().string() + " -B " + (d / "build").string() +
                    " -G Ninja -DCMAKE_BUILD_TYPE=Release -DWASTE_TESTS=OFF" +
                    (prefixes.empty() ? "" : " '-DCMAKE_PREFIX_PATH=" + prefixes + "'"),
                &out),
            0)
      << out;
  EXPECT_FALSE(fs::exists(d / "build/tests")) << "the test suites were configured";
}

// `waste health`, the image's HEALTHCHECK: 0 for a 200, 1 for anything else or nothing there.
TEST(Cli, HealthProbeExitCodes) {
  std::string out;
  EXPECT_EQ(test::run_command(waste_cmd("health http://127.0.0.1:1/health --timeout 1"), &out), 1)
      << out;
  EXPECT_EQ(test::run_command(waste_cmd("health not-a-url"), &out), 2) << out;
}

}  // namespace
}  // namespace waste
