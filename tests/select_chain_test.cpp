// The selector chain: each tier, their order, the reasons, strict mode, policies, overlays,
// keys that follow the kernel version, and recording.
#include <thread>

#include <unistd.h>

#include "core/embedded.hpp"
#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;
using test::cfg;
using test::probe;

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

class Chain : public ::testing::Test {
 protected:
  void SetUp() override { set_autotuner({}); }
  void TearDown() override { set_autotuner({}); }

  std::unique_ptr<Executor> make(std::vector<fs::path> profiles = {}, Registry* registry = nullptr,
                                 std::shared_ptr<Device> device = nullptr) {
    return std::make_unique<Executor>(device ? device : dev,
                                      ExecutorOptions{registry ? registry : reg.get(), dir / "ejk.sqlite", profiles});
  }
  std::string version(Registry* r = nullptr) const {
    Registry& registry = r ? *r : *reg;
    return registry.version(*registry.implementations("probe").front());
  }
  CacheEntry entry_for(const Invocation& inv, Config c) const {
    return test::measured(dev->info().fingerprint(), "probe", version(), inv.signature(), std::move(c));
  }

  test::TempDir dir;
  std::unique_ptr<Registry> reg = test::probe_registry();
  std::shared_ptr<Device> dev = test::fake_device();
  // The tests state their policy instead of inheriting one from the environment.
  ScopedPolicy neutral{{AutotunePolicy::heuristics, Tier::heuristic, SelectionLog::off}};
};

TEST_F(Chain, HeuristicFirstThenMemoryWhichIgnoresScalars) {
  auto ex = make();
  Invocation inv = probe(64);
  Selection first = ex->select(inv);
  EXPECT_EQ(first.tier, Tier::heuristic);
  EXPECT_EQ(first.config, cfg(4, 1));
  EXPECT_TRUE(starts_with(first.reason, "heuristic: cpu rule")) << first.reason;
  EXPECT_TRUE(contains(first.reason, "autotune policy is heuristics")) << first.reason;

  Invocation other_scalars = inv;
  other_scalars.scalars["alpha"] = -2.0;
  Selection again = ex->select(other_scalars);
  EXPECT_EQ(again.tier, Tier::memory);
  EXPECT_EQ(again.origin, Tier::heuristic);
  EXPECT_TRUE(starts_with(again.reason, "memory: heuristic: cpu rule")) << again.reason;

  EXPECT_EQ(ex->select(probe(64, DType::f32, {{"mode", 1}})).tier, Tier::heuristic) << "options are part of the key";
  EXPECT_EQ(ex->select(probe(64, DType::f16)).tier, Tier::heuristic) << "dtypes are part of the key";
  ASSERT_NE(ex->persistent_cache(), nullptr);
  EXPECT_EQ(ex->persistent_cache()->size(), 0u) << "a heuristic never reaches the persistent cache";
}

TEST_F(Chain, OverrideIsCheckedAgainstTheSpaceAndNeverStored) {
  auto ex = make();
  Selection s = ex->select(probe(64), cfg(8, 2));
  EXPECT_EQ(s.tier, Tier::override_);
  EXPECT_EQ(s.config, cfg(8, 2));
  EXPECT_EQ(s.reason, "override: config given by the caller");
  try {
    ex->select(probe(4), cfg(8, 2));
    FAIL() << "tile 8 > n 4 must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "tile <= n")) << e.what();
    EXPECT_TRUE(contains(e.what(), "override")) << e.what();
  }
  EXPECT_THROW(ex->select(probe(64), Config{{"tile", 8}, {"unroll", 1}, {"extra", 1}}), InvalidArgument);
  EXPECT_THROW(ex->select(probe(64), Config{{"tile", 3}, {"unroll", 1}}), InvalidArgument);
  EXPECT_EQ(ex->persistent_cache()->size(), 0u) << "an override never reaches the persistent cache";
  EXPECT_EQ(ex->select(probe(64)).tier, Tier::heuristic) << "an override is not remembered";
}

TEST_F(Chain, PersistentEntryAnswersWithItsProvenance) {
  auto ex = make();
  Invocation inv = probe(64);
  CacheEntry e = entry_for(inv, cfg(16, 2));
  EXPECT_EQ(e.key(), ex->key(inv));
  EXPECT_EQ(invocation_key(dev->info(), inv, version()), ex->key(inv));
  ex->persistent_cache()->put(e);
  Selection s = ex->select(inv);
  EXPECT_EQ(s.tier, Tier::persistent);
  EXPECT_EQ(s.config, cfg(16, 2));
  EXPECT_EQ(s.reason, "persistent: measured 2026-11-22 by anneal, 41 evaluations, median 1 us");
  Selection hit = ex->select(inv);
  EXPECT_EQ(hit.tier, Tier::memory);
  EXPECT_EQ(hit.origin, Tier::persistent);

  // A stored config that does not fit the space (tile 16 > n 8) is passed over, and said so.
  Invocation small = probe(8);
  ex->persistent_cache()->put(entry_for(small, cfg(16, 1)));
  Selection fallback = ex->select(small);
  EXPECT_EQ(fallback.tier, Tier::heuristic);
  EXPECT_TRUE(contains(fallback.reason, "persistent entry {\"tile\":16,\"unroll\":1} rejected")) << fallback.reason;
}

TEST_F(Chain, TiersAnswerInOrder) {
  Invocation inv = probe(64);
  fs::path profiles = dir / "profiles";
  write_bundle(profiles / "acme.json",
               Bundle::make({DeviceRecord::of(dev->info())}, {entry_for(inv, cfg(8, 2))}));
  std::atomic<int> tuned{0};
  set_autotuner([&](const Invocation&, const Implementation&, const std::shared_ptr<Device>&) {
    ++tuned;
    TuneOutcome out;
    out.entry.config = cfg(32, 1);
    out.entry.stats = {500, 10, 480, 9};
    out.entry.provenance.strategy = "fake";
    out.measurements.push_back(test::meas(cfg(32, 1), Status::ok, {500, 10, 480, 9}, ""));
    return std::optional<TuneOutcome>(out);
  });
  ScopedPolicy tune({.autotune = AutotunePolicy::autotune});
  {
    auto ex = make({profiles});
    ex->persistent_cache()->put(entry_for(inv, cfg(16, 2)));
    EXPECT_EQ(ex->select(inv, cfg(2, 1)).tier, Tier::override_);
    {
      ScopedOverlay overlay("probe", cfg(1, 2));
      EXPECT_EQ(ex->select(inv, cfg(2, 1)).tier, Tier::override_) << "override beats overlay";
      EXPECT_EQ(ex->select(inv).tier, Tier::overlay) << "overlay beats every cache";
    }
    EXPECT_EQ(ex->select(inv).tier, Tier::persistent) << "persistent beats profile and autotune";
    EXPECT_EQ(ex->select(inv).tier, Tier::memory);
    {
      ScopedOverlay overlay("probe", cfg(1, 2));
      EXPECT_EQ(ex->select(inv).tier, Tier::overlay) << "overlay beats the memory cache";
    }
    EXPECT_TRUE(ex->persistent_cache()->remove(ex->key(inv)));
  }
  {
    auto ex = make({profiles});
    Selection s = ex->select(inv);
    EXPECT_EQ(s.tier, Tier::profile) << "profile beats autotune";
    EXPECT_EQ(s.config, cfg(8, 2));
    EXPECT_EQ(s.reason, "profile: exact device (acme.json)");
  }
  EXPECT_EQ(tuned, 0);
  {
    auto ex = make({});
    Selection s = ex->select(inv);
    EXPECT_EQ(s.tier, Tier::autotune) << "autotune beats the heuristic";
    EXPECT_EQ(s.config, cfg(32, 1));
    EXPECT_EQ(s.reason, "autotune: tuned now by fake, 1 evaluations, median 500 ns");
    EXPECT_EQ(tuned, 1);
  }
  {
    ScopedPolicy heuristics({.autotune = AutotunePolicy::heuristics});
    auto ex = make({}, nullptr, test::fake_device(test::fake_info("Probe Other")));
    EXPECT_EQ(ex->select(inv).tier, Tier::heuristic);
    EXPECT_EQ(tuned, 1);
  }
}

TEST_F(Chain, ProfileFallsBackFromDeviceToArchitectureToNearestWorkload) {
  DeviceRecord here = DeviceRecord::of(dev->info());
  DeviceRecord sibling = DeviceRecord::of(test::fake_info("Probe Two", "2.0", "acme-gen1"));
  DeviceRecord other_arch = DeviceRecord::of(test::fake_info("Probe Three", "1.0", "acme-gen2"));
  auto on = [&](const DeviceRecord& d, const Invocation& inv, Config c, std::string v = "") {
    return test::measured(d.fingerprint, "probe", v.empty() ? version() : v, inv.signature(), std::move(c));
  };
  fs::path profiles = dir / "profiles";
  write_bundle(profiles / "family.json", Bundle::make({here, sibling, other_arch},
                                                      {on(here, probe(64), cfg(8, 1)),
                                                       on(sibling, probe(128), cfg(16, 1)),
                                                       on(other_arch, probe(256), cfg(32, 2)),
                                                       on(here, probe(512), cfg(2, 2), "0000stale0000000"),
                                                       on(here, probe(4096), cfg(32, 1))}));
  auto ex = make({profiles});
  auto check = [&](std::int64_t n, Tier tier, const Config& c, const std::string& reason) {
    Selection s = ex->select(probe(n));
    EXPECT_EQ(s.tier, tier) << "n=" << n << ": " << s.reason;
    EXPECT_EQ(s.config, c) << "n=" << n << ": " << s.reason;
    if (!reason.empty()) {
      EXPECT_EQ(s.reason, reason) << "n=" << n;
    }
  };
  check(64, Tier::profile, cfg(8, 1), "profile: exact device (family.json)");
  check(128, Tier::profile, cfg(16, 1), "profile: same vendor and architecture, Probe Two acme-gen1 (family.json)");
  check(3000, Tier::profile, cfg(32, 1), "profile: nearest workload, n 4096 for 3000 (exact device, family.json)");
  // Another architecture's exact match is not used; the nearest of this family is.
  check(256, Tier::profile, cfg(16, 1), "profile: nearest workload, n 128 for 256 (same architecture, family.json)");
  // An entry of another kernel version is ignored: the kernel changed since.
  check(512, Tier::profile, cfg(16, 1), "profile: nearest workload, n 128 for 512 (same architecture, family.json)");
  // Every stored tile exceeds n = 6: nothing fits, the heuristic answers.
  check(6, Tier::heuristic, cfg(4, 1), "");
  EXPECT_EQ(ex->select(probe(64, DType::f16)).tier, Tier::heuristic) << "nearest workload needs the same dtypes";
  EXPECT_EQ(ex->select(probe(64, DType::f32, {{"mode", 2}})).tier, Tier::heuristic) << "and the same options";

  auto stranger = make({profiles}, nullptr, test::fake_device(test::fake_info("Probe One", "1.0", "acme-gen1", "Other")));
  EXPECT_EQ(stranger->select(probe(64)).tier, Tier::heuristic) << "another vendor gets nothing";
}

// A tune starts from the heuristic and from the config of the nearest workload this device has
// tuned (its own entry when re-tuned), else from what the profile tier would answer.
TEST_F(Chain, WarmStartIsTheNearestCachedWorkloadThenTheProfile) {
  fs::path profiles = dir / "profiles";
  write_bundle(profiles / "shipped.json",
               Bundle::make({DeviceRecord::of(dev->info())}, {entry_for(probe(1024), cfg(32, 2))}));
  auto ex = make({profiles});
  auto from_profile = ex->warm_start(probe(64));
  ASSERT_TRUE(from_profile);
  EXPECT_EQ(from_profile->config, cfg(32, 2));
  EXPECT_EQ(from_profile->source, "profile: nearest workload, n 1024 for 64 (exact device, shipped.json)");

  ex->persistent_cache()->put(entry_for(probe(48), cfg(8, 2)));
  ex->persistent_cache()->put(entry_for(probe(4096), cfg(16, 1)));
  auto near = ex->warm_start(probe(64));
  ASSERT_TRUE(near);
  EXPECT_EQ(near->config, cfg(8, 2));
  EXPECT_EQ(near->source, "persistent cache: nearest workload on this device, n 48 for 64");
  auto own = ex->warm_start(probe(4096));
  ASSERT_TRUE(own);
  EXPECT_EQ(own->config, cfg(16, 1));
  EXPECT_EQ(own->source, "persistent cache: this workload's entry");
  // Only configs inside the space: tile 8 and 16 exceed n = 6, and the profile's 32 does too.
  EXPECT_FALSE(ex->warm_start(probe(6)));
  // Another dtype or other options are another kind of workload.
  EXPECT_FALSE(ex->warm_start(probe(64, DType::f16)));
  // Entries of another device are not this device's measurements.
  auto other = make({}, nullptr, test::fake_device(test::fake_info("Probe Two", "2.0", "acme-gen2")));
  EXPECT_FALSE(other->warm_start(probe(64)));
}

TEST_F(Chain, ADamagedBundleIsSkippedAndReported) {
  fs::path profiles = dir / "profiles";
  write_bundle(profiles / "good.json",
               Bundle::make({DeviceRecord::of(dev->info())}, {entry_for(probe(64), cfg(8, 1))}));
  fs::create_directories(profiles);
  std::ofstream(profiles / "bad.json") << "{\"schema_version\": 1, \"devices\": [], \"entries\": [], \"sha256\": \"00\"}";
  testing::internal::CaptureStderr();
  auto ex = make({profiles});
  Selection s = ex->select(probe(64));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(s.tier, Tier::profile);
  EXPECT_TRUE(contains(err, "bad.json")) << err;
  EXPECT_TRUE(contains(err, "checksum mismatch")) << err;
}

TEST_F(Chain, KeyFirstServedByHeuristicsIsTunedOncePolicyAllows) {
  std::atomic<int> calls{0};
  set_autotuner([&](const Invocation& inv, const Implementation& impl, const std::shared_ptr<Device>& d) {
    ++calls;
    EXPECT_EQ(impl.kernel(), "probe");
    EXPECT_EQ(d.get(), dev.get());
    EXPECT_EQ(inv.scalars.value("alpha", 0.0), 1.5) << "the tuner sees the caller's invocation";
    TuneOutcome out;
    out.entry.config = cfg(32, 2);
    out.entry.stats = {700, 20, 650, 11};
    out.entry.provenance.strategy = "fake";
    for (int i = 0; i < 3; ++i) out.measurements.push_back(test::meas(cfg(1 << i, 1), Status::ok, {700.0 + i, 1, 690, 5}, ""));
    out.measurements.push_back(test::meas(cfg(8, 2), Status::validation, {}, "wrong values"));
    return std::optional<TuneOutcome>(out);
  });
  auto ex = make();
  Invocation inv = probe(64);
  EXPECT_EQ(ex->select(inv).tier, Tier::heuristic);
  EXPECT_EQ(ex->select(inv).tier, Tier::memory);
  EXPECT_EQ(calls, 0) << "the heuristics policy never tunes";
  {
    ScopedPolicy allow({.autotune = AutotunePolicy::autotune});
    Selection tuned = ex->select(inv);
    EXPECT_EQ(tuned.tier, Tier::autotune) << tuned.reason;
    EXPECT_EQ(tuned.config, cfg(32, 2));
    EXPECT_EQ(calls, 1);
    Selection hit = ex->select(inv);
    EXPECT_EQ(hit.tier, Tier::memory);
    EXPECT_EQ(hit.origin, Tier::autotune);
    EXPECT_EQ(calls, 1);
  }
  auto stored = ex->persistent_cache()->get(ex->key(inv));
  ASSERT_TRUE(stored.has_value()) << "the tuned result is written to the persistent cache";
  EXPECT_EQ(stored->config, cfg(32, 2));
  EXPECT_EQ(stored->provenance.evaluations, 4);
  EXPECT_EQ(ex->persistent_cache()->measurements(ex->key(inv)).size(), 4u);
  EXPECT_EQ(ex->persistent_cache()->device(dev->info().fingerprint())->architecture, "acme-gen1");
  auto fresh = make();
  EXPECT_EQ(fresh->select(inv).tier, Tier::persistent) << "and found there by the next process";
}

TEST_F(Chain, FailedTuningFallsBackOnceAndIsNotRetried) {
  std::atomic<int> calls{0};
  set_autotuner([&](const Invocation&, const Implementation&, const std::shared_ptr<Device>&) {
    ++calls;
    return std::optional<TuneOutcome>();
  });
  ScopedPolicy allow({.autotune = AutotunePolicy::autotune});
  auto ex = make();
  Selection s = ex->select(probe(100));
  EXPECT_EQ(s.tier, Tier::heuristic);
  EXPECT_TRUE(contains(s.reason, "autotune found no valid candidate")) << s.reason;
  EXPECT_EQ(ex->select(probe(100)).tier, Tier::memory);
  EXPECT_EQ(calls, 1);

  set_autotuner([&](const Invocation&, const Implementation&, const std::shared_ptr<Device>&) {
    ++calls;
    TuneOutcome out;
    out.entry.config = cfg(64, 1);  // not a candidate value
    out.entry.stats = {1, 1, 1, 1};
    return std::optional<TuneOutcome>(out);
  });
  Selection rejected = ex->select(probe(200));
  EXPECT_EQ(rejected.tier, Tier::heuristic);
  EXPECT_TRUE(contains(rejected.reason, "autotune result {\"tile\":64,\"unroll\":1} rejected")) << rejected.reason;
  EXPECT_EQ(ex->persistent_cache()->size(), 0u);
}

TEST_F(Chain, StrictModeFailsBelowItsTierNamingKeyAndTier) {
  auto ex = make();
  Invocation inv = probe(64);
  ex->persistent_cache()->put(entry_for(probe(32), cfg(8, 1)));
  {
    ScopedPolicy strict({.strict = Tier::persistent});
    try {
      ex->select(inv);
      FAIL() << "a heuristic answer must fail under strict=persistent";
    } catch (const SelectionError& e) {
      std::string what = e.what();
      EXPECT_TRUE(contains(what, "fell to tier 'heuristic'")) << what;
      EXPECT_TRUE(contains(what, "EJK_STRICT=persistent")) << what;
      EXPECT_TRUE(contains(what, dev->info().fingerprint() + " | probe | " + version())) << what;
      EXPECT_TRUE(contains(what, inv.signature())) << what;
    }
    EXPECT_THROW(ex->select(inv), SelectionError) << "a remembered heuristic answer fails too";
    EXPECT_EQ(ex->select(probe(32)).tier, Tier::persistent);
    EXPECT_EQ(ex->select(probe(32)).tier, Tier::memory) << "a remembered measured answer passes";
    EXPECT_EQ(ex->select(inv, cfg(8, 1)).tier, Tier::override_);
  }
  EXPECT_EQ(ex->select(inv).origin, Tier::heuristic);

  ::setenv("EJK_STRICT", "persistent", 1);
  auto env_strict = make();
  ::unsetenv("EJK_STRICT");
  EXPECT_EQ(env_strict->base_policy().strict, Tier::persistent);
  {
    // The fixture's neutral override would mask the environment: drop to the base policy.
    ScopedPolicy base_strict({.strict = env_strict->base_policy().strict});
    EXPECT_THROW(env_strict->select(probe(65)), SelectionError);
  }
}

TEST_F(Chain, EnvironmentIsParsedAndBadValuesNamed) {
  ::setenv("EJK_AUTOTUNE_POLICY", "autotune", 1);
  ::setenv("EJK_LOG_SELECTION", "all", 1);
  Policy p = Policy::from_env();
  EXPECT_EQ(p.autotune, AutotunePolicy::autotune);
  EXPECT_EQ(p.log, SelectionLog::all);
  EXPECT_EQ(p.strict, Tier::heuristic);
  ::setenv("EJK_AUTOTUNE_POLICY", "always", 1);
  try {
    Policy::from_env();
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "EJK_AUTOTUNE_POLICY")) << e.what();
    EXPECT_TRUE(contains(e.what(), "always")) << e.what();
  }
  ::unsetenv("EJK_AUTOTUNE_POLICY");
  ::unsetenv("EJK_LOG_SELECTION");
  ::setenv("EJK_STRICT", "cache", 1);
  EXPECT_THROW(make(), InvalidArgument);
  ::unsetenv("EJK_STRICT");
  EXPECT_EQ(Policy::from_env(), Policy{});
}

TEST_F(Chain, PolicyOverridesStackAndEndInAnyOrderAcrossThreads) {
  Policy base;
  auto outer = std::make_unique<ScopedPolicy>(PolicyOverride{.autotune = AutotunePolicy::autotune});
  auto inner = std::make_unique<ScopedPolicy>(PolicyOverride{.strict = Tier::profile});
  Policy both = effective_policy(base);
  EXPECT_EQ(both.autotune, AutotunePolicy::autotune);
  EXPECT_EQ(both.strict, Tier::profile);
  Policy seen;
  std::thread([&] { seen = effective_policy(base); }).join();
  EXPECT_EQ(seen, both) << "policy overrides apply to every thread";
  std::thread([&] { outer.reset(); }).join();  // the outer one ends first, from another thread
  Policy left = effective_policy(base);
  EXPECT_EQ(left.autotune, AutotunePolicy::heuristics);
  EXPECT_EQ(left.strict, Tier::profile);
  inner.reset();
  EXPECT_EQ(effective_policy(base).strict, Tier::heuristic);
}

TEST_F(Chain, OverlaysNestAndStayOnTheirThread) {
  auto ex = make();
  Invocation inv = probe(64);
  const std::string key = ex->key(inv);
  {
    ScopedOverlay kernel_wide("probe", cfg(8, 1));
    Selection s = ex->select(inv);
    EXPECT_EQ(s.tier, Tier::overlay);
    EXPECT_EQ(s.config, cfg(8, 1));
    EXPECT_EQ(s.reason, "overlay: scoped config for every probe");
    {
      ScopedOverlay by_key(ScopedOverlay::Map{{key, cfg(16, 2)}});
      Selection inner = ex->select(inv);
      EXPECT_EQ(inner.config, cfg(16, 2));
      EXPECT_EQ(inner.reason, "overlay: scoped config for this invocation");
      EXPECT_EQ(ex->select(probe(32)).config, cfg(8, 1)) << "other keys fall through to the outer overlay";
      Selection elsewhere;
      std::thread([&] { elsewhere = ex->select(inv); }).join();
      EXPECT_EQ(elsewhere.origin, Tier::heuristic) << "overlays are thread-local";
    }
    EXPECT_EQ(ex->select(inv).config, cfg(8, 1));
    ScopedOverlay too_big("probe", cfg(32, 1));
    EXPECT_THROW(ex->select(probe(16)), InvalidArgument) << "overlay configs are checked against the space";
  }
  EXPECT_NE(ex->select(inv).tier, Tier::overlay);
  EXPECT_EQ(ScopedOverlay::innermost(), nullptr);
}

TEST_F(Chain, KeyFollowsTheKernelVersion) {
  auto reg2 = test::probe_registry("probe/2");
  auto ex1 = make(), ex2 = make({}, reg2.get());
  Invocation inv = probe(64);
  EXPECT_NE(version(), version(reg2.get()));
  EXPECT_NE(ex1->key(inv), ex2->key(inv));
  ex1->persistent_cache()->put(entry_for(inv, cfg(16, 1)));
  EXPECT_EQ(ex1->select(inv).tier, Tier::persistent);
  EXPECT_EQ(ex2->select(inv).tier, Tier::heuristic) << "a changed kernel does not reuse old measurements";

  // Device sources enter the version too: an implementation that lists one more source.
  auto files = detail::embedded_files();
  if (!files.empty()) {
    auto reg3 = test::probe_registry("probe/1", {files.front()->key});
    EXPECT_NE(version(), version(reg3.get()));
    EXPECT_NE(ex1->key(inv), make({}, reg3.get())->key(inv));
  }
}

TEST_F(Chain, RunDispatchesAndSharesTheRememberedSelection) {
  auto ex = make();
  auto* impl = static_cast<const test::ProbeImpl*>(reg->implementations("probe").front());
  Invocation inv = probe(64);
  Tensor x(dev, {64}, DType::f32);
  auto first = ex->run(inv, std::span(&x, 1));
  auto second = ex->run(inv, std::span(&x, 1));
  auto third = ex->run(inv, std::span(&x, 1));
  EXPECT_EQ(first->tier, Tier::heuristic);
  EXPECT_EQ(second->tier, Tier::memory);
  EXPECT_EQ(second.get(), third.get()) << "a hit hands out the remembered selection, not a copy";
  EXPECT_EQ(impl->runs.load(), 3);
  Tensor wrong(dev, {63}, DType::f32);
  EXPECT_THROW(ex->run(inv, std::span(&wrong, 1)), InvalidArgument);
  Tensor elsewhere(test::fake_device(), {64}, DType::f32);
  EXPECT_THROW(ex->run(inv, std::span(&elsewhere, 1)), InvalidArgument);
}

TEST_F(Chain, LogsOneLinePerSelection) {
  auto ex = make();
  {
    ScopedPolicy log({.log = SelectionLog::chain});
    testing::internal::CaptureStderr();
    ex->select(probe(64));
    ex->select(probe(64));
    std::string out = testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
    EXPECT_TRUE(contains(out, "ejk: select probe " + probe(64).signature() + " on cpu -> heuristic: cpu rule")) << out;
  }
  {
    ScopedPolicy log({.log = SelectionLog::all});
    testing::internal::CaptureStderr();
    ex->select(probe(64));
    ex->select(probe(64));
    std::string out = testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;
    EXPECT_TRUE(contains(out, "-> memory: heuristic")) << out;
  }
}

// EJK_TRACE: every call a Chrome trace "complete" event with its selection and device time, the
// file a JSON array that parses once the last executor tracing into it is gone.
TEST_F(Chain, TracesEveryCallAsChromeEvents) {
  const std::string path = (dir / "trace-%p.json").string();
  ::setenv("EJK_TRACE", path.c_str(), 1);
  auto ex = make();
  auto second = make();
  ::unsetenv("EJK_TRACE");
  Tensor x(dev, {64}, DType::f32);
  for (int i = 0; i < 3; ++i) ex->run(probe(64), std::span(&x, 1));
  second->run(probe(64), std::span(&x, 1), cfg(8, 2));
  ex.reset();
  second.reset();
  const fs::path file = dir / ("trace-" + std::to_string(::getpid()) + ".json");
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  const nlohmann::json events = nlohmann::json::parse(in);  // throws unless closed and well formed
  ASSERT_TRUE(events.is_array());
  std::vector<nlohmann::json> calls;
  for (const auto& e : events)
    if (e.at("ph") == "X") calls.push_back(e);
  ASSERT_EQ(calls.size(), 4u) << events.dump(1);
  EXPECT_EQ(events.front().at("name"), "process_name");
  double last = -1;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto& e = calls[i];
    const auto& a = e.at("args");
    EXPECT_EQ(e.at("name"), probe(64).kernel);
    EXPECT_EQ(a.at("signature"), probe(64).signature());
    EXPECT_EQ(a.at("device"), "cpu");
    EXPECT_GE(e.at("ts").get<double>(), last);
    last = e.at("ts").get<double>();
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_GE(a.at("device_us").get<double>(), 0.0);
    EXPECT_FALSE(a.at("reason").get<std::string>().empty());
  }
  EXPECT_EQ(calls[0].at("args").at("tier"), "heuristic");
  EXPECT_EQ(calls[1].at("args").at("tier"), "memory");
  EXPECT_EQ(calls[3].at("args").at("tier"), "override");
  EXPECT_EQ(calls[3].at("args").at("config"), cfg(8, 2).canonical());
}

TEST_F(Chain, RecordsEveryCallFromSeveralProcesses) {
  fs::path trace = dir / "trace.jsonl";
  ::setenv("EJK_RECORD", trace.c_str(), 1);
  auto ex = make();
  std::vector<test::Child> children;
  for (int i = 0; i < 4; ++i) children.push_back(test::spawn({test::helper_path(), "record", "150"}));
  ::unsetenv("EJK_RECORD");
  Tensor x(dev, {64}, DType::f32);
  for (int i = 0; i < 3; ++i) ex->run(probe(64), std::span(&x, 1));
  for (auto& c : children) EXPECT_EQ(test::wait_for(c), 0);

  std::ifstream in(trace);
  std::string line;
  int ours = 0, theirs = 0;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);  // a torn line would throw here
    Invocation inv = Invocation::from_json(j);
    EXPECT_EQ(j.at("signature"), inv.signature());
    EXPECT_EQ(j.at("fingerprint"), dev->info().fingerprint());
    EXPECT_EQ(j.at("device"), "cpu");
    EXPECT_EQ(j.at("version"), version());
    EXPECT_EQ(j.at("scalars").at("alpha"), 1.5);
    std::string tier = j.at("tier");
    EXPECT_TRUE(tier == "heuristic" || tier == "memory") << line;
    (inv.args[0].shape[0] == 64 ? ours : theirs)++;
  }
  EXPECT_EQ(ours, 3);
  EXPECT_EQ(theirs, 600);
}

// A call that returns only tensors tells which config ran through a SelectionRecorder: every
// launch on its thread while it lives, nested recorders each, other threads' launches not.
TEST(SelectionRecorder, SeesEveryLaunchOfItsThreadWhileItLives) {
  ScopedPolicy neutral{{AutotunePolicy::heuristics, Tier::heuristic, SelectionLog::off}};
  Context ctx("cpu");
  const Tensor a = ctx.random({8, 4}, DType::f32, 1), b = ctx.random({4, 6}, DType::f32, 2);
  SelectionRecorder outer;
  Config first;
  {
    SelectionRecorder inner;
    (void)matmul(ctx, a, b);
    ASSERT_EQ(inner.made().size(), 1u);
    EXPECT_EQ(inner.made()[0].kernel, "matmul");
    ASSERT_TRUE(inner.made()[0].selection);
    first = inner.made()[0].selection->config;
    EXPECT_FALSE(first.values().empty());
  }
  MatmulOptions o;
  o.config = first;
  (void)matmul(ctx, a, b, o);
  std::thread([&] { (void)matmul(ctx, a, b); }).join();
  ASSERT_EQ(outer.made().size(), 2u);
  EXPECT_EQ(outer.made()[0].selection->config, first);
  EXPECT_EQ(outer.made()[1].selection->tier, Tier::override_);
  EXPECT_EQ(outer.made()[1].selection->config, first);
}

}  // namespace
}  // namespace ejk
