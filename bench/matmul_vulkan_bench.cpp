// matmul on every Vulkan device: f32 and f16, the scalar variant and, where the device has f16
// cooperative matrices, the coopmat variant; square sizes 512 to 4096 (to 1024 on CPU
// implementations such as lavapipe). Times are the device's timestamp queries (manual time); the
// TFLOP/s counter is 2*n^3 over that time. Each row runs the heuristic's config, or on discrete
// GPUs the fastest of it and EJK_BENCH_SEARCH (default 24) random configs of the same variant,
// named in the row's label. Several products per timed region keep launch latency out at small n.
#ifdef EJK_HAVE_VULKAN
#include <algorithm>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include <benchmark/benchmark.h>

#include "backends/vulkan/instance.hpp"
#include "ejk/ejk.hpp"
#include "matmul/matmul.hpp"

namespace {

using namespace ejk;

struct Setup {
  Context ctx;
  Tensor a, b, c;
  Invocation inv;
  Setup(const std::string& device, DType t, std::int64_t n)
      : ctx(device),
        a(ctx.random({n, n}, t)),
        b(ctx.random({n, n}, t)),
        c(ctx.empty({n, n}, t)),
        inv(kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 0)) {}
};

int reps_for(std::int64_t n) {
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  return static_cast<int>(std::clamp(4e9 / flops, 1.0, 32.0));
}

double time_config(Setup& s, const Config& cfg, int reps) {
  return s.ctx.device().time_ns([&] {
           for (int r = 0; r < reps; ++r) matmul(s.ctx, s.a, s.b, s.c, {.config = cfg});
         }) /
         reps;
}

int search_budget(const DeviceInfo& dev) {
  if (const char* env = std::getenv("EJK_BENCH_SEARCH")) return std::max(0, std::atoi(env));
  return dev.discrete ? 24 : 0;
}

// The heuristic's config of `variant`, or the fastest of it and a random sample of the variant.
Config choose(Setup& s, const std::string& variant) {
  static std::map<std::tuple<std::string, int, std::string, std::int64_t>, Config> memo;
  const DeviceInfo& dev = s.ctx.device().info();
  const std::int64_t n = s.a.dim(0);
  auto key = std::make_tuple(dev.id(), static_cast<int>(s.a.dtype()), variant, n);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  const auto& impl = Registry::global().implementation(s.inv, dev);
  Config h = impl.heuristic(s.inv, dev);
  if (h.text("variant") != variant) {
    // The scalar space does not depend on the dtype: f32's heuristic picks its scalar config.
    Invocation f32 = kernels::matmul::invocation({{n, n}, DType::f32}, {{n, n}, DType::f32}, {{n, n}, DType::f32}, false, false, 1, 0);
    h = impl.heuristic(f32, dev);
  }
  Config best = h;
  if (int budget = search_budget(dev); budget > 0) {
    std::vector<Config> pool;
    for (auto& c : impl.space(s.inv, dev).enumerate())
      if (c.text("variant") == variant) pool.push_back(std::move(c));
    std::mt19937 rng(1);
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.resize(std::min<std::size_t>(pool.size(), static_cast<std::size_t>(budget)));
    pool.insert(pool.begin(), h);
    const int reps = reps_for(n);
    double best_ns = 1e300;
    for (const auto& cfg : pool) {
      double ns = 1e300;
      try {
        for (int r = 0; r < 2; ++r) ns = std::min(ns, time_config(s, cfg, reps));
      } catch (const Error&) {
        continue;  // a config the driver refuses is no candidate
      }
      if (ns < best_ns) best_ns = ns, best = cfg;
    }
  }
  memo[key] = best;
  return best;
}

void run(benchmark::State& state, const std::string& device, DType t, const std::string& variant) {
  const std::int64_t n = state.range(0);
  Setup s(device, t, n);
  Config cfg = choose(s, variant);
  state.SetLabel(cfg.canonical());
  const int reps = reps_for(n);
  for (auto _ : state) state.SetIterationTime(time_config(s, cfg, reps) * 1e-9);
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["TFLOP/s"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

[[maybe_unused]] const bool registered = [] {
  for (const auto& d : list_devices()) {
    if (d.backend != Backend::vulkan) continue;
    const bool cpu = vulkan::physical_device(d.index).cpu;
    std::vector<std::pair<DType, std::string>> rows{{DType::f32, "scalar"}, {DType::f16, "scalar"}};
    const Invocation probe =
        kernels::matmul::invocation({{64, 64}, DType::f16}, {{64, 64}, DType::f16}, {{64, 64}, DType::f16}, false, false, 1, 0);
    if (Registry::global().implementation(probe, d).heuristic(probe, d).text("variant") == "coopmat")
      rows.emplace_back(DType::f16, "coopmat");
    for (const auto& [t, variant] : rows) {
      std::string name = "matmul_vulkan/" + d.id() + "/" + std::string(to_string(t)) + "/" + variant;
      auto* b = benchmark::RegisterBenchmark(name.c_str(), run, d.id(), t, variant);
      b->Unit(benchmark::kMillisecond)->UseManualTime();
      for (std::int64_t n = 512; n <= (cpu ? 1024 : 4096); n *= 2) b->Arg(n);
    }
  }
  return true;
}();

}  // namespace
#endif
