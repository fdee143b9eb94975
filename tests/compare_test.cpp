// ejk compare's decision: a planted 20% slowdown is flagged; an A/A run is not.
#include <cmath>
#include <functional>
#include <random>

#include "compare.hpp"
#include "ejk/error.hpp"
#include "support.hpp"

namespace ejk {
namespace {

nlohmann::json run_of(const std::string& name, double median_ns, double noise, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, noise * median_ns);
  nlohmann::json samples = nlohmann::json::array();
  for (int i = 0; i < n; ++i) samples.push_back(median_ns + std::abs(dist(rng)));
  return {{"context", nlohmann::json::object()},
          {"benchmarks", {{{"name", name}, {"run_type", "iteration"}, {"real_time", median_ns / 1e3},
                           {"time_unit", "us"}, {"samples_ns", samples}}}}};
}

TEST(Compare, FlagsAPlantedSlowdown) {
  auto base = run_of("matmul/1024", 1e6, 0.03, 20, 1);
  auto slow = run_of("matmul/1024", 1.2e6, 0.03, 20, 2);
  auto r = app::compare(base, slow, {});
  ASSERT_EQ(r.rows.size(), 1u);
  EXPECT_EQ(r.regressions, 1);
  EXPECT_NEAR(r.geomean_change, 0.2, 0.05);
  EXPECT_LT(r.rows[0].p_value, 1e-4);
}

TEST(Compare, QuietOnAnARun) {
  int false_alarms = 0;
  for (std::uint64_t s = 0; s < 50; ++s) {
    auto a = run_of("x", 1e6, 0.05, 15, 100 + s);
    auto b = run_of("x", 1e6, 0.05, 15, 200 + s);
    false_alarms += app::compare(a, b, {}).regressions;
  }
  EXPECT_EQ(false_alarms, 0);
}

TEST(Compare, SmallSignificantChangesBelowTheEffectSizeAreNotRegressions) {
  auto base = run_of("x", 1e6, 0.001, 30, 3);
  auto next = run_of("x", 1.02e6, 0.001, 30, 4);
  auto r = app::compare(base, next, {});
  EXPECT_LT(r.rows[0].p_value, 0.01);
  EXPECT_EQ(r.regressions, 0);
}

TEST(Compare, ReadsPlainGoogleBenchmarkRepetitions) {
  nlohmann::json doc = {{"benchmarks",
                         {{{"name", "BM_a/repeats:3"}, {"run_name", "BM_a"}, {"run_type", "iteration"}, {"real_time", 2.0}, {"time_unit", "ms"}},
                          {{"name", "BM_a/repeats:3"}, {"run_name", "BM_a"}, {"run_type", "iteration"}, {"real_time", 3.0}, {"time_unit", "ms"}},
                          {{"name", "BM_a_mean"}, {"run_name", "BM_a"}, {"run_type", "aggregate"}, {"real_time", 2.5}, {"time_unit", "ms"}}}}};
  auto rows = app::samples_by_name(doc);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].ns, (std::vector<double>{2e6, 3e6}));
  EXPECT_THROW(app::samples_by_name(nlohmann::json::array()), InvalidArgument);
}

std::string refusal(const nlohmann::json& base, const nlohmann::json& next, app::CompareOptions o = {}) {
  try {
    app::compare(base, next, o, "base.json", "new.json");
    return "";
  } catch (const InvalidArgument& e) {
    return e.what();
  }
}

TEST(Compare, AlphaAndMinEffectAreValidated) {
  auto base = run_of("x", 1e6, 0.01, 20, 1);
  auto twice = run_of("x", 2e6, 0.01, 20, 2);
  EXPECT_EQ(app::compare(base, twice, {}).regressions, 1);
  // Each of these used to hide the 2x regression.
  const std::pair<app::CompareOptions, std::string> bad[] = {
      {{.alpha = 0.01, .min_effect = 5}, "--min-effect 5: the minimum effect is a fraction"},
      {{.alpha = 0.01, .min_effect = 1}, "--min-effect 1:"},
      {{.alpha = 0.01, .min_effect = -0.1}, "--min-effect -0.1:"},
      {{.alpha = 0.01, .min_effect = NAN}, "--min-effect nan:"},
      {{.alpha = NAN, .min_effect = 0.05}, "--alpha nan:"},
      {{.alpha = 0, .min_effect = 0.05}, "--alpha 0:"},
      {{.alpha = 1, .min_effect = 0.05}, "--alpha 1:"},
      {{.alpha = INFINITY, .min_effect = 0.05}, "--alpha inf:"},
  };
  for (const auto& [options, expected] : bad) {
    SCOPED_TRACE(expected);
    EXPECT_NE(refusal(base, twice, options).find(expected), std::string::npos) << refusal(base, twice, options);
  }
  EXPECT_EQ(refusal(base, twice, {.alpha = 0.5, .min_effect = 0}), "");
}

TEST(Compare, WrongTypesNameTheFileAndTheBenchmark) {
  auto good = run_of("matmul/64", 1e6, 0.01, 5, 1);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = good;
    edit(j);
    return j;
  };
  const std::pair<nlohmann::json, std::string> cases[] = {
      {with([](auto& j) { j["benchmarks"][0]["samples_ns"] = "fast"; }),
       "new.json: benchmarks[0] (matmul/64): 'samples_ns' must be an array of times, got a string"},
      {with([](auto& j) { j["benchmarks"][0]["samples_ns"][2] = "x"; }), "benchmarks[0] (matmul/64): samples_ns[2] must be a number"},
      {with([](auto& j) { j["benchmarks"][0]["samples_ns"][1] = -5; }), "samples_ns[1] must be a positive time, got -5"},
      {with([](auto& j) { j["benchmarks"][0]["samples_ns"][1] = 0; }), "samples_ns[1] must be a positive time, got 0"},
      {with([](auto& j) { j["benchmarks"][0].erase("samples_ns"); j["benchmarks"][0]["real_time"] = "1"; }), "'real_time' must be a number"},
      {with([](auto& j) { j["benchmarks"][0].erase("samples_ns"); j["benchmarks"][0]["time_unit"] = "hours"; }), "unknown time_unit 'hours'"},
      {with([](auto& j) { j["benchmarks"] = {{"a", 1}}; }), "new.json: \"benchmarks\" must be an array, got an object"},
      {with([](auto& j) { j["benchmarks"][0] = 3; }), "new.json: benchmarks[0]: a benchmark row is an object, got 3"},
      {with([](auto& j) { j["benchmarks"][0]["name"] = 3; }), "benchmarks[0]: 'name' must be a string, got 3"},
      {with([](auto& j) { j["benchmarks"][0]["run_type"] = nlohmann::json::array(); }), "(matmul/64): 'run_type' must be a string"},
      {with([](auto& j) { j["benchmarks"][0]["error_occurred"] = "yes"; }), "'error_occurred' must be true or false"},
      {nlohmann::json::array(), "new.json: not a benchmark result"},
      {nlohmann::json::object(), "new.json: not a benchmark result: no \"benchmarks\" list"},
  };
  for (const auto& [next, expected] : cases) {
    SCOPED_TRACE(expected);
    std::string why = refusal(good, next);
    EXPECT_NE(why.find(expected), std::string::npos) << why;
  }
  EXPECT_NE(refusal(nlohmann::json{{"benchmarks", nlohmann::json::array()}}, good).find("base.json: no benchmark"),
            std::string::npos);
}

TEST(Compare, BenchmarksMissingOrFailedInNewAreCounted) {
  auto base = run_of("a", 1e6, 0.01, 10, 1);
  base["benchmarks"].push_back(run_of("b", 1e6, 0.01, 10, 2)["benchmarks"][0]);
  base["benchmarks"].push_back(run_of("c", 1e6, 0.01, 10, 3)["benchmarks"][0]);
  auto next = run_of("a", 1e6, 0.01, 10, 4);
  next["benchmarks"].push_back({{"name", "b"}, {"error_occurred", true}, {"error_message", "compile failed"}, {"real_time", 0}});
  auto r = app::compare(base, next, {});
  EXPECT_EQ(r.missing, 2);
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(r.rows[1].note, "failed in new: compile failed");
  EXPECT_EQ(r.rows[2].note, "missing in new");
  EXPECT_EQ(app::compare(base, {{"benchmarks", nlohmann::json::array()}}, {}).missing, 3);
}

}  // namespace
}  // namespace ejk
