// Flash attention on the GPU backends (every opencl:N and vulkan:N device present), at the
// shape of ../PERF.md's target: B4 H16 S4096 D128, f16, forward and backward, with and without
// causal masking. Each case runs with the heuristic config and with the config a short model
// tune picks (checked against the heuristic's output, as the tuner does for large problems).
// Timed on the device's clock. FLOPs: 4 B H Sq Sk D forward (half when causal), 2.5x that
// backward. The peer, PyTorch's scaled_dot_product_attention, is measured in the same run by
// scripts/device/torch_peers.py.
//
// $EJK_BENCH_FA_SHAPE="B,H,S,D" shrinks the shape (a CPU-hosted driver needs that),
// $EJK_BENCH_FA_DTYPE picks f32 | f16 | bf16, $EJK_BENCH_TUNE_EVALS the tune's budget
// (default 24; 0 skips the tuned rows).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "ejk/ejk.hpp"
#include "flash_attention/flash_attention.hpp"

namespace {

using namespace ejk;
namespace fa = kernels::flash_attention;

struct Shape4 {
  std::int64_t b = 4, h = 16, s = 4096, d = 128;
};

Shape4 shape() {
  Shape4 s;
  if (const char* env = std::getenv("EJK_BENCH_FA_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.b >> sep >> s.h >> sep >> s.s >> sep >> s.d;
    if (!in || s.b <= 0 || s.h <= 0 || s.s <= 0 || s.d <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_FA_SHAPE='") + env + "' (expected B,H,S,D)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_FA_DTYPE");
  return env ? parse_dtype(env) : DType::f16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

struct Case {
  std::string device;
  bool backward = false, causal = false, tuned = false;
};

// Inputs and outputs of one device, made once.
struct Tensors {
  Context ctx;
  Tensor q, k, v, out, lse, dout, dq, dk, dv;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Shape4 s = shape();
    const DType t = dtype();
    const ejk::Shape qs{s.b, s.s, s.h, s.d};
    q = ctx.random(qs, t, 1);
    k = ctx.random(qs, t, 2);
    v = ctx.random(qs, t, 3);
    dout = ctx.random(qs, t, 4);
    AttentionOutput r = flash_attention(ctx, q, k, v);
    out = r.out;
    lse = r.lse;
    AttentionGrads g = flash_attention_bwd(ctx, q, k, v, out, dout, lse);
    dq = g.dq;
    dk = g.dk;
    dv = g.dv;
  }

  Invocation invocation(bool backward, bool causal) const {
    fa::Options o;
    o.causal = causal;
    std::vector<TensorSpec> a;
    if (!backward) {
      a = {q.spec(), k.spec(), v.spec()};
      for (int i = 0; i < 6; ++i) a.push_back(fa::absent());
      a.push_back(out.spec());
      a.push_back(lse.spec());
      return fa::forward_invocation(a, o);
    }
    a = {q.spec(), k.spec(), v.spec(), out.spec(), dout.spec(), lse.spec()};
    for (int i = 0; i < 6; ++i) a.push_back(fa::absent());
    for (const Tensor* x : {&dq, &dk, &dv}) a.push_back(x->spec());
    a.push_back(fa::absent());
    a.push_back(fa::absent());
    return fa::backward_invocation(a, o);
  }

  void run(bool backward, bool causal, const Config& config) {
    AttentionOptions o{.causal = causal};
    o.config = config;
    if (backward) {
      AttentionGrads g{dq, dk, dv, {}, {}};
      flash_attention_bwd(ctx, q, k, v, out, dout, lse, g, o);
    } else {
      flash_attention(ctx, q, k, v, out, lse, o);
    }
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

Config choose(Tensors& t, const Case& c, std::string& label) {
  const Invocation inv = t.invocation(c.backward, c.causal);
  const DeviceInfo& info = t.ctx.device().info();
  const Implementation& impl = Registry::global().implementation(inv, info);
  if (!c.tuned) {
    label = "heuristic";
    return impl.heuristic(inv, info);
  }
  TuneOptions o;
  o.strategy = Strategy::model;
  o.budget.evaluations = tune_evals();
  o.seed = 1;
  o.timing.max_seconds = 0.5;
  const TuneResult r = tune(inv, t.ctx.device(), o);
  label = (r.tuned ? "tuned " : "heuristic (no candidate passed) ") + r.entry.config.canonical();
  return r.entry.config;
}

void run_case(benchmark::State& state, const Case& c) {
  Tensors& t = tensors(c.device);
  std::string label;
  const Config config = choose(t, c, label);
  t.run(c.backward, c.causal, config);  // compile and warm up outside the timed loop
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns([&] { t.run(c.backward, c.causal, config); }) * 1e-9);
  const Shape4 s = shape();
  const double fwd = 4.0 * s.b * s.h * s.s * s.s * s.d / (c.causal ? 2.0 : 1.0);
  const double flops = (c.backward ? 2.5 : 1.0) * fwd * static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = benchmark::Counter(flops / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel(t.ctx.device().info().name + ", " + std::string(to_string(dtype())) + ", " + label);
}

// Registered before main: one row per GPU-backend device, direction, mask and config source.
const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices())
      if (d.backend != Backend::cpu) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_gpu_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices)
    for (bool backward : {false, true})
      for (bool causal : {false, true})
        for (bool tuned : {false, true}) {
          if (tuned && tune_evals() <= 0) continue;
          const Case c{dev, backward, causal, tuned};
          const std::string name = "BM_flash_attention_gpu/" + dev + (backward ? "/bwd" : "/fwd") +
                                   (causal ? "/causal" : "") + (tuned ? "/tuned" : "/heuristic");
          benchmark::RegisterBenchmark(name.c_str(), [c](benchmark::State& s) { run_case(s, c); })
              ->UseManualTime()
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.2);
        }
  return 0;
}();

}  // namespace
