// OpenCL matmul: ejk's xgemm next to CLBlast's GEMM on the same cl_device, queue and buffers,
// in the same run. Square f32 and f16 products from 512 to 4096; time on the device clock
// (profiling events) reported as manual time, GFLOP/s as a rate counter.
//
// The ejk config is tuned in the benchmark's setup: a coordinate sweep of the kernel's space
// starting from its heuristic (every value of one parameter at a time, keeping the fastest,
// two passes) at 1024, once per device and dtype; each size then runs the faster of that
// winner and the size's own heuristic config. The label names the config. EJK_BENCH_SWEEP=0
// benchmarks the heuristic config of each size instead.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <benchmark/benchmark.h>
#include <clblast.h>

#include "backends/opencl/opencl_device.hpp"
#include "ejk/ejk.hpp"
#include "matmul/matmul.hpp"

namespace {

using namespace ejk;

Invocation square(std::int64_t n, DType t) {
  return kernels::matmul::invocation({{n, n}, t}, {{n, n}, t}, {{n, n}, t}, false, false, 1, 0);
}

// Parameters whose `when` no longer holds are dropped, ones that now apply get their first value.
Config normalize(const ParamSpace& space, const Config& c) {
  Config out;
  Vars vars = space.bound();
  for (const auto& p : space.params()) {
    if (p.when && !p.when->eval(vars)) continue;
    Value v = c.has(p.name) ? c.values().find(p.name)->second : p.values.front();
    out.set(p.name, v);
    vars[p.name] = v;
  }
  return out;
}

double time_config(Context& ctx, const Implementation& impl, const Invocation& inv, const Config& cfg,
                   std::span<const Tensor> args, int reps) {
  impl.run(inv, cfg, args, ctx.device());  // compile and warm up
  double best = 1e300;
  for (int r = 0; r < reps; ++r)
    best = std::min(best, ctx.device().time_ns([&] { impl.run(inv, cfg, args, ctx.device()); }));
  return best;
}

Config tuned(Context& ctx, std::int64_t n, DType t) {
  static std::map<std::string, Config> memo;
  const auto& info = ctx.device().info();
  const char* env = std::getenv("EJK_BENCH_SWEEP");
  if (env && std::string(env) == "0") {
    Invocation inv = square(n, t);
    return Registry::global().implementation(inv, info).heuristic(inv, info);
  }
  const std::int64_t sweep_n = 1024;
  const std::string key = info.id() + "/" + std::string(to_string(t));
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  Invocation inv = square(sweep_n, t);
  const auto& impl = Registry::global().implementation(inv, info);
  Config best = impl.heuristic(inv, info);
  ParamSpace space = impl.space(inv, info);
  Tensor a = ctx.random({sweep_n, sweep_n}, t), b = ctx.random({sweep_n, sweep_n}, t);
  Tensor c = ctx.random({sweep_n, sweep_n}, t);
  const Tensor args[] = {a, b, c};
  double best_ns = time_config(ctx, impl, inv, best, args, 2);
  std::set<std::string> tried{best.canonical()};
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& p : space.params())
      for (const auto& v : p.values) {
        Config cand = best;
        cand.set(p.name, v);
        cand = normalize(space, cand);
        if (!tried.insert(cand.canonical()).second || !space.admits(cand)) continue;
        try {
          double ns = time_config(ctx, impl, inv, cand, args, 2);
          if (ns < best_ns) best_ns = ns, best = cand;
        } catch (const DeviceError&) {
          // A config the device refuses (compile, resources) is simply not a candidate.
        }
      }
  memo[key] = best;
  return best;
}

void report(benchmark::State& state, std::int64_t n, double total_ns) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n) * static_cast<double>(n) *
                                                     static_cast<double>(n) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["ms"] = total_ns / 1e6 / static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
}

void bench_ejk(benchmark::State& state, const std::string& device, DType t, std::int64_t n) {
  Context ctx(device);
  Config cfg = tuned(ctx, n, t);
  Invocation inv = square(n, t);
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  Tensor a = ctx.random({n, n}, t), b = ctx.random({n, n}, t), c = ctx.random({n, n}, t);
  const Tensor args[] = {a, b, c};
  Config own = impl.heuristic(inv, ctx.device().info());
  if (own != cfg && time_config(ctx, impl, inv, own, args, 1) < time_config(ctx, impl, inv, cfg, args, 1)) cfg = own;
  impl.run(inv, cfg, args, ctx.device());  // compile outside the timed loop
  ctx.device().synchronize();
  state.SetLabel(cfg.canonical());
  double total = 0;
  for (auto _ : state) {
    double ns = ctx.device().time_ns([&] { impl.run(inv, cfg, args, ctx.device()); });
    total += ns;
    state.SetIterationTime(ns / 1e9);
  }
  report(state, n, total);
}

template <class T>
clblast::StatusCode clblast_gemm(cl_mem a, cl_mem b, cl_mem c, std::size_t n, cl_command_queue* queue,
                                 cl_event* event) {
  T one, zero;
  if constexpr (std::is_same_v<T, float>) {
    one = 1.f, zero = 0.f;
  } else {
    one = 0x3c00, zero = 0;  // f16 bit patterns of 1 and 0
  }
  return clblast::Gemm<T>(clblast::Layout::kRowMajor, clblast::Transpose::kNo, clblast::Transpose::kNo, n, n, n, one,
                          a, 0, n, b, 0, n, zero, c, 0, n, queue, event);
}

template <class T>
void bench_clblast(benchmark::State& state, const std::string& device, DType t, std::int64_t n) {
  Context ctx(device);
  auto& dev = opencl::opencl_device(ctx.device());
  Tensor a = ctx.random({n, n}, t), b = ctx.random({n, n}, t), c = ctx.random({n, n}, t);
  cl_command_queue queue = dev.queue();
  const auto sn = static_cast<std::size_t>(n);
  cl_mem am = opencl::mem_of(a.buffer()), bm = opencl::mem_of(b.buffer()), cm = opencl::mem_of(c.buffer());
  // The first call compiles CLBlast's kernels for this device.
  cl_event warm = nullptr;
  auto status = clblast_gemm<T>(am, bm, cm, sn, &queue, &warm);
  if (status != clblast::StatusCode::kSuccess) {
    state.SkipWithError(("CLBlast GEMM failed with status " + std::to_string(static_cast<int>(status)) +
                         (status == clblast::StatusCode::kNoHalfPrecision ? " (device has no cl_khr_fp16)" : ""))
                            .c_str());
    return;
  }
  clReleaseEvent(warm);
  dev.synchronize();
  double total = 0;
  for (auto _ : state) {
    double ns = dev.time_ns([&] {
      // CLBlast may enqueue helper kernels before the GEMM and returns the last event only:
      // a marker before it makes the timed span cover them all.
      cl_event start = nullptr, done = nullptr;
      opencl::check(clEnqueueMarkerWithWaitList(queue, 0, nullptr, &start), "clEnqueueMarkerWithWaitList");
      dev.record(start);
      clReleaseEvent(start);
      clblast_gemm<T>(am, bm, cm, sn, &queue, &done);
      dev.record(done);
      clReleaseEvent(done);
    });
    total += ns;
    state.SetIterationTime(ns / 1e9);
  }
  report(state, n, total);
}

int register_all() {
  for (const auto& d : list_devices()) {
    if (d.backend != Backend::opencl) continue;
    for (DType t : {DType::f32, DType::f16})
      for (std::int64_t n : {512, 1024, 2048, 4096}) {
        const std::string suffix = d.id() + "/" + std::string(to_string(t)) + "/" + std::to_string(n);
        benchmark::RegisterBenchmark(("matmul_opencl/ejk/" + suffix).c_str(),
                                     [id = d.id(), t, n](benchmark::State& s) { bench_ejk(s, id, t, n); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
        auto peer = t == DType::f32 ? +[](benchmark::State& s, std::string id, DType dt, std::int64_t nn) {
          bench_clblast<float>(s, id, dt, nn);
        }
                                    : +[](benchmark::State& s, std::string id, DType dt, std::int64_t nn) {
                                        bench_clblast<cl_half>(s, id, dt, nn);
                                      };
        benchmark::RegisterBenchmark(("matmul_opencl/clblast/" + suffix).c_str(),
                                     [id = d.id(), t, n, peer](benchmark::State& s) { peer(s, id, t, n); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
  }
  return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace
