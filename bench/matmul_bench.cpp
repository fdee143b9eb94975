// CPU matmul: ejk's native GEMM (heuristic config and the best of a sweep of its space) next to
// OpenBLAS cblas_sgemm on the same cores, in the same run. GFLOP/s counters, median of repetitions.
#include <algorithm>
#include <map>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "ejk/ejk.hpp"
#include "matmul/matmul.hpp"

namespace {

using namespace ejk;

Config best_of_sweep(Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c) {
  static std::map<std::int64_t, Config> memo;
  auto it = memo.find(a.dim(0));
  if (it != memo.end()) return it->second;
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 0);
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  Config best = impl.heuristic(inv, ctx.device().info());
  double best_ns = 1e300;
  for (const auto& cfg : impl.space(inv, ctx.device().info()).enumerate()) {
    if (cfg.text("algo") != "native") continue;  // the native kernel alone, against OpenBLAS
    double ns = 1e300;
    for (int r = 0; r < 2; ++r)
      ns = std::min(ns, ctx.device().time_ns([&] { matmul(ctx, a, b, c, {.config = cfg}); }));
    if (ns < best_ns) best_ns = ns, best = cfg;
  }
  memo[a.dim(0)] = best;
  return best;
}

void report(benchmark::State& state, std::int64_t n) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void BM_ejk_cpu_heuristic(benchmark::State& state) {
  Context ctx("cpu");
  const std::int64_t n = state.range(0);
  Tensor a = ctx.random({n, n}, DType::f32), b = ctx.random({n, n}, DType::f32), c = ctx.empty({n, n}, DType::f32);
  for (auto _ : state) matmul(ctx, a, b, c);
  report(state, n);
}

void BM_ejk_cpu_swept(benchmark::State& state) {
  Context ctx("cpu");
  const std::int64_t n = state.range(0);
  Tensor a = ctx.random({n, n}, DType::f32), b = ctx.random({n, n}, DType::f32), c = ctx.empty({n, n}, DType::f32);
  Config cfg = best_of_sweep(ctx, a, b, c);
  state.SetLabel(cfg.canonical());
  for (auto _ : state) matmul(ctx, a, b, c, {.config = cfg});
  report(state, n);
}

void BM_openblas_sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 7) * 0.1f, b[i] = static_cast<float>(i % 5) * 0.1f;
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n);
  report(state, n);
}

}  // namespace

BENCHMARK(BM_ejk_cpu_heuristic)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ejk_cpu_swept)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_openblas_sgemm)->Arg(256)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();
