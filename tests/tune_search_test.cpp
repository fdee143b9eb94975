// Search strategies in simulation (over stored measurements), their budgets and seeds, and
// the statistics the tuner records.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

#include "select_support.hpp"
#include "tune_support.hpp"
#include "tune/search.hpp"
#include "tune/stats.hpp"
#include "tune/verdict.hpp"

namespace ejk {
namespace {

// A 576-config landscape: a smooth bowl in log-time over four parameters (one textual) with
// a little deterministic roughness, a few failures, and a single config within 5% of the best.
MeasurementTable synthetic_table() {
  std::vector<Measurement> rows;
  const char* kinds[] = {"x", "y", "z"};
  const double kind_cost[] = {0.0, 0.15, 0.4};
  for (std::int64_t a = 1; a <= 8; ++a)
    for (std::int64_t b = 1; b <= 6; ++b)
      for (int k = 0; k < 3; ++k)
        for (std::int64_t d : {16, 32, 64, 128}) {
          Measurement m;
          m.config = {{"a", a}, {"b", b}, {"kind", std::string(kinds[k])}, {"d", d}};
          if (a == 8 && d == 128) {
            m.status = Status::device_limits;
            m.message = "too much local memory";
          } else {
            double rough = static_cast<double>((a * 7919 + b * 104729 + k * 1299709 + d * 15485863) % 97) / 97.0;
            double l2d = std::log2(static_cast<double>(d));
            double y = 0.06 * (a - 5) * (a - 5) + 0.08 * (b - 2) * (b - 2) + kind_cost[k] + 0.1 * (l2d - 5) * (l2d - 5) +
                       0.01 * rough;
            m.stats = {1e6 * std::exp(y), 1e4, 0.99e6 * std::exp(y), 10};
          }
          rows.push_back(m);
        }
  return MeasurementTable(rows);
}

std::size_t evaluations_to_target(const SearchResult& r, double target) {
  for (std::size_t i = 0; i < r.evaluated.size(); ++i)
    if (r.evaluated[i].status == Status::ok && r.evaluated[i].stats.median_ns <= target) return i + 1;
  return static_cast<std::size_t>(-1);
}

std::vector<std::string> sequence(const SearchResult& r) {
  std::vector<std::string> out;
  for (const auto& m : r.evaluated) out.push_back(m.config.canonical());
  return out;
}

TEST(TuneSearch, StatsAreMedianIqrMinAndCount) {
  std::vector<double> s{4, 1, 100, 3, 2};
  Stats st = tuning::summarize(s);
  EXPECT_DOUBLE_EQ(st.median_ns, 3);
  EXPECT_DOUBLE_EQ(st.iqr_ns, 2);  // quartiles 2 and 4
  EXPECT_DOUBLE_EQ(st.min_ns, 1);
  EXPECT_EQ(st.n, 5);
  std::vector<double> even{1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(tuning::summarize(even).median_ns, 2.5);
}

TEST(TuneSearch, ExhaustiveFindsTheBestOfTheTable) {
  auto table = synthetic_table();
  ASSERT_EQ(table.size(), 576u);
  SearchResult r = simulate(table, Strategy::exhaustive, {}, 1);
  EXPECT_EQ(r.evaluated.size(), 576u);
  EXPECT_EQ(r.stopped, "space exhausted");
  ASSERT_LT(r.best, r.evaluated.size());
  EXPECT_DOUBLE_EQ(r.evaluated[r.best].stats.median_ns, table.best_ns());
  EXPECT_EQ(r.evaluated[r.best].config,
            (Config{{"a", 5}, {"b", 2}, {"kind", std::string("x")}, {"d", 32}}));
}

TEST(TuneSearch, GuidedStrategiesReachTheTargetWithinThirtyPercent) {
  auto table = synthetic_table();
  const double target = table.best_ns() * 1.05;
  Budget budget;
  budget.target_ns = table.best_ns();
  budget.target_within = 0.05;
  for (Strategy s : {Strategy::random, Strategy::anneal, Strategy::model}) {
    std::vector<double> fractions;
    for (std::uint64_t seed = 1; seed <= 5; ++seed) {
      SearchResult r = simulate(table, s, budget, seed);
      EXPECT_EQ(r.stopped, "target") << to_string(s) << " seed " << seed;
      std::size_t n = evaluations_to_target(r, target);
      ASSERT_NE(n, static_cast<std::size_t>(-1)) << to_string(s);
      EXPECT_EQ(n, r.evaluated.size());  // stopped as soon as it got there
      fractions.push_back(static_cast<double>(n) / static_cast<double>(table.size()));
    }
    double med = tuning::median(fractions);
    std::printf("%s: median %.3f of the space\n", std::string(to_string(s)).c_str(), med);
    if (s != Strategy::random) {
      EXPECT_LE(med, 0.30) << to_string(s);
    }
  }
}

// Two variants: "fast" (8 configs, 1-2 ms) and "slow" (16 configs, 10x slower). The race
// measures one guess of the slow variant (the one nearest the start config), then drops it.
TEST(TuneSearch, RacingDropsAVariantFarBehind) {
  std::vector<Measurement> rows;
  for (std::int64_t t = 1; t <= 8; ++t) {
    Measurement m;
    m.config = {{"variant", std::string("fast")}, {"tile", t}};
    m.stats = {1e6 * (1 + 0.1 * static_cast<double>(t)), 1e3, 1e6, 10};
    rows.push_back(m);
  }
  for (std::int64_t t = 1; t <= 16; ++t) {
    Measurement m;
    m.config = {{"variant", std::string("slow")}, {"tile", t}};
    m.stats = {1e7 * (1 + 0.1 * static_cast<double>(t)), 1e4, 1e7, 10};
    rows.push_back(m);
  }
  const MeasurementTable table(rows);
  const Config start{{"variant", std::string("fast")}, {"tile", 3}};
  for (Strategy strategy : {Strategy::exhaustive, Strategy::random, Strategy::anneal, Strategy::model}) {
    Budget budget;
    budget.evaluations = 24;
    SearchResult r = simulate(table, strategy, budget, 5, {start});
    ASSERT_GE(r.evaluated.size(), 2u) << to_string(strategy);
    EXPECT_EQ(r.evaluated[0].config, start);
    EXPECT_EQ(r.evaluated[1].config, (Config{{"variant", std::string("slow")}, {"tile", 3}})) << "the nearest guess";
    std::size_t slow = 0;
    for (const auto& m : r.evaluated) slow += m.config.text("variant") == "slow";
    EXPECT_EQ(slow, 1u) << to_string(strategy);
    EXPECT_NE(r.raced.find("variant slow"), std::string::npos) << r.raced;
    if (strategy == Strategy::exhaustive) {
      EXPECT_EQ(r.evaluated.size(), 9u);
      EXPECT_EQ(r.stopped, "space exhausted");
    }
    // Without the race every candidate the budget allows is measured.
    budget.race_ratio = 0;
    EXPECT_EQ(simulate(table, strategy, budget, 5, {start}).evaluated.size(), 24u) << to_string(strategy);
    EXPECT_TRUE(simulate(table, strategy, budget, 5, {start}).raced.empty());
  }
}

TEST(TuneSearch, SameSeedSameSequenceOtherSeedOtherSequence) {
  auto table = synthetic_table();
  Budget budget;
  budget.evaluations = 40;
  for (Strategy s : {Strategy::random, Strategy::anneal, Strategy::model}) {
    auto a = simulate(table, s, budget, 42), b = simulate(table, s, budget, 42), c = simulate(table, s, budget, 43);
    EXPECT_EQ(a.evaluated.size(), 40u);
    EXPECT_EQ(a.stopped, "budget: evaluations");
    EXPECT_EQ(sequence(a), sequence(b)) << to_string(s);
    EXPECT_NE(sequence(a), sequence(c)) << to_string(s);
  }
}

TEST(TuneSearch, StartConfigsComeFirstAndFailuresAreNeverBest) {
  auto table = synthetic_table();
  Config start{{"a", 8}, {"b", 1}, {"kind", std::string("z")}, {"d", 128}};  // a failure
  Budget budget;
  budget.evaluations = 30;
  for (Strategy s : {Strategy::exhaustive, Strategy::random, Strategy::anneal, Strategy::model}) {
    auto r = simulate(table, s, budget, 3, {start});
    ASSERT_FALSE(r.evaluated.empty());
    EXPECT_EQ(r.evaluated.front().config, start);
    EXPECT_EQ(r.evaluated.front().status, Status::device_limits);
    ASSERT_LT(r.best, r.evaluated.size()) << to_string(s);
    EXPECT_EQ(r.evaluated[r.best].status, Status::ok);
  }
  EXPECT_THROW(simulate(table, Strategy::random, budget, 1, {Config{{"a", 99}}}), InvalidArgument);
}

TEST(TuneSearch, NeighboursMoveOneParameterOneStep) {
  // A space with a parameter that exists only for one value of another, like matmul's algo.
  std::vector<Config> configs{{{"algo", std::string("blas")}}};
  for (std::int64_t t : {8, 16, 32})
    for (std::int64_t w : {1, 2, 4}) configs.push_back({{"algo", std::string("native")}, {"tile", t}, {"wpt", w}});
  tuning::Candidates cands(configs);
  tuning::Rng rng(5);
  std::size_t mid = *cands.find({{"algo", std::string("native")}, {"tile", 16}, {"wpt", 2}});
  int algo_moves = 0;
  for (int i = 0; i < 200; ++i) {
    auto nb = cands.neighbour(mid, rng);
    ASSERT_TRUE(nb);
    const Config& c = cands.at(*nb);
    if (c.text("algo") == "blas") {
      ++algo_moves;
      continue;
    }
    int changed = (c.get("tile") != 16) + (c.get("wpt") != 2);
    EXPECT_EQ(changed, 1) << c.canonical();
    EXPECT_TRUE(c.get("tile") != 32 || c.get("wpt") == 2);
    EXPECT_NE(c.get("tile"), 64);
  }
  EXPECT_GT(algo_moves, 0);
  // From the parameterless config, the only move is to the other algo, nearest first.
  std::size_t blas = *cands.find({{"algo", std::string("blas")}});
  auto nb = cands.neighbour(blas, rng);
  ASSERT_TRUE(nb);
  EXPECT_EQ(cands.at(*nb).text("algo"), "native");
  EXPECT_DOUBLE_EQ(cands.distance(blas, blas), 0);
  EXPECT_GT(cands.distance(blas, mid), cands.distance(mid, *cands.find({{"algo", std::string("native")}, {"tile", 32}, {"wpt", 2}})));
}

// neighbours() is exactly what neighbour() can draw: every draw is among them, every one of them
// is drawn.
TEST(TuneSearch, NeighboursAreWhatANeighbourDrawCanGive) {
  const tuning::Candidates cands(synthetic_table().configs());
  tuning::Rng rng(11);
  for (std::size_t i : {std::size_t{0}, cands.size() / 2, cands.size() - 1}) {
    const std::vector<std::size_t> all = cands.neighbours(i);
    ASSERT_FALSE(all.empty());
    std::set<std::size_t> drawn;
    for (int k = 0; k < 4000; ++k) {
      auto nb = cands.neighbour(i, rng);
      ASSERT_TRUE(nb);
      EXPECT_NE(std::find(all.begin(), all.end(), *nb), all.end()) << cands.at(*nb).canonical();
      drawn.insert(*nb);
    }
    EXPECT_EQ(drawn.size(), all.size()) << cands.at(i).canonical();
  }
}

// Anneal and model announce what they may evaluate next, so programs build ahead: every
// candidate they evaluate after the first few was planned before its turn, and planning
// changes nothing about the sequence.
TEST(TuneSearch, AnnealAndModelPlanWhatTheyEvaluateNext) {
  const auto table = synthetic_table();
  const tuning::Candidates cands(table.configs());
  auto evaluate = [&](const Config& c, double) { return *table.find(c); };
  Budget budget;
  budget.evaluations = 40;
  for (Strategy strategy : {Strategy::anneal, Strategy::model}) {
    std::set<std::string> planned;
    std::size_t plans = 0;
    const tuning::Lookahead lookahead = [&](const std::vector<Config>& next) {
      ++plans;
      for (const Config& c : next) planned.insert(c.canonical());
    };
    const SearchResult with = tuning::search(cands, strategy, budget, 7, {}, evaluate, {}, lookahead);
    const SearchResult without = tuning::search(cands, strategy, budget, 7, {}, evaluate);
    EXPECT_EQ(sequence(with), sequence(without)) << to_string(strategy);
    EXPECT_GE(plans, 10u) << to_string(strategy);
    std::size_t hits = 0;
    for (std::size_t i = 1; i < with.evaluated.size(); ++i) hits += planned.count(with.evaluated[i].config.canonical());
    // Model: all but its first draw and picks the ranking did not foresee; anneal: all but
    // restarts from the best config.
    EXPECT_GE(hits, with.evaluated.size() / 2) << to_string(strategy);
  }
}

using test::matmul_f32;
using test::quick_tune;
using test::cfg;

TEST(TuneSearch, OnHardwareTheRandomSequenceFollowsTheSeed) {
  auto dev = open_device("cpu");
  Invocation inv = matmul_f32(40, 33, 24);
  TuneOptions o = quick_tune();
  o.strategy = Strategy::random;
  o.budget.evaluations = 5;
  o.seed = 11;
  auto a = tune(inv, *dev, o), b = tune(inv, *dev, o);
  ASSERT_EQ(a.measurements.size(), 5u);
  ASSERT_EQ(b.measurements.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(a.measurements[i].config, b.measurements[i].config);
  EXPECT_EQ(a.measurements.front().config, a.heuristic);  // the heuristic is measured first
  EXPECT_EQ(a.seed, 11u);
  EXPECT_EQ(a.entry.provenance.strategy, "random");
}

TEST(TuneSearch, ExtraConstraintsNarrowTheSpace) {
  auto dev = open_device("cpu");
  Invocation inv = matmul_f32(16, 16, 16);
  TuneOptions o = quick_tune();
  o.strategy = Strategy::random;
  o.budget.evaluations = 6;
  o.seed = 4;
  // The second names no matmul parameter: it is meant for another kernel and ignored here.
  o.constraints = {"mr == 8 && kc == 128", "block_q <= 64"};
  TuneResult r = tune(inv, *dev, o);
  ASSERT_FALSE(r.measurements.empty());
  std::size_t unconstrained = tuning::Candidates(
      Registry::global().implementation(inv, dev->info()).space(inv, dev->info()).enumerate()).size();
  EXPECT_LT(r.space_size, unconstrained);
  for (const auto& m : r.measurements)
    if (m.config.has("mr") && m.config != r.heuristic) {
      EXPECT_EQ(m.config.get("mr"), 8);
      EXPECT_EQ(m.config.get("kc"), 128);
    }
  o.constraints = {"mr == nonsense"};
  EXPECT_THROW(tune(inv, *dev, o), InvalidArgument);
}

TEST(TuneSearch, StoredResultsReplayInSimulation) {
  auto dev = open_device("cpu");
  Invocation inv = matmul_f32(32, 32, 32);
  TuneOptions o = quick_tune();
  o.strategy = Strategy::model;
  o.budget.evaluations = 12;
  o.seed = 2;
  TuneResult r = tune(inv, *dev, o);
  ASSERT_EQ(r.measurements.size(), 12u) << r.report;
  auto path = std::filesystem::temp_directory_path() / ("ejk_tune_table_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << r.to_json().dump(1);
  auto table = MeasurementTable::load(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(table.size(), 12u);
  TuneResult back = TuneResult::from_json(r.to_json());
  EXPECT_EQ(back.entry.config, r.entry.config);
  EXPECT_EQ(back.measurements.size(), r.measurements.size());
  // An exhaustive replay over the stored measurements finds the tune's best.
  auto replay = simulate(table, Strategy::exhaustive, {}, 2);
  ASSERT_LT(replay.best, replay.evaluated.size());
  double best = 0;
  for (const auto& m : r.measurements)
    if (m.status == Status::ok && (best == 0 || m.stats.median_ns < best)) best = m.stats.median_ns;
  EXPECT_DOUBLE_EQ(replay.evaluated[replay.best].stats.median_ns, best);
  EXPECT_THROW(MeasurementTable::load("/nonexistent/table.json"), IoError);
}

// A tune stores its best config only when the paired re-run puts it at least the margin ahead of
// the heuristic's; under it, the heuristic's config with its re-run measurement.
TEST(TuneVerdict, TheBestDisplacesTheHeuristicOnlyByTheMargin) {
  const Config heuristic{{"tile", 8}}, other{{"tile", 16}};
  TuneResult out;
  out.heuristic = heuristic;
  out.rerank = {test::meas(other, Status::ok, {100, 1, 99, 15}), test::meas(heuristic, Status::ok, {101, 1, 100, 15})};
  const Measurement best = out.rerank[0];
  bool kept = true;
  out.speedup = 1.0 + tuning::displace_margin / 2;
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, &best, true, kept), &out.rerank[1]);
  EXPECT_TRUE(kept);
  out.speedup = 1.0 + tuning::displace_margin;
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, &best, true, kept), &best);
  EXPECT_FALSE(kept);
  // No paired lead, or the heuristic's re-run failed: nothing to judge by.
  out.speedup = 1.001;
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, &best, false, kept), &best);
  EXPECT_FALSE(kept);
  out.rerank[1].status = Status::runtime;
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, &best, true, kept), &best);
  EXPECT_FALSE(kept);
  // The heuristic itself best, or no best.
  const Measurement own = out.rerank[1];
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, &own, true, kept), &own);
  EXPECT_EQ(tuning::keep_heuristic_unless_ahead(out, nullptr, true, kept), nullptr);
}

// How many evaluations a tune needed to come within 5% of its best, and the share of the gain
// over the heuristic its warm start gave alone.
TEST(TuneVerdict, NearBestCountsEvaluationsAndTheWarmStartItsShareOfTheGain) {
  TuneResult out;
  out.measurements = {test::meas(cfg(4, 1), Status::ok, {200, 1, 199, 5}), test::meas(cfg(8, 1), Status::ok, {120, 1, 119, 5}),
                      test::meas(cfg(16, 1), Status::runtime), test::meas(cfg(2, 1), Status::ok, {104, 1, 103, 5}),
                      test::meas(cfg(1, 1), Status::ok, {100, 1, 99, 5})};
  EXPECT_EQ(tuning::evaluations_to_near_best(out.measurements), 4u);
  EXPECT_EQ(tuning::evaluations_to_near_best({test::meas(cfg(1, 1), Status::runtime)}), 0u);
  out.heuristic_measurement = out.measurements[0];
  EXPECT_FALSE(tuning::warm_share(out));
  out.warm_measurement = out.measurements[1];
  ASSERT_TRUE(tuning::warm_share(out));
  EXPECT_DOUBLE_EQ(*tuning::warm_share(out), 0.8);
  out.warm_measurement = out.measurements[2];  // failed
  EXPECT_FALSE(tuning::warm_share(out));
  out.warm_measurement = out.measurements[4];
  EXPECT_DOUBLE_EQ(*tuning::warm_share(out), 1.0);
}

// The warm start is measured right after the heuristic; one outside the space is left out.
TEST(TuneSearch, TheWarmStartIsMeasuredSecond) {
  auto dev = open_device("cpu");
  Invocation inv = matmul_f32(40, 33, 24);
  TuneOptions o = quick_tune();
  o.strategy = Strategy::random;
  o.budget.evaluations = 4;
  o.seed = 3;
  const auto& impl = Registry::global().implementation(inv, dev->info());
  const Config heuristic = impl.heuristic(inv, dev->info());
  std::optional<Config> other;
  for (const Config& c : impl.space(inv, dev->info()).enumerate())
    if (c != heuristic) other = c;
  ASSERT_TRUE(other);
  o.warm_start = WarmStart{*other, "given"};
  TuneResult r = tune(inv, *dev, o);
  ASSERT_GE(r.measurements.size(), 2u) << r.report;
  EXPECT_EQ(r.measurements[0].config, heuristic);
  EXPECT_EQ(r.measurements[1].config, *other);
  ASSERT_TRUE(r.warm_start);
  ASSERT_TRUE(r.warm_measurement);
  EXPECT_EQ(r.warm_measurement->config, *other);
  EXPECT_GE(r.evaluations_to_near_best, 1u);
  EXPECT_NE(r.report.find("warm start " + other->canonical() + " (given)"), std::string::npos) << r.report;
  TuneResult back = TuneResult::from_json(r.to_json());
  ASSERT_TRUE(back.warm_start);
  EXPECT_EQ(back.warm_start->source, "given");
  EXPECT_EQ(back.evaluations_to_near_best, r.evaluations_to_near_best);

  o.warm_start = WarmStart{Config{{"no_such_parameter", 1}}, "elsewhere"};
  TuneResult outside = tune(inv, *dev, o);
  EXPECT_FALSE(outside.warm_start);
  EXPECT_EQ(outside.measurements[0].config, heuristic);
}

}  // namespace
}  // namespace ejk
