// The tuner records every kind of failing candidate with its category, in process and in an
// isolated worker, and falls back to the heuristic when nothing passes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "backends/cpu/cpu_device.hpp"
#include "tune/prebuild.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

// y = 2x + 1 and z += x over n floats, with a `mode` parameter whose values misbehave on
// purpose. The space holds exactly the modes listed in the invocation's "modes" option
// (only "good" without it), so nothing else that walks the registry meets a dangerous one.
class FaultyKernel final : public Kernel {
 public:
  std::string_view name() const override { return "tune_test_faulty"; }
  std::string_view host_version() const override { return "tune_test_faulty/1"; }
  std::vector<ArgDef> args() const override { return {{"x", Role::in}, {"y", Role::out}, {"z", Role::inout}}; }
  void check(const Invocation& inv) const override {
    if (inv.args.size() != 3) throw InvalidArgument("tune_test_faulty takes x, y, z");
  }
  Vars vars(const Invocation& inv) const override { return {{"n", inv.args[0].shape[0]}}; }
  double flops(const Invocation& inv) const override { return 3.0 * static_cast<double>(inv.args[0].shape[0]); }
  double bytes(const Invocation& inv) const override { return 16.0 * static_cast<double>(inv.args[0].shape[0]); }
  HostArrays reference(const Invocation& /*inv*/, const HostArrays& a) const override {
    std::vector<double> y(a[0].size()), z = a[2];
    for (std::size_t i = 0; i < y.size(); ++i) {
      y[i] = 2 * a[0][i] + 1;
      z[i] += a[0][i];
    }
    return {y, z};
  }
  // 16 elements of y and of z.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override {
    SampledOutput y{1, {}, {}}, z{2, {}, {}};
    for (std::int64_t i : sample_positions(inv.args[0].shape[0], 16)) {
      const double x = read(0, i, 1)[0];
      y.index.push_back(i), y.value.push_back(2 * x + 1);
      z.index.push_back(i), z.value.push_back(read(2, i, 1)[0] + x);
    }
    return {y, z};
  }
};

// An element of y the sampled reference does not read (where the minf modes put a -inf that
// only the first output can vouch for).
std::size_t unsampled(std::size_t n) {
  const std::vector<std::int64_t> taken = sample_positions(static_cast<std::int64_t>(n), 16);
  std::size_t k = 1;
  while (std::find(taken.begin(), taken.end(), static_cast<std::int64_t>(k)) != taken.end()) ++k;
  return k;
}

std::vector<std::string> modes_of(const Invocation& inv) {
  if (!inv.options.contains("modes")) return {"good"};
  return inv.options.at("modes").get<std::vector<std::string>>();
}

class FaultyCpu final : public Implementation {
 public:
  std::string_view kernel() const override { return "tune_test_faulty"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return FaultyKernel().args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& /*dev*/) const override {
    std::vector<Value> values;
    for (const auto& m : modes_of(inv)) values.push_back(m);
    ParamSpace s;
    s.param("mode", values);
    return s;
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& /*dev*/) const override {
    return {{"mode", modes_of(inv).front()}};
  }
  // Records which modes were built ahead; "compile" fails here as in run().
  void prepare(const Invocation& /*inv*/, const Config& config, Device& /*dev*/) const override {
    const std::string& mode = config.text("mode");
    {
      std::lock_guard lock(prepared_mutex());
      prepared().push_back(mode);
    }
    if (mode == "compile") throw CompileError("tune_test_faulty: mode compile does not build");
  }
  static std::mutex& prepared_mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& prepared() {
    static std::vector<std::string> v;
    return v;
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& /*dev*/) const override {
    const std::string& mode = config.text("mode");
    const auto n = static_cast<std::size_t>(inv.args[0].shape[0]);
    float* x = cpu::cpu_buffer(args[0].buffer()).as<float>();
    float* y = cpu::cpu_buffer(args[1].buffer()).as<float>();
    float* z = cpu::cpu_buffer(args[2].buffer()).as<float>();
    if (mode == "compile") throw CompileError("tune_test_faulty: mode compile does not build");
    if (mode == "limits") throw ResourceError("tune_test_faulty: mode limits needs more local memory than there is");
    if (mode == "runtime") throw DeviceError("tune_test_faulty: mode runtime fails at launch");
    if (mode == "hang")
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    if (mode == "crash") std::abort();
    for (std::size_t i = 0; i < n; ++i) {
      y[i] = mode == "wrong" ? 2 * x[i] : 2 * x[i] + 1;
      z[i] += x[i];
    }
    if (mode == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(40));
    if (mode == "oob") y[n + 3] = 1.0f;  // within the allocation: only the canary can tell
    if (mode == "nan") y[n / 2] = NAN;
    if (mode == "minf" || mode == "minf2" || mode == "minf_nan") y[unsampled(n)] = -INFINITY;
    if (mode == "minf_nan") y[n / 2] = NAN;
    if (mode == "input") x[0] += 1;
    if (mode == "input_last") x[n - 1] += 1;
  }
};

void register_faulty() {
  static const bool once = [] {
    Registry::global().add(std::make_shared<FaultyKernel>());
    Registry::global().add(std::make_shared<FaultyCpu>());
    return true;
  }();
  (void)once;
}

// Started by the tuner as its worker (it sets EJK_WORKER_SERVE=1), this test program serves
// the worker protocol instead of running tests, so the worker knows the test kernel.
const bool serving = [] {
  if (const char* s = std::getenv("EJK_WORKER_SERVE"); s && std::string(s) == "1") {
    register_faulty();
    std::_Exit(worker_main());
  }
  return false;
}();

std::string self_path() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

Invocation faulty(const std::vector<std::string>& modes, std::int64_t n = 1000) {
  Invocation inv;
  inv.kernel = "tune_test_faulty";
  inv.args = {{{n}, DType::f32}, {{n}, DType::f32}, {{n}, DType::f32}};
  inv.options = {{"modes", modes}};
  return inv;
}

TuneOptions quick() {
  TuneOptions o = test::quick_tune();
  o.seed = 1;
  return o;
}

const Measurement& of(const TuneResult& r, const std::string& mode) {
  for (const auto& m : r.measurements)
    if (m.config.text("mode") == mode) return m;
  throw NotFound("no measurement of mode " + mode);
}

TEST(TuneFailures, EachCategoryRecordedInProcess) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneResult r = tune(faulty({"good", "compile", "limits", "runtime", "oob", "wrong", "nan", "input", "slow", "good2"}),
                      *dev, quick());
  ASSERT_EQ(r.measurements.size(), 10u) << r.report;
  EXPECT_EQ(of(r, "good").status, Status::ok) << of(r, "good").message;
  // Runs after seven failures that each left z or the canaries in a different state.
  EXPECT_EQ(of(r, "good2").status, Status::ok) << of(r, "good2").message;
  EXPECT_EQ(of(r, "compile").status, Status::compile);
  EXPECT_EQ(of(r, "limits").status, Status::device_limits);
  EXPECT_EQ(of(r, "runtime").status, Status::runtime);
  EXPECT_EQ(of(r, "oob").status, Status::validation);
  EXPECT_NE(of(r, "oob").message.find("past the end of y"), std::string::npos) << of(r, "oob").message;
  EXPECT_EQ(of(r, "wrong").status, Status::validation);
  EXPECT_NE(of(r, "wrong").message.find("y differs from the reference"), std::string::npos) << of(r, "wrong").message;
  EXPECT_EQ(of(r, "nan").status, Status::validation);
  EXPECT_NE(of(r, "nan").message.find("NaN in y"), std::string::npos) << of(r, "nan").message;
  EXPECT_EQ(of(r, "input").status, Status::validation);
  EXPECT_NE(of(r, "input").message.find("modified its input x"), std::string::npos) << of(r, "input").message;
  // Far slower than the best so far: abandoned after its first sample.
  EXPECT_EQ(of(r, "slow").status, Status::ok);
  EXPECT_EQ(of(r, "slow").stats.n, 2);
  EXPECT_NE(of(r, "slow").message.find("abandoned"), std::string::npos);
  EXPECT_TRUE(r.tuned);
  EXPECT_TRUE(r.entry.config.text("mode") == "good" || r.entry.config.text("mode") == "good2") << r.report;
  EXPECT_EQ(r.validated, "reference");
  EXPECT_GE(of(r, "good").stats.n, 3);
  EXPECT_GT(of(r, "good").stats.median_ns, 0);
  EXPECT_LE(of(r, "good").stats.min_ns, of(r, "good").stats.median_ns);
}

TEST(TuneFailures, IsolatedWorkerKillsHangsAndSurvivesCrashes) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.isolate = true;
  o.worker = self_path();
  o.timeout_floor_seconds = 0.5;
  auto t0 = std::chrono::steady_clock::now();
  TuneResult r = tune(faulty({"good", "hang", "crash", "compile", "oob", "good2"}), *dev, o);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.measurements.size(), 6u) << r.report;
  EXPECT_EQ(of(r, "good").status, Status::ok) << of(r, "good").message;
  EXPECT_EQ(of(r, "hang").status, Status::timeout) << of(r, "hang").message;
  EXPECT_EQ(of(r, "crash").status, Status::runtime);
  EXPECT_NE(of(r, "crash").message.find("signal " + std::to_string(SIGABRT)), std::string::npos)
      << of(r, "crash").message;
  EXPECT_EQ(of(r, "compile").status, Status::compile);
  EXPECT_EQ(of(r, "oob").status, Status::validation);
  EXPECT_EQ(of(r, "good2").status, Status::ok) << of(r, "good2").message;
  EXPECT_TRUE(r.tuned);
  EXPECT_NE(r.report.find("worker restarted 2 times"), std::string::npos) << r.report;
  EXPECT_LT(took, 30.0);
}

TEST(TuneFailures, AllFailingFallsBackToTheHeuristic) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneResult r = tune(faulty({"compile", "wrong", "runtime"}), *dev, quick());
  EXPECT_FALSE(r.tuned);
  EXPECT_EQ(r.measurements.size(), 3u);
  EXPECT_EQ(r.entry.config, (Config{{"mode", std::string("compile")}}));
  EXPECT_NE(r.report.find("falling back to the heuristic"), std::string::npos) << r.report;
}

TEST(TuneFailures, LargeProblemsAreCheckedAgainstTheTrustedConfig) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.reference_flops_limit = 0;  // every problem counts as large
  TuneResult r = tune(faulty({"good", "wrong", "good2"}), *dev, o);
  EXPECT_EQ(r.validated, "trusted config {\"mode\":\"good\"} and the reference at 32 sampled elements");
  EXPECT_EQ(of(r, "wrong").status, Status::validation);
  EXPECT_NE(of(r, "wrong").message.find("differs from the trusted output"), std::string::npos);
  EXPECT_EQ(of(r, "good2").status, Status::ok);
}

// An infinity in an output with nothing to compare it with yet (the trusted config's, or the
// first clean candidate's) is not a failure: the log-sum-exp of a row with no key is -inf. A NaN
// is, wherever it lies; later candidates must match the infinity.
TEST(TuneFailures, FirstOutputsMayHoldInfinities) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.reference_flops_limit = 0;
  TuneResult r = tune(faulty({"minf_nan", "minf", "good", "minf2"}), *dev, o);
  EXPECT_EQ(r.validated, "first clean candidate {\"mode\":\"minf\"} and the reference at 32 sampled elements");
  EXPECT_NE(of(r, "minf_nan").message.find("NaN in y at element 500"), std::string::npos) << of(r, "minf_nan").message;
  EXPECT_EQ(of(r, "minf").status, Status::ok) << of(r, "minf").message;
  EXPECT_EQ(of(r, "minf2").status, Status::ok) << of(r, "minf2").message;
  EXPECT_EQ(of(r, "good").status, Status::validation);
  EXPECT_NE(of(r, "good").message.find("expected -inf"), std::string::npos) << of(r, "good").message;
}

// Above 32 MiB an input is checked by chunks spread from its first byte to its last, and
// outputs are compared a slice at a time against the trusted output kept on the device.
TEST(TuneFailures, LargeArgumentsAreCheckedInSlices) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.reference_flops_limit = 0;
  TuneResult r = tune(faulty({"good", "input", "input_last", "wrong", "nan", "good2"}, std::int64_t{9} << 20), *dev, o);
  EXPECT_EQ(r.validated, "trusted config {\"mode\":\"good\"} and the reference at 32 sampled elements");
  for (const char* mode : {"input", "input_last"}) {
    EXPECT_EQ(of(r, mode).status, Status::validation) << mode;
    EXPECT_NE(of(r, mode).message.find("modified its input x"), std::string::npos) << of(r, mode).message;
  }
  EXPECT_NE(of(r, "wrong").message.find("differs from the trusted output"), std::string::npos) << of(r, "wrong").message;
  EXPECT_NE(of(r, "nan").message.find("NaN in y at element " + std::to_string((std::int64_t{9} << 20) / 2)), std::string::npos)
      << of(r, "nan").message;
  // The inputs were made again after each write, so a later clean candidate passes.
  EXPECT_EQ(of(r, "good2").status, Status::ok) << of(r, "good2").message;
}

// Candidates are built ahead on host threads in the order the search will take them; a build
// that fails ahead of time is recorded when the candidate runs, as without building ahead.
TEST(TuneFailures, UpcomingCandidatesAreBuiltAhead) {
  register_faulty();
  auto dev = open_device("cpu");
  {
    std::lock_guard lock(FaultyCpu::prepared_mutex());
    FaultyCpu::prepared().clear();
  }
  TuneOptions o = quick();
  o.prebuild_threads = 2;
  o.strategy = Strategy::exhaustive;
  TuneResult r = tune(faulty({"good", "slow", "compile", "good2"}), *dev, o);
  ASSERT_EQ(r.measurements.size(), 4u) << r.report;
  EXPECT_EQ(of(r, "compile").status, Status::compile);
  EXPECT_EQ(of(r, "good2").status, Status::ok) << of(r, "good2").message;
  std::lock_guard lock(FaultyCpu::prepared_mutex());
  const auto& prepared = FaultyCpu::prepared();
  // The heuristic runs before the search plans; the rest were handed to the builders.
  EXPECT_EQ(std::count(prepared.begin(), prepared.end(), "good"), 0);
  EXPECT_FALSE(prepared.empty());
  for (const auto& m : prepared) EXPECT_TRUE(m == "slow" || m == "compile" || m == "good2") << m;
}

TEST(Prebuilder, BuildsWhatIsPlannedAndStopsWithWorkQueued) {
  register_faulty();
  auto dev = open_device("cpu");
  const Invocation inv = faulty({"good"});
  const Implementation& impl = Registry::global().implementation(inv, dev->info());
  {
    std::lock_guard lock(FaultyCpu::prepared_mutex());
    FaultyCpu::prepared().clear();
  }
  {
    tuning::Prebuilder builder(inv, impl, *dev, 2);
    std::vector<Config> plan;
    for (const char* m : {"a", "b", "compile", "c", "d"}) plan.push_back({{"mode", std::string(m)}});
    builder.plan(plan);
    for (int i = 0; i < 2000 && builder.started() < plan.size(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(builder.started(), plan.size());
    builder.plan(std::vector<Config>(1000, Config{{"mode", std::string("e")}}));
  }  // stops with most of the second plan still queued
  std::lock_guard lock(FaultyCpu::prepared_mutex());
  const auto& prepared = FaultyCpu::prepared();
  for (const char* m : {"a", "b", "compile", "c", "d"}) EXPECT_EQ(std::count(prepared.begin(), prepared.end(), m), 1) << m;
}

TEST(TuneFailures, TrustedConfigFailingHandsOverToTheFirstCleanCandidate) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.reference_flops_limit = 0;
  TuneResult r = tune(faulty({"runtime", "good", "wrong"}), *dev, o);
  EXPECT_EQ(r.validated, "first clean candidate {\"mode\":\"good\"} and the reference at 32 sampled elements");
  EXPECT_EQ(of(r, "wrong").status, Status::validation);
  EXPECT_TRUE(r.tuned);
}

TEST(TuneFailures, TheRealWorkerTunesMatmul) {
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.isolate = true;
  o.worker = EJK_TEST_WORKER;
  o.strategy = Strategy::random;
  o.budget.evaluations = 4;
  Invocation inv = test::matmul_f32(48, 56, 40, 0.5);
  TuneResult r = tune(inv, *dev, o);
  ASSERT_EQ(r.measurements.size(), 4u) << r.report;
  for (const auto& m : r.measurements) EXPECT_EQ(m.status, Status::ok) << m.config.canonical() << " " << m.message;
  EXPECT_EQ(r.validated, "reference");
  EXPECT_TRUE(r.tuned);
  EXPECT_EQ(r.entry.kernel, "matmul");
  EXPECT_EQ(r.entry.signature, inv.signature());
  EXPECT_EQ(r.entry.fingerprint, dev->info().fingerprint());
  EXPECT_EQ(r.entry.provenance.evaluations, 4);
  EXPECT_EQ(r.entry.provenance.seed, 1u);
}

TEST(TuneFailures, MeasuringOneConfigChecksAndKeepsSamples) {
  register_faulty();
  auto dev = open_device("cpu");
  TimingOptions t = quick().timing;
  Measurement good = measure(faulty({"good", "wrong"}), {{"mode", std::string("good")}}, *dev, t);
  EXPECT_EQ(good.status, Status::ok) << good.message;
  EXPECT_EQ(static_cast<int>(good.samples_ns.size()), good.stats.n);
  EXPECT_EQ(Measurement::from_json(good.to_json()).samples_ns, good.samples_ns);
  Measurement wrong = measure(faulty({"good", "wrong"}), {{"mode", std::string("wrong")}}, *dev, t);
  EXPECT_EQ(wrong.status, Status::validation);
  Measurement unchecked = measure(faulty({"good", "wrong"}), {{"mode", std::string("wrong")}}, *dev, t, false);
  EXPECT_EQ(unchecked.status, Status::ok);

  // A config chosen on the measurement's own inputs (ejk run's executor call): the chooser sees
  // them made, and what it writes to an inout argument is undone before the measured run.
  const Invocation inv = faulty({"good", "wrong"});
  std::vector<double> seen;
  auto choose = [&](std::span<const Tensor> args) {
    EXPECT_EQ(args.size(), inv.args.size());
    seen = args[0].read();
    args[2].write(std::span<const double>(std::vector<double>(static_cast<std::size_t>(args[2].numel()), 7.0)));
    return Config{{"mode", std::string("wrong")}};
  };
  Measurement chosen = measure(inv, choose, *dev, t);
  EXPECT_EQ(chosen.config, (Config{{"mode", std::string("wrong")}}));
  EXPECT_EQ(chosen.status, Status::validation) << chosen.message;
  ASSERT_EQ(seen.size(), 1000u);
  EXPECT_TRUE(std::any_of(seen.begin(), seen.end(), [](double x) { return x != 0.0; }));
  auto pick_good = [](std::span<const Tensor>) { return Config{{"mode", std::string("good")}}; };
  EXPECT_EQ(measure(inv, pick_good, *dev, t).status, Status::ok);
}

// Above the reference's limit the trusted config is itself checked against the reference at
// sampled elements: a wrong heuristic hands over to the first clean candidate, and measuring
// the heuristic alone (ejk run --check) reports it wrong instead of comparing it with itself.
TEST(TuneFailures, LargeProblemsCheckTheTrustedConfigAgainstSampledReference) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.reference_flops_limit = 0;
  TuneResult r = tune(faulty({"wrong", "good", "good2"}), *dev, o);
  EXPECT_EQ(r.validated, "first clean candidate {\"mode\":\"good\"} and the reference at 32 sampled elements");
  EXPECT_EQ(of(r, "wrong").status, Status::validation);
  EXPECT_NE(of(r, "wrong").message.find("y differs from the reference at 16 sampled elements"), std::string::npos)
      << of(r, "wrong").message;
  EXPECT_EQ(of(r, "good2").status, Status::ok) << of(r, "good2").message;

  const TimingOptions t = quick().timing;
  Measurement heuristic = measure(faulty({"wrong", "good"}), {{"mode", std::string("wrong")}}, *dev, t, true, 0);
  EXPECT_EQ(heuristic.status, Status::validation) << heuristic.message;
  Measurement good = measure(faulty({"wrong", "good"}), {{"mode", std::string("good")}}, *dev, t, true, 0);
  EXPECT_EQ(good.status, Status::ok) << good.message;
}

TEST(TuneFailures, MissingWorkerIsNamed) {
  register_faulty();
  auto dev = open_device("cpu");
  TuneOptions o = quick();
  o.isolate = true;
  o.worker = "/nonexistent/ejk-worker";
  EXPECT_THROW(tune(faulty({"good"}), *dev, o), DeviceError);
}

}  // namespace
}  // namespace ejk
