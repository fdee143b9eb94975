// Linear attention: the chunked form (gla, lightning_attention) against the token-by-token
// recurrence (recurrent) on the same input, forward and backward, on every device present (or
// those named in $EJK_BENCH_LA_DEVICES, e.g. "cpu,opencl:0"). Default shape B1 T4096 H8 K=V=128,
// GLA's per-key-channel gate gk (log-decays in [-0.3, -0.01)), f32. Each row runs the kernel's
// heuristic config; the chunked rows' "x_recurrent" counter is the token loop's time on the same
// input and device divided by theirs (fastest of three each, measured in the same process: the
// peer ratio), "x_recurrent_cpu" the same ratio of process CPU time (for CPU-hosted drivers on
// a shared host, where wall time counts preemption).
// "TFLOP/s" counts the recurrence's 4 K V per token and head (3x backward) for every form.
// Timed on the device's clock (steady clock on the CPU).
//
// $EJK_BENCH_LA_SHAPE="B,T,H,D" changes the shape, $EJK_BENCH_LA_DTYPE picks f32 | f16 | bf16,
// $EJK_BENCH_LA_GATES the gates of gla/recurrent (comma list of g, g_gamma, gk, gv; "none").
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <random>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "ejk/ejk.hpp"
#include "linear_attention/linear_attention.hpp"

namespace {

using namespace ejk;
namespace la = kernels::linear_attention;

struct Size {
  std::int64_t batch = 1, seq = 4096, heads = 8, dim = 128;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_LA_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.batch >> sep >> s.seq >> sep >> s.heads >> sep >> s.dim;
    if (!in || s.batch <= 0 || s.seq <= 0 || s.heads <= 0 || s.dim <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_LA_SHAPE='") + env + "' (expected B,T,H,D)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_LA_DTYPE");
  return env ? parse_dtype(env) : DType::f32;
}

std::string gates() {
  const char* env = std::getenv("EJK_BENCH_LA_GATES");
  return env ? env : "gk";
}

bool has_gate(const std::string& name) {
  std::istringstream in(gates());
  for (std::string g; std::getline(in, g, ',');)
    if (g == name) return true;
  return false;
}

std::vector<double> log_decays(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(-0.3, -0.01);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

struct Tensors {
  Context ctx;
  Tensor q, k, v, dout;
  LinearAttentionOptions gated, lightning;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    const Shape qs{s.batch, s.seq, s.heads, s.dim};
    q = ctx.random(qs, t, 1);
    k = ctx.random(qs, t, 2);
    v = ctx.random(qs, t, 3);
    dout = ctx.random(qs, t, 4);
    const std::int64_t tokens = s.batch * s.seq * s.heads;
    if (has_gate("g")) gated.g = ctx.from({s.batch, s.seq, s.heads}, t, log_decays(tokens, 5));
    if (has_gate("g_gamma")) gated.g_gamma = ctx.from({s.heads}, t, log_decays(s.heads, 6));
    if (has_gate("gk")) gated.gk = ctx.from(qs, t, log_decays(tokens * s.dim, 7));
    if (has_gate("gv")) gated.gv = ctx.from(qs, t, log_decays(tokens * s.dim, 8));
    lightning.layer_idx = 3;
    lightning.num_layers = 24;
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

enum class Kind { recurrent, gla, lightning };

// One call with the heuristic config (the executor's choice when nothing is cached).
std::function<void()> call(Tensors& t, Kind kind, bool backward) {
  const auto& o = kind == Kind::lightning ? t.lightning : t.gated;
  return [&t, kind, backward, &o] {
    if (!backward) {
      if (kind == Kind::recurrent) (void)recurrent(t.ctx, t.q, t.k, t.v, o);
      else if (kind == Kind::gla) (void)gla(t.ctx, t.q, t.k, t.v, o);
      else (void)lightning_attention(t.ctx, t.q, t.k, t.v, o);
    } else {
      if (kind == Kind::recurrent) (void)recurrent_bwd(t.ctx, t.q, t.k, t.v, t.dout, o);
      else if (kind == Kind::gla) (void)gla_bwd(t.ctx, t.q, t.k, t.v, t.dout, o);
      else (void)lightning_attention_bwd(t.ctx, t.q, t.k, t.v, t.dout, o);
    }
  };
}

// The fastest of a few runs (device clock) and the process's CPU time per run (every thread:
// on a shared host the wall clock counts time the threads spent preempted).
struct Timing {
  double min_ns = 0, cpu_ns = 0;
};
Timing measure(Device& d, const std::function<void()>& fn, int reps) {
  Timing t{1e300, 0};
  const std::clock_t c0 = std::clock();
  for (int i = 0; i < reps; ++i) t.min_ns = std::min(t.min_ns, d.time_ns(fn));
  t.cpu_ns = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC * 1e9 / reps;
  return t;
}

double flops(Kind kind, bool backward) {
  const Size s = size();
  const double per = 4.0 * static_cast<double>(s.dim * s.dim) * static_cast<double>(s.batch * s.seq * s.heads);
  (void)kind;
  return backward ? 3.0 * per : per;
}

void run(benchmark::State& state, const std::string& device, Kind kind, bool backward) {
  Tensors& t = tensors(device);
  auto fn = call(t, kind, backward);
  Device& d = t.ctx.device();
  fn();  // compile and warm up outside the timed loop
  d.synchronize();
  for (auto _ : state) state.SetIterationTime(d.time_ns(fn) * 1e-9);
  const double n = static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = benchmark::Counter(flops(kind, backward) * n / 1e12, benchmark::Counter::kIsRate);
  if (kind != Kind::recurrent) {
    // The peer: the token loop on the same input, timed here, paired with this form.
    auto peer = call(t, Kind::recurrent, backward);
    peer();
    const Timing mine = measure(d, fn, 3), theirs = measure(d, peer, 3);
    state.counters["x_recurrent"] = theirs.min_ns / mine.min_ns;
    // The same ratio of process CPU time: what counts on a busy host for CPU-hosted drivers
    // (cpu, PoCL, lavapipe run in this process); meaningless for a GPU.
    state.counters["x_recurrent_cpu"] = theirs.cpu_ns / mine.cpu_ns;
  }
  const Size s = size();
  state.SetLabel(d.info().name + ", B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " H" +
                 std::to_string(s.heads) + " D" + std::to_string(s.dim) + " " + std::string(to_string(dtype())) +
                 (kind == Kind::lightning ? ", g_gamma (layer 3 of 24)" : ", gates " + gates()));
}

std::vector<std::string> devices() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("EJK_BENCH_LA_DEVICES")) {
    std::istringstream in(env);
    for (std::string d; std::getline(in, d, ',');)
      if (!d.empty()) out.push_back(d);
    return out;
  }
  try {
    for (const auto& d : list_devices()) out.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "linear_attention_bench: no devices: %s\n", e.what());
  }
  return out;
}

const int registered = [] {
  for (const auto& dev : devices())
    for (bool backward : {false, true})
      for (auto [kind, name] : {std::pair{Kind::recurrent, "recurrent"}, {Kind::gla, "gla"}, {Kind::lightning, "lightning"}}) {
        const std::string row = std::string("BM_linear_attention/") + dev + "/" + name + (backward ? "_bwd" : "");
        benchmark::RegisterBenchmark(row.c_str(), [dev, kind, backward](benchmark::State& s) { run(s, dev, kind, backward); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
  return 0;
}();

}  // namespace
