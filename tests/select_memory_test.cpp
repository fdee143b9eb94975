// The memory cache under concurrent threads (also run under ThreadSanitizer: the "tsan" preset).
#include <barrier>
#include <random>
#include <thread>

#include "select_support.hpp"
#include "support.hpp"

namespace ejk {
namespace {

using test::cfg;
using test::probe;

std::optional<TuneOutcome> tuned(std::int64_t n) {
  TuneOutcome out;
  out.entry.config = cfg(n >= 16 ? 16 : 8, 2);
  out.entry.stats = {300, 5, 290, 7};
  out.entry.provenance.strategy = "fake";
  out.measurements.push_back(test::meas(out.entry.config, Status::ok, out.entry.stats, ""));
  return out;
}

TEST(SelectMemory, ThreadsHammeringTheCacheSeeConsistentAnswers) {
  test::TempDir dir;
  auto reg = test::probe_registry();
  auto dev = test::fake_device();
  std::atomic<int> tuner_calls{0};
  set_autotuner([&](const Invocation& inv, const Implementation&, const std::shared_ptr<Device>&) {
    ++tuner_calls;
    return tuned(inv.args[0].shape[0]);
  });
  ScopedPolicy neutral({AutotunePolicy::heuristics, Tier::heuristic, SelectionLog::off});
  Executor ex(dev, {reg.get(), dir / "ejk.sqlite", std::vector<std::filesystem::path>{}});

  constexpr int threads = 6, iterations = 2500, keys = 40;
  std::atomic<int> done{0}, bad{0}, clears{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      std::vector<Tensor> xs;
      for (int k = 0; k < keys; ++k) xs.emplace_back(dev, Shape{8 + k}, DType::f32);
      for (int i = 0; i < iterations; ++i) {
        int k = static_cast<int>(rng() % keys);
        std::int64_t n = 8 + k;
        Invocation inv = probe(n);
        std::optional<ScopedOverlay> overlay;
        if (t < 2 && i % 7 == 0) overlay.emplace("probe", cfg(2, 1));
        std::shared_ptr<const Selection> s;
        if (i % 2) s = ex.run(inv, std::span(&xs[static_cast<std::size_t>(k)], 1));
        else s = std::make_shared<const Selection>(ex.select(inv));
        bool ok = s->config.get("tile") <= n;
        if (overlay) ok = ok && s->tier == Tier::overlay && s->config == cfg(2, 1);
        else ok = ok && s->tier != Tier::overlay && s->tier != Tier::override_ && s->tier != Tier::profile;
        if (s->origin == Tier::autotune || s->origin == Tier::persistent) ok = ok && s->config == tuned(n)->entry.config;
        if (s->origin == Tier::heuristic) ok = ok && s->config == cfg(4, 1);
        if (!ok) ++bad;
      }
      ++done;
    });
  // Meanwhile policies switch and the cache is cleared, from another thread.
  std::thread churn([&] {
    while (done < threads) {
      {
        ScopedPolicy allow({.autotune = AutotunePolicy::autotune});
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      ex.clear_memory();
      ++clears;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  for (auto& th : pool) th.join();
  churn.join();
  set_autotuner({});
  EXPECT_EQ(bad, 0);
  EXPECT_GT(clears, 0);
  // A tuned key lands in the persistent cache, which answers after every clear: each key is tuned at most once.
  EXPECT_LE(tuner_calls, keys);
  EXPECT_EQ(ex.persistent_cache()->size(), static_cast<std::size_t>(tuner_calls.load()));
}

TEST(SelectMemory, ConcurrentFirstCallsTuneAKeyOnce) {
  test::TempDir dir;
  auto reg = test::probe_registry();
  auto dev = test::fake_device();
  std::atomic<int> tuner_calls{0};
  set_autotuner([&](const Invocation& inv, const Implementation&, const std::shared_ptr<Device>&) {
    ++tuner_calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow tune: the others must wait for it
    return tuned(inv.args[0].shape[0]);
  });
  ScopedPolicy allow({AutotunePolicy::autotune, Tier::heuristic, SelectionLog::off});
  Executor ex(dev, {reg.get(), dir / "ejk.sqlite", std::vector<std::filesystem::path>{}});
  constexpr int threads = 8;
  std::barrier start(threads);
  std::vector<Selection> got(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      got[static_cast<std::size_t>(t)] = ex.select(probe(64));
    });
  for (auto& th : pool) th.join();
  set_autotuner({});
  EXPECT_EQ(tuner_calls, 1);
  int fresh = 0;
  for (const auto& s : got) {
    EXPECT_EQ(s.config, cfg(16, 2));
    EXPECT_EQ(s.origin, Tier::autotune);
    fresh += s.tier == Tier::autotune;
  }
  EXPECT_EQ(fresh, 1) << "one thread tuned, the others were answered from memory";
}

}  // namespace
}  // namespace ejk
