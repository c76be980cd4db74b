// The options of `waste serve` (config/serve_options.h) and of an open model
// (config/engine_options.h): defaults, the precedence of file < environment < command line,
// boolean flags, and refusals that name the option and where it came from.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "config/serve_options.h"
#include "engine/base/error.h"
#include "tests/test_util.h"

namespace waste {
namespace {

ServeOptions load(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return load_serve_options(args, env);
}

std::string refusal(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  try {
    load(std::move(args), std::move(env));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(ServeOptions, Defaults) {
  ServeOptions o = load({});
  EXPECT_EQ(o.model, "");
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 8000);
  EXPECT_EQ(o.engine.ctx, 0);  // the RAM plan chooses (ram_budget_test)
  EXPECT_EQ(o.engine.threads, 0);
  EXPECT_EQ(o.engine.chunk, 0);  // the RAM plan's window
  EXPECT_EQ(o.engine.lookahead, 6);
  EXPECT_EQ(o.engine.io_threads, 4);
  EXPECT_EQ(o.engine.io_backend, IoBackend::kUring);
  EXPECT_EQ(o.engine.policy, CachePolicy::kLrfu);
  EXPECT_FALSE(o.engine.verify);
  EXPECT_FALSE(o.engine.budget);
  EXPECT_EQ(o.queue, 16u);
  EXPECT_TRUE(o.thinking);
  EXPECT_TRUE(o.thinking_allowed);
  EXPECT_EQ(o.effort, "max");
  EXPECT_FALSE(o.seed);  // a random seed per request
}

TEST(ServeOptions, EngineOptionsFromTheCommandLine) {
  ServeOptions o = load({"m.waste", "--ctx", "512", "--threads=3", "--policy", "lru",
                         "--io-backend", "threads", "--budget", "2G", "--lookahead", "0"});
  EXPECT_EQ(o.model, "m.waste");
  EXPECT_EQ(o.engine.ctx, 512);
  EXPECT_EQ(o.engine.threads, 3);
  EXPECT_EQ(o.engine.policy, CachePolicy::kLru);
  EXPECT_EQ(o.engine.io_backend, IoBackend::kThreads);
  EXPECT_EQ(o.engine.budget, 2ull << 30);
  EXPECT_EQ(o.engine.lookahead, 0);
}

TEST(ServeOptions, BooleanFlagsStandAloneOrTakeAValue) {
  EXPECT_TRUE(load({"--verify"}).engine.verify);
  EXPECT_TRUE(load({"--verify", "m.waste"}).engine.verify);
  EXPECT_EQ(load({"--verify", "m.waste"}).model, "m.waste");
  EXPECT_TRUE(load({"m.waste", "--verify"}).engine.verify);
  EXPECT_TRUE(load({"--verify", "true"}).engine.verify);
  EXPECT_FALSE(load({"--verify", "off"}).engine.verify);
  EXPECT_FALSE(load({"--verify=false"}).engine.verify);
  EXPECT_TRUE(load({}, {{"WASTE_VERIFY", "1"}}).engine.verify);
  EXPECT_NE(refusal({"--verify=maybe"}).find("--verify"), std::string::npos);
  // A valued option still needs its value.
  EXPECT_NE(refusal({"--ctx"}).find("--ctx needs a value"), std::string::npos);
}

TEST(ServeOptions, FileThenEnvironmentThenCommandLine) {
  test::TempDir d;
  test::write_file(d / "c.json",
                   R"({"model":"f.waste","ctx":100,"port":1,"verify":true,"cors":["a","b"]})");
  std::map<std::string, std::string> env{{"WASTE_CONFIG", (d / "c.json").string()},
                                         {"WASTE_CTX", "200"}};
  ServeOptions o = load({}, env);
  EXPECT_EQ(o.model, "f.waste");
  EXPECT_EQ(o.engine.ctx, 200);  // the environment over the file
  EXPECT_EQ(o.port, 1);
  EXPECT_TRUE(o.engine.verify);
  EXPECT_EQ(o.cors, (std::vector<std::string>{"a", "b"}));
  o = load({"--ctx", "300", "--config", (d / "c.json").string()}, {{"WASTE_CTX", "200"}});
  EXPECT_EQ(o.engine.ctx, 300);  // the command line over both, wherever --config stands
}

TEST(ServeOptions, RefusalsNameTheOptionAndTheSource) {
  EXPECT_NE(refusal({"--ctx", "abc"}).find("command line (--ctx)"), std::string::npos);
  EXPECT_NE(refusal({}, {{"WASTE_PORT", "99999"}}).find("WASTE_PORT (--port)"), std::string::npos);
  EXPECT_NE(refusal({"--policy", "fifo"}).find("--policy"), std::string::npos);
  EXPECT_NE(refusal({"--io-backend", "aio"}).find("'aio' is not uring or threads"),
            std::string::npos);
  EXPECT_EQ(*load({"--seed", "7"}).seed, 7u);
  EXPECT_NE(refusal({"--seed", "-1"}).find("command line (--seed)"), std::string::npos);
  EXPECT_NE(refusal({"--bogus", "1"}).find("unknown option --bogus"), std::string::npos);
  EXPECT_NE(refusal({"a.waste", "b.waste"}).find("more than one MODEL"), std::string::npos);
  test::TempDir d;
  test::write_file(d / "c.json", R"({"nope":1})");
  EXPECT_NE(refusal({"--config", (d / "c.json").string()}).find("unknown option 'nope'"),
            std::string::npos);
  test::write_file(d / "bad.json", R"([1])");
  EXPECT_NE(refusal({"--config", (d / "bad.json").string()}).find("must be a JSON object"),
            std::string::npos);
}

// --thinking: the default for requests that do not say (true, false), or never, which keeps
// thinking off whatever a request says.
TEST(ServeOptions, ThinkingIsADefaultOrForbidden) {
  ServeOptions off = load({"--thinking", "false"});
  EXPECT_FALSE(off.thinking);
  EXPECT_TRUE(off.thinking_allowed);
  ServeOptions never = load({}, {{"WASTE_THINKING", "never"}});
  EXPECT_FALSE(never.thinking);
  EXPECT_FALSE(never.thinking_allowed);
  EXPECT_TRUE(load({"--thinking", "on"}).thinking);
  EXPECT_NE(refusal({"--thinking", "maybe"}).find("'maybe' is not true, false or never"),
            std::string::npos);
}

TEST(ServeOptions, HelpListsEveryEngineOptionWithItsVariable) {
  std::vector<std::string> flags;
  for (const OptionDoc& d : serve_option_docs()) flags.push_back(d.flag + " " + d.env);
  for (const Option<EngineOptions>& e : engine_option_table())
    EXPECT_NE(std::find(flags.begin(), flags.end(), e.doc.flag + " " + e.doc.env), flags.end())
        << e.doc.flag;
  for (const char* f : {"--policy WASTE_POLICY", "--io-backend WASTE_IO_BACKEND",
                        "--verify WASTE_VERIFY", "--config WASTE_CONFIG"})
    EXPECT_NE(std::find(flags.begin(), flags.end(), f), flags.end()) << f;
}

// The service files in config/ start the daemon with options it has: every flag on systemd's
// ExecStart line and in launchd's ProgramArguments is one `waste serve` takes. And the launchd
// file's comments hold no "--", which XML forbids there and which makes launchctl refuse it.
TEST(ServiceFiles, StartTheDaemonWithOptionsItHas) {
  std::set<std::string> flags;
  for (const OptionDoc& d : serve_option_docs()) flags.insert(d.flag);
  auto check = [&](const std::vector<std::string>& args, const std::string& file) {
    ASSERT_GE(args.size(), 2u) << file;
    EXPECT_EQ(args[1], "serve") << file;
    for (const std::string& a : args) {
      if (a.rfind("--", 0) == 0) {
        EXPECT_TRUE(flags.count(a.substr(0, a.find('=')))) << file << ": " << a;
      }
    }
  };

  std::istringstream unit(test::read_file(test::source_dir() / "config/waste.service"));
  std::vector<std::string> exec;
  for (std::string line; std::getline(unit, line);)
    if (line.rfind("ExecStart=", 0) == 0) {
      std::istringstream words(line.substr(10));
      for (std::string w; words >> w;) exec.push_back(w);
    }
  check(exec, "waste.service");

  const std::string plist = test::read_file(test::source_dir() / "config/com.waste.server.plist");
  const size_t from = plist.find("<key>ProgramArguments</key>");
  ASSERT_NE(from, std::string::npos);
  const size_t to = plist.find("</array>", from);
  std::vector<std::string> program;
  for (size_t at = plist.find("<string>", from); at < to; at = plist.find("<string>", at)) {
    at += 8;
    program.push_back(plist.substr(at, plist.find("</string>", at) - at));
  }
  check(program, "com.waste.server.plist");
  for (size_t at = plist.find("<!--"); at != std::string::npos; at = plist.find("<!--", at)) {
    const size_t end = plist.find("-->", at + 4);
    ASSERT_NE(end, std::string::npos);
    EXPECT_EQ(plist.substr(at + 4, end - at - 4).find("--"), std::string::npos)
        << "a comment in com.waste.server.plist holds \"--\"";
    at = end + 3;
  }
}

}  // namespace
}  // namespace waste
