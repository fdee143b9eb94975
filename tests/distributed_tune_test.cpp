// `mpirun -n N ejk tune` end to end on the cpu device: the same keys, measurements and bundle
// entries as a run on one rank, with 2 ranks and with 3 (4 invocations do not divide by 3),
// a failing rank whose share is tuned again on rank 0 or marked failed, never lost, and a dying
// rank whose job a rerun completes.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "cli_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;

#ifdef EJK_MPIEXEC
constexpr const char* mpiexec = EJK_MPIEXEC;
#else
constexpr const char* mpiexec = nullptr;
#endif

// Four invocations, tiny and quick to time; a fixed seed so that every run measures the same
// candidates per invocation.
constexpr const char* recipe =
    "name: mpi-tiny\ndevice: cpu\nworkloads:\n  - kernel: matmul\n    shape: {m: [8, 16, 24, 32], n: 16, k: 16}\n"
    "tune: {strategy: random, budget: {evals: 2}, seed: 5}\n";

class DistributedTune : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef EJK_HAVE_MPI
    GTEST_SKIP() << "built with EJK_WITH_MPI=OFF";
#endif
    std::ofstream(dir_ / "tiny.yaml") << recipe;
  }

  // `ejk tune tiny.yaml` with its own cache folder, under mpirun when ranks > 0.
  Result tune(const std::string& name, int ranks, const std::string& env = "") const {
    std::string launcher =
        ranks > 0 ? std::string(mpiexec) + " --allow-run-as-root --oversubscribe -n " + std::to_string(ranks) + " " : "";
    return shell("cd " + dir_.path.string() + " && " + env + " EJK_CACHE_DIR=" + (dir_ / name).string() +
                 " EJK_PROFILE_DIR=" + (dir_ / "none").string() + " " + launcher + EJK_CLI_PATH +
                 " tune tiny.yaml --device cpu --bundle " + name + ".json 2>&1");
  }

  // key -> canonical configs of every measurement stored for it.
  std::map<std::string, std::multiset<std::string>> cache(const std::string& name) const {
    PersistentCache c(dir_ / name / "ejk.sqlite");
    std::map<std::string, std::multiset<std::string>> out;
    for (const auto& e : c.list()) {
      auto& ms = out[e.key()];
      for (const auto& m : c.measurements(e.key())) ms.insert(m.measurement.config.canonical());
    }
    return out;
  }

  std::set<std::string> bundle_keys(const std::string& name) const {
    std::set<std::string> keys;
    for (const auto& e : read_bundle(dir_ / (name + ".json")).entries) keys.insert(e.key());
    return keys;
  }

  static std::set<std::string> keys_of(const std::map<std::string, std::multiset<std::string>>& c) {
    std::set<std::string> keys;
    for (const auto& [k, _] : c) keys.insert(k);
    return keys;
  }

  void expect_same_as_one_rank(int ranks, int baseline_ranks) {
    Result one = tune("one", baseline_ranks);
    ASSERT_EQ(one.code, 0) << one.out;
    Result many = tune("many", ranks);
    ASSERT_EQ(many.code, 0) << many.out;
    EXPECT_NE(many.out.find("distributed over " + std::to_string(ranks) + " ranks"), std::string::npos) << many.out;
    auto a = cache("one"), b = cache("many");
    EXPECT_EQ(a.size(), 4u);
    EXPECT_EQ(keys_of(a), keys_of(b));
    // Every candidate's measurement came back, not only the winners.
    EXPECT_EQ(a, b);
    EXPECT_EQ(bundle_keys("one"), keys_of(a));
    EXPECT_EQ(bundle_keys("many"), keys_of(b));
  }

  test::TempDir dir_;
};

TEST_F(DistributedTune, TwoRanksGiveTheKeysAndMeasurementsOfAPlainRun) { expect_same_as_one_rank(2, 0); }

TEST_F(DistributedTune, ThreeRanksGiveTheKeysAndMeasurementsOfOneRank) { expect_same_as_one_rank(3, 1); }

TEST_F(DistributedTune, AFailingRanksShareIsTunedAgainOnRankZero) {
  Result one = tune("one", 0);
  ASSERT_EQ(one.code, 0) << one.out;
  Result r = tune("many", 3, "EJK_TEST_FAIL_RANK=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("ejk: rank 1 on "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("injected failure on rank 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("its invocations were tuned again on rank 0"), std::string::npos) << r.out;
  EXPECT_EQ(keys_of(cache("one")), keys_of(cache("many")));
}

TEST_F(DistributedTune, TasksThatFailOnRankZeroAreMarkedFailed) {
  Result r = tune("many", 2, "EJK_TEST_FAIL_RANK=0");
  EXPECT_EQ(r.code, 1) << r.out;
  // Each of the four invocations is either in the cache or a failed row naming rank 0.
  std::size_t failed = 0;
  for (std::size_t p = 0; (p = r.out.find("rank 0: injected failure on rank 0", p)) != std::string::npos; ++p) ++failed;
  EXPECT_GE(failed, 1u) << r.out;
  EXPECT_EQ(cache("many").size() + failed, 4u) << r.out;
}

// A rank that dies takes the job down (Open MPI aborts it and names the rank); what rank 0 had
// stored stays, and running the command again tunes only what is missing.
TEST_F(DistributedTune, ADeadRankAbortsTheJobAndARerunCompletesIt) {
  Result one = tune("one", 0);
  ASSERT_EQ(one.code, 0) << one.out;
  Result r = tune("many", 2, "EJK_TEST_FAIL_RANK=1:die");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("exited"), std::string::npos) << r.out;
  const std::size_t kept = cache("many").size();
  EXPECT_LT(kept, 4u) << r.out;
  Result again = tune("many", 0);
  ASSERT_EQ(again.code, 0) << again.out;
  std::size_t skipped = 0;
  for (std::size_t p = 0; (p = again.out.find("already tuned", p)) != std::string::npos; ++p) ++skipped;
  EXPECT_EQ(skipped, kept) << again.out;
  EXPECT_EQ(keys_of(cache("one")), keys_of(cache("many")));
}

}  // namespace
}  // namespace ejk
