// Executor overhead on a cache hit (selection + dispatch) against a direct call of the
// implementation with a fixed config. Kernel time is excluded by construction: the "noop"
// kernel's implementation returns at once, so both sides pay the same (empty) kernel and the
// difference is the executor's own cost. A tiny CPU matmul shows the same difference with a
// real kernel in the way (there the kernel time is common to both sides and subtracts out).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "ejk/ejk.hpp"
#include "matmul/matmul.hpp"

namespace {

using namespace ejk;

// Shaped like matmul (three rank-2 tensors, two boolean options, scalars) so that hashing and
// comparing the invocation costs what it costs for a real kernel.
class NoopKernel final : public Kernel {
 public:
  std::string_view name() const override { return "noop"; }
  std::string_view host_version() const override { return "noop/1"; }
  std::vector<ArgDef> args() const override { return {{"a", Role::in}, {"b", Role::in}, {"c", Role::inout}}; }
  void check(const Invocation& inv) const override {
    if (inv.args.size() != 3) throw InvalidArgument("noop takes 3 arguments");
  }
  Vars vars(const Invocation& inv) const override { return {{"m", inv.args[2].shape[0]}}; }
  double flops(const Invocation&) const override { return 0; }
  double bytes(const Invocation&) const override { return 0; }
  HostArrays reference(const Invocation&, const HostArrays& a) const override { return {a[2]}; }
};

class NoopImpl final : public Implementation {
 public:
  std::string_view kernel() const override { return "noop"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return NoopKernel().args(); }
  ParamSpace space(const Invocation&, const DeviceInfo&) const override {
    ParamSpace s;
    s.param("tile", {8, 16, 32}).param("unroll", {1, 2});
    return s;
  }
  Config heuristic(const Invocation&, const DeviceInfo&) const override { return {{"tile", 16}, {"unroll", 1}}; }
  void run(const Invocation&, const Config& config, std::span<const Tensor>, Device&) const override {
    benchmark::DoNotOptimize(&config);
  }
};

struct Setup {
  std::filesystem::path dir;
  Registry registry;
  std::shared_ptr<Device> device = open_device("cpu");
  std::unique_ptr<Executor> executor;
  ScopedPolicy neutral{{AutotunePolicy::heuristics, Tier::heuristic, SelectionLog::off}};

  Setup() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ejk-bench-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    registry.add(std::make_shared<NoopKernel>());
    registry.add(std::make_shared<NoopImpl>());
    executor = std::make_unique<Executor>(
        device, ExecutorOptions{&registry, dir / "ejk.sqlite", std::vector<std::filesystem::path>{}});
  }
  ~Setup() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  static Setup& get() {
    static Setup s;
    return s;
  }
};

Invocation noop_invocation() {
  return kernels::matmul::invocation({{64, 64}, DType::f32}, {{64, 64}, DType::f32}, {{64, 64}, DType::f32}, false,
                                     false, 1.0, 0.0);
}

std::vector<Tensor> tensors_for(const Invocation& inv, const std::shared_ptr<Device>& device) {
  std::vector<Tensor> out;
  for (const auto& a : inv.args) out.emplace_back(device, a.shape, a.dtype);
  return out;
}

void BM_NoopDirect(benchmark::State& state) {
  auto& s = Setup::get();
  Invocation inv = noop_invocation();
  inv.kernel = "noop";
  auto args = tensors_for(inv, s.device);
  const Implementation& impl = s.registry.implementation(inv, s.device->info());
  Config fixed{{"tile", 16}, {"unroll", 1}};
  for (auto _ : state) impl.run(inv, fixed, args, *s.device);
}
BENCHMARK(BM_NoopDirect)->ThreadRange(1, 2);

void BM_NoopExecutorHit(benchmark::State& state) {
  auto& s = Setup::get();
  Invocation inv = noop_invocation();
  inv.kernel = "noop";
  auto args = tensors_for(inv, s.device);
  s.executor->run(inv, args);  // the first call walks the chain; every timed call hits memory
  for (auto _ : state) benchmark::DoNotOptimize(s.executor->run(inv, args));
  if (s.executor->run(inv, args)->tier != Tier::memory) state.SkipWithError("not a memory-cache hit");
}
BENCHMARK(BM_NoopExecutorHit)->ThreadRange(1, 2);

// select() returns a copy of the selection (config map and reason): what tools pay, not run().
void BM_NoopSelectCopy(benchmark::State& state) {
  auto& s = Setup::get();
  Invocation inv = noop_invocation();
  inv.kernel = "noop";
  s.executor->select(inv);
  for (auto _ : state) benchmark::DoNotOptimize(s.executor->select(inv));
}
BENCHMARK(BM_NoopSelectCopy);

// Building the invocation is the caller's cost, the same for both paths; shown for scale.
void BM_BuildMatmulInvocation(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(noop_invocation());
}
BENCHMARK(BM_BuildMatmulInvocation);

void BM_MatmulTinyDirect(benchmark::State& state) {
  auto& s = Setup::get();
  Context ctx(s.device);
  Invocation inv = noop_invocation();
  for (auto& a : inv.args) a.shape = {8, 8};
  auto args = tensors_for(inv, s.device);
  const Implementation& impl = Registry::global().implementation(inv, s.device->info());
  Config fixed = impl.heuristic(inv, s.device->info());
  for (auto _ : state) impl.run(inv, fixed, args, *s.device);
}
BENCHMARK(BM_MatmulTinyDirect);

void BM_MatmulTinyExecutor(benchmark::State& state) {
  auto& s = Setup::get();
  Executor ex(s.device, ExecutorOptions{nullptr, s.dir / "ejk.sqlite", std::vector<std::filesystem::path>{}});
  Invocation inv = noop_invocation();
  for (auto& a : inv.args) a.shape = {8, 8};
  auto args = tensors_for(inv, s.device);
  ex.run(inv, args);
  for (auto _ : state) benchmark::DoNotOptimize(ex.run(inv, args));
}
BENCHMARK(BM_MatmulTinyExecutor);

}  // namespace
