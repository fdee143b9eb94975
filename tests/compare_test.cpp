// ejk compare's decision: a planted 20% slowdown is flagged; an A/A run is not.
#include <random>

#include "compare.hpp"
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
  EXPECT_EQ(rows[0].second, (std::vector<double>{2e6, 3e6}));
  EXPECT_THROW(app::samples_by_name(nlohmann::json::array()), InvalidArgument);
}

}  // namespace
}  // namespace ejk
