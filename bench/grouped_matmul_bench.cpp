// grouped_matmul (mixture-of-experts expert layers) and its weight gradient grouped_matmul_tgmm
// on every device present, next to a plain matmul of the same total size ([m, k] x [k, n]) on the
// same device in the same run: the ratio says what grouping costs. Default shape: one
// Mixtral-like layer slice, m 8192 tokens in 8 groups of uneven size (a fixed random split), k
// 2048, n 1408, bf16. TFLOP/s counts 2 m k n per call. Timed on the device's clock (steady clock
// on the CPU).
//
// $EJK_BENCH_GMM_SHAPE="M,K,N,GROUPS" changes the shape (CPU-hosted drivers such as PoCL and
// lavapipe want a smaller one), $EJK_BENCH_GMM_DTYPE picks f32 | f16 | bf16,
// $EJK_BENCH_TUNE_EVALS the budget of the tuned rows (default 24; 0 skips them).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "ejk/ejk.hpp"
#include "grouped_matmul/grouped_matmul.hpp"

namespace {

using namespace ejk;
namespace gm = kernels::grouped_matmul;

struct Size {
  std::int64_t m = 8192, k = 2048, n = 1408, groups = 8;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_GMM_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.m >> sep >> s.k >> sep >> s.n >> sep >> s.groups;
    if (!in || s.m <= 0 || s.k <= 0 || s.n <= 0 || s.groups <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_GMM_SHAPE='") + env + "' (expected M,K,N,GROUPS)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_GMM_DTYPE");
  return env ? parse_dtype(env) : DType::bf16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

// Group sizes: sorted random cut points of m (what a router produces), the same on every device.
std::vector<double> group_sizes(const Size& s) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> cut(0, s.m);
  std::vector<std::int64_t> cuts(static_cast<std::size_t>(s.groups + 1));
  for (auto& c : cuts) c = cut(rng);
  cuts.front() = 0;
  cuts.back() = s.m;
  std::sort(cuts.begin(), cuts.end());
  std::vector<double> sizes;
  for (std::size_t g = 0; g + 1 < cuts.size(); ++g) sizes.push_back(static_cast<double>(cuts[g + 1] - cuts[g]));
  return sizes;
}

struct Tensors {
  Context ctx;
  Tensor lhs, rhs, sizes, out, grad, wgrad, w_plain, out_plain;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    lhs = ctx.random({s.m, s.k}, t, 1);
    rhs = ctx.random({s.groups, s.k, s.n}, t, 2);
    sizes = ctx.from({s.groups}, DType::i32, group_sizes(s));
    out = ctx.empty({s.m, s.n}, t);
    grad = ctx.random({s.m, s.n}, t, 3);
    wgrad = ctx.empty({s.groups, s.k, s.n}, t);
    w_plain = ctx.random({s.k, s.n}, t, 4);
    out_plain = ctx.empty({s.m, s.n}, t);
  }
  Invocation invocation(gm::Mode mode) const {
    return mode == gm::Mode::gmm ? gm::invocation(mode, lhs.spec(), rhs.spec(), sizes.spec(), out.spec())
                                 : gm::invocation(mode, lhs.spec(), grad.spec(), sizes.spec(), wgrad.spec());
  }
  void run(gm::Mode mode, const Config& c) {
    const GroupedMatmulOptions o{.trans_rhs = false, .check_group_sizes = false, .config = c};
    if (mode == gm::Mode::gmm) grouped_matmul(ctx, lhs, rhs, sizes, out, o);
    else grouped_matmul_tgmm(ctx, lhs, grad, sizes, wgrad, o);
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

std::string shape_label(const Tensors& t) {
  const Size s = size();
  return t.ctx.device().info().name + ", m" + std::to_string(s.m) + " k" + std::to_string(s.k) + " n" +
         std::to_string(s.n) + " groups" + std::to_string(s.groups) + " " + std::string(to_string(dtype()));
}

double flops() {
  const Size s = size();
  return 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n);
}

void grouped(benchmark::State& state, const std::string& device, gm::Mode mode, bool tuned) {
  Tensors& t = tensors(device);
  const Invocation inv = t.invocation(mode);
  const DeviceInfo& info = t.ctx.device().info();
  const Implementation& impl = Registry::global().implementation(inv, info);
  Config config = impl.heuristic(inv, info);
  std::string label = "heuristic " + config.canonical();
  if (tuned) {
    TuneOptions o;
    o.strategy = Strategy::model;
    o.budget.evaluations = tune_evals();
    o.seed = 1;
    o.timing.max_seconds = 0.5;
    const TuneResult r = tune(inv, t.ctx.device(), o);
    config = r.entry.config;
    label = (r.tuned ? "tuned " : "heuristic (no candidate passed) ") + config.canonical();
  }
  t.run(mode, config);  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns([&] { t.run(mode, config); }) * 1e-9);
  state.counters["TFLOP/s"] = benchmark::Counter(flops() * static_cast<double>(state.iterations()) / 1e12,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(shape_label(t) + ", " + label);
}

// The peer: one matmul [m, k] x [k, n] on the same device, the selector chain's config.
void plain(benchmark::State& state, const std::string& device) {
  Tensors& t = tensors(device);
  matmul(t.ctx, t.lhs, t.w_plain, t.out_plain);
  t.ctx.device().synchronize();
  for (auto _ : state)
    state.SetIterationTime(t.ctx.device().time_ns([&] { matmul(t.ctx, t.lhs, t.w_plain, t.out_plain); }) * 1e-9);
  state.counters["TFLOP/s"] = benchmark::Counter(flops() * static_cast<double>(state.iterations()) / 1e12,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(shape_label(t) + ", plain matmul of the same total size");
}

// Per device: BM_grouped_matmul/<device>/{gmm,tgmm}/{heuristic,tuned} and .../matmul_peer.
const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "grouped_matmul_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const std::string base = "BM_grouped_matmul/" + dev;
    for (gm::Mode mode : {gm::Mode::gmm, gm::Mode::tgmm})
      for (bool tuned : {false, true}) {
        if (tuned && tune_evals() <= 0) continue;
        const std::string name = base + (mode == gm::Mode::gmm ? "/gmm" : "/tgmm") + (tuned ? "/tuned" : "/heuristic");
        benchmark::RegisterBenchmark(name.c_str(), [dev, mode, tuned](benchmark::State& s) { grouped(s, dev, mode, tuned); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
    benchmark::RegisterBenchmark((base + "/matmul_peer").c_str(), [dev](benchmark::State& s) { plain(s, dev); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  }
  return 0;
}();

}  // namespace
