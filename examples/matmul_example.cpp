// Runs one matmul on the CPU through the executor, checks it against a plain loop, then tunes
// the same workload in the isolated worker process. Uses only the installed public API.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include <ejk/ejk.hpp>

int main() try {
  ejk::Context ctx("cpu");
  const std::int64_t m = 96, n = 80, k = 64;

  // The kernel builds its own invocation from named sizes, as recipes do.
  const ejk::Kernel& kernel = ejk::Registry::global().kernel("matmul");
  ejk::Invocation inv = kernel.from_sizes({{"m", m}, {"n", n}, {"k", k}}, ejk::DType::f32, nlohmann::json::object());

  const ejk::Tensor args[] = {ctx.random({m, k}, ejk::DType::f32, 1), ctx.random({k, n}, ejk::DType::f32, 2),
                              ctx.empty({m, n}, ejk::DType::f32)};
  auto selection = ctx.executor().run(inv, args);
  ctx.device().synchronize();

  const auto a = args[0].read(), b = args[1].read(), c = args[2].read();
  double worst = 0, largest = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double want = 0;
      for (std::int64_t p = 0; p < k; ++p) want += a[i * k + p] * b[p * n + j];
      worst = std::max(worst, std::abs(c[i * n + j] - want));
      largest = std::max(largest, std::abs(want));
    }
  const double error = worst / largest, tolerance = kernel.tolerance(inv);
  std::printf("matmul %lldx%lldx%lld on %s: relative error %.2e (tolerance %.1e), tier %s, config %s\n",
              static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
              ctx.device().info().id().c_str(), error, tolerance, std::string(ejk::to_string(selection->tier)).c_str(),
              selection->config.canonical().c_str());
  if (!(error <= tolerance)) {
    std::printf("FAILED: the result differs from the plain loop\n");
    return 1;
  }

  // A short tune in the worker process (ejk-worker, found beside the installed library).
  ejk::TuneOptions options;
  options.isolate = true;
  options.budget.evaluations = 3;
  options.timing.max_seconds = 0.02;
  options.timing.flush_bytes = 0;
  options.timing.rerank_top = 0;
  ejk::TuneResult result = ejk::tune(inv, ctx.device(), options);
  std::printf("tuned in the worker: %zu of %zu candidates measured, %s, winner %s\n", result.measurements.size(),
              result.space_size, result.tuned ? "validated" : "none passed", result.entry.config.canonical().c_str());
  return result.tuned ? 0 : 1;
} catch (const std::exception& e) {
  std::printf("FAILED: %s\n", e.what());
  return 1;
}
