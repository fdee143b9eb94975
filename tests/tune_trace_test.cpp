// Record -> batch tune -> replay: executor calls recorded with EJK_RECORD are tuned in batch
// into a persistent cache, from which a fresh executor then selects them; and the tuner as
// the executor's autotune tier.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "ejk/cache.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;

using test::matmul_f32;
using test::TempDir;

TuneOptions quick() {
  TuneOptions o = test::quick_tune();
  o.seed = 3;
  o.strategy = Strategy::random;
  o.budget.evaluations = 4;
  return o;
}

ExecutorOptions with_cache(const fs::path& path) {
  ExecutorOptions o;
  o.cache_path = path;
  return o;
}

void run_on(Executor& ex, const Invocation& inv) {
  std::vector<Tensor> args;
  for (const auto& s : inv.args) args.emplace_back(ex.device_ptr(), s.shape, s.dtype);
  for (auto& t : args) t.write(std::vector<double>(static_cast<std::size_t>(t.numel()), 0.5));
  ex.run(inv, args);
}

TEST(TuneTrace, RecordTuneReplayRoundTrip) {
  TempDir dir;
  const fs::path trace = dir.path / "trace.jsonl", cache = dir.path / "ejk.sqlite";
  auto dev = open_device("cpu");
  Invocation a = matmul_f32(24, 40, 16, 0.0), b = matmul_f32(33, 17, 9, 1.0);
  {
    ::setenv("EJK_RECORD", trace.c_str(), 1);
    Executor ex(dev, with_cache(fs::path()));
    ::unsetenv("EJK_RECORD");
    run_on(ex, a);
    run_on(ex, b);
    run_on(ex, a);
  }
  auto records = read_trace(trace.string());
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].invocation.signature(), a.signature());
  EXPECT_EQ(records[1].invocation.scalars.at("beta"), 1.0);
  EXPECT_EQ(records[0].device, "cpu");
  EXPECT_EQ(records[0].tier, "heuristic");
  EXPECT_FALSE(records[0].version.empty());

  // A line this build cannot tune does not stop the batch.
  std::ofstream(trace, std::ios::app) << R"({"kernel":"no_such_kernel","args":[{"shape":[2],"dtype":"f32"}]})" << "\n";

  BatchOptions opts;
  opts.tune = quick();
  opts.cache_path = cache;
  int seen = 0;
  opts.on_result = [&](const TuneResult&) { ++seen; };
  auto results = tune_trace(trace.string(), opts);
  ASSERT_EQ(results.size(), 3u);  // the repeated call is tuned once
  EXPECT_EQ(seen, 3);
  EXPECT_TRUE(results[0].tuned) << results[0].report;
  EXPECT_TRUE(results[1].tuned) << results[1].report;
  EXPECT_EQ(results[1].invocation.scalars.at("beta"), 1.0);
  EXPECT_FALSE(results[2].tuned);
  EXPECT_NE(results[2].report.find("not tuned"), std::string::npos) << results[2].report;

  {
    PersistentCache pc(cache);
    EXPECT_EQ(pc.size(), 2u);
    auto stored = pc.get(results[0].entry.key());
    ASSERT_TRUE(stored);
    EXPECT_EQ(stored->config, results[0].entry.config);
    EXPECT_EQ(pc.measurements(results[0].entry.key()).size(), results[0].measurements.size());
  }
  // Replay: a fresh executor over that cache selects the tuned configs.
  Executor ex(dev, with_cache(cache));
  for (std::size_t i = 0; i < 2; ++i) {
    Selection s = ex.select(records[i].invocation);
    EXPECT_EQ(s.tier, Tier::persistent) << s.reason;
    EXPECT_EQ(s.config, results[i].entry.config);
    EXPECT_EQ(ex.key(records[i].invocation), results[i].entry.key());
  }
}

TEST(TuneTrace, MalformedLinesAreNamed) {
  TempDir dir;
  const fs::path trace = dir.path / "bad.jsonl";
  std::ofstream(trace) << R"({"kernel":"matmul","args":[]})" << "\n\n{not json\n";
  try {
    read_trace(trace.string());
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:3"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_trace((dir.path / "missing.jsonl").string()), IoError);
}

// Every field of a trace line is checked, and every refusal names path:line.
TEST(TuneTrace, EveryFieldIsCheckedWithItsLine) {
  TempDir dir;
  const fs::path trace = dir.path / "t.jsonl";
  const std::string good = R"({"kernel":"matmul","args":[{"shape":[2,3],"dtype":"f32"},{"shape":[3,4],"dtype":"f32"},{"shape":[2,4],"dtype":"f32"}],"device":"cpu"})";
  auto error_on_line_2 = [&](const std::string& line) {
    std::ofstream(trace) << good << "\n" << line << "\n";
    try {
      read_trace(trace.string());
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string at = trace.string() + ":2: ";
  auto at_col = [&](std::size_t col) { return trace.string() + ":2:" + std::to_string(col) + ": "; };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string line = good;
    line.replace(line.find(from), from.size(), to);
    return line;
  };
  EXPECT_EQ(error_on_line_2(with("[2,3]", "[-2,3]")),
            at + "args[0] (matmul) [-2, 3]: dimension 0 is negative (-2)");
  EXPECT_EQ(error_on_line_2(with("[2,3]", "[4294967296,4294967296]")),
            at + "args[0] (matmul) [4294967296, 4294967296]: dimension 0 is 4294967296, above the limit of 2^31-1");
  EXPECT_EQ(error_on_line_2(with("[2,3]", "[2.5,3]")),
            at + "malformed invocation: args[0].shape must be a list of integers from 0 to 2^31-1, got [2.5,3]");
  EXPECT_EQ(error_on_line_2(with("\"cpu\"", "7")), at + "'device' must be text, got 7");
  EXPECT_EQ(error_on_line_2(with("\"device\"", "\"devise\"")).rfind(at + "unknown key 'devise' (allowed: ", 0), 0u);
  // What the JSON reader refuses also names the column.
  const std::string dup = with("\"device\":\"cpu\"", "\"device\":\"cpu\",\"device\":\"cpu\"");
  EXPECT_EQ(error_on_line_2(dup), at_col(dup.rfind("\"device\"") + 8) + "duplicate key 'device' at /device");
  EXPECT_EQ(error_on_line_2(with("\"cpu\"", "\"c\\u001bpu\"")), at + "'device' holds a control character");
  const std::string deep = with("\"cpu\"", "\"cpu\",\"options\":" + std::string(100, '[') + std::string(100, ']'));
  // The line's object is level 1 and the first '[' (column index + 1) level 2: the bracket that
  // opens level 33 is 31 further on.
  EXPECT_EQ(error_on_line_2(deep), at_col(deep.find('[', deep.find("options")) + 1 + 31) +
                                       "arrays and objects nested deeper than 32 levels (at /options/0/0/0/0/0/.../0/0/0/0)");
  // 100,000 levels in one line: refused where the limit is passed, never recursed into.
  std::string abyss = good.substr(0, good.size() - 1) + ",\"options\":";
  for (int i = 0; i < 100000; ++i) abyss += "{\"a\":";
  EXPECT_EQ(error_on_line_2(abyss).rfind(trace.string() + ":2:", 0), 0u);
  EXPECT_NE(error_on_line_2(abyss).find("nested deeper than 32 levels"), std::string::npos);
  EXPECT_EQ(error_on_line_2(std::string(TraceLimits::max_line_bytes + 10, ' ') + "{}"),
            at + "the line is longer than the limit of 1048576 bytes");
  EXPECT_EQ(error_on_line_2("[1, 2]"), at + "not a JSON object");
  EXPECT_EQ(error_on_line_2(with("[2,3]", "[1e400]")).rfind(trace.string() + ":2:", 0), 0u);
  EXPECT_NE(error_on_line_2(with("[2,3]", "[1e400]")).find("number overflow"), std::string::npos);
  EXPECT_EQ(error_on_line_2("{\"kernel\": matmul}").rfind(trace.string() + ":2:", 0), 0u);
  EXPECT_NE(error_on_line_2("{\"kernel\": matmul}").find(": not valid JSON: "), std::string::npos);
  // The good line alone reads, with its line number.
  std::ofstream(trace) << "\n" << good << "\n";
  auto records = read_trace(trace.string());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].line, 2);
  EXPECT_EQ(records[0].device, "cpu");
}

TEST(TuneTrace, TheTunerAnswersTheAutotuneTier) {
  TempDir dir;
  auto dev = open_device("cpu");
  Autotuner before = current_autotuner();
  install_autotuner(quick());
  PolicyOverride autotune;
  autotune.autotune = AutotunePolicy::autotune;
  ScopedPolicy policy(autotune);
  Executor ex(dev, with_cache(dir.path / "ejk.sqlite"));
  Invocation inv = matmul_f32(20, 12, 28, 0.0);
  Selection s = ex.select(inv);
  EXPECT_EQ(s.tier, Tier::autotune) << s.reason;
  auto stored = ex.persistent_cache()->get(ex.key(inv));
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->config, s.config);
  EXPECT_EQ(stored->provenance.strategy, "random");
  EXPECT_EQ(ex.persistent_cache()->measurements(ex.key(inv)).size(), 4u);
  set_autotuner(before);
}

TEST(TuneTrace, AutotuneOptionsComeFromTheEnvironment) {
  ::setenv("EJK_TUNE_STRATEGY", "anneal", 1);
  ::setenv("EJK_TUNE_EVALS", "12", 1);
  ::setenv("EJK_TUNE_SEED", "9", 1);
  ::setenv("EJK_TUNE_ISOLATE", "1", 1);
  TuneOptions o = tune_options_from_env();
  EXPECT_EQ(o.strategy, Strategy::anneal);
  EXPECT_EQ(o.budget.evaluations, 12);
  EXPECT_EQ(o.seed, 9u);
  EXPECT_TRUE(o.isolate);
  ::setenv("EJK_TUNE_EVALS", "many", 1);
  EXPECT_THROW(tune_options_from_env(), InvalidArgument);
  ::setenv("EJK_TUNE_EVALS", "12", 1);
  // stod reads nan and inf, stoull reads -5 as 2^64-5: none is taken.
  for (const char* bad : {"nan", "inf", "-1"}) {
    ::setenv("EJK_TUNE_SECONDS", bad, 1);
    EXPECT_THROW(tune_options_from_env(), InvalidArgument) << bad;
  }
  ::unsetenv("EJK_TUNE_SECONDS");
  ::setenv("EJK_TUNE_SEED", "-5", 1);
  EXPECT_THROW(tune_options_from_env(), InvalidArgument);
  ::setenv("EJK_TUNE_SEED", "9", 1);
  ::setenv("EJK_TUNE_STRATEGY", "greedy", 1);
  EXPECT_THROW(tune_options_from_env(), InvalidArgument);
  for (const char* v : {"EJK_TUNE_STRATEGY", "EJK_TUNE_EVALS", "EJK_TUNE_SEED", "EJK_TUNE_ISOLATE"}) ::unsetenv(v);
  EXPECT_EQ(tune_options_from_env().strategy, Strategy::model);
}

}  // namespace
}  // namespace ejk
