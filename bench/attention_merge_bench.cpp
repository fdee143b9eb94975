// attention_merge (an accumulator merged with a partial attention result by log-sum-exp, in
// place) on every device present, for the dtype pairs ring attention uses: an f32 accumulator
// with an f32 or bf16 part, and the final conversion of the f32 accumulator into a bf16 out.
// Bandwidth-bound: "GB/s" counts the kernel's bytes per call (out read and written, part read,
// lse read and written, part_lse read). The peer is a device-side copy of out on the same device
// in the same run ("copy GB/s" counts bytes read + written). Timed on the device's clock (steady
// clock on the CPU).
//
// $EJK_BENCH_MERGE_SHAPE="B,S,H,D" changes the shape (default 2,1024,32,128), $EJK_BENCH_TUNE_EVALS
// the budget of the tuned rows (default 24; 0 skips them).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "attention_merge/attention_merge.hpp"
#include "ejk/ejk.hpp"

namespace {

using namespace ejk;
namespace am = kernels::attention_merge;

struct Size {
  std::int64_t batch = 2, seq = 1024, heads = 32, dim = 128;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_MERGE_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.batch >> sep >> s.seq >> sep >> s.heads >> sep >> s.dim;
    if (!in || s.batch <= 0 || s.seq <= 0 || s.heads <= 0 || s.dim <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_MERGE_SHAPE='") + env + "' (expected B,S,H,D)");
  }
  return s;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

struct Pair {
  DType out, part;
};
const Pair pairs[] = {{DType::f32, DType::f32}, {DType::f32, DType::bf16}, {DType::bf16, DType::f32}};

struct Tensors {
  Context ctx;
  std::map<int, Tensor> outs, parts;  // by dtype
  Tensor lse, part_lse, copy;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const Shape x{s.batch, s.seq, s.heads, s.dim}, l{s.batch, s.heads, s.seq};
    for (DType t : {DType::f32, DType::bf16}) {
      outs[static_cast<int>(t)] = ctx.random(x, t, 1);
      parts[static_cast<int>(t)] = ctx.random(x, t, 2);
    }
    // Finite log-sum-exps: every row merges (repeated merges keep them finite, out bounded).
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> d(-4, 4);
    std::vector<double> a(static_cast<std::size_t>(numel(l))), c(a.size());
    for (auto& v : a) v = d(rng);
    for (auto& v : c) v = d(rng);
    lse = ctx.from(l, DType::f32, a);
    part_lse = ctx.from(l, DType::f32, c);
    copy = ctx.empty(x, DType::f32);
  }
  const Tensor& out(DType t) const { return outs.at(static_cast<int>(t)); }
  const Tensor& part(DType t) const { return parts.at(static_cast<int>(t)); }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

void merge(benchmark::State& state, const std::string& device, Pair pair, bool tuned) {
  Tensors& t = tensors(device);
  const Tensor &out = t.out(pair.out), &part = t.part(pair.part);
  const Invocation inv = am::invocation(out.spec(), t.lse.spec(), part.spec(), t.part_lse.spec());
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
  auto run = [&] { attention_merge(t.ctx, out, t.lse, part, t.part_lse, config); };
  run();  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns(run) * 1e-9);
  const double bytes = am::AttentionMergeKernel().bytes(inv);
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  const Size s = size();
  state.SetLabel(info.name + ", B" + std::to_string(s.batch) + " S" + std::to_string(s.seq) + " H" + std::to_string(s.heads) +
                 " D" + std::to_string(s.dim) + " out " + std::string(to_string(pair.out)) + " part " +
                 std::string(to_string(pair.part)) + ", " + label);
}

// The peer: the f32 out copied on the same device.
void copy(benchmark::State& state, const std::string& device) {
  Tensors& t = tensors(device);
  Device& d = t.ctx.device();
  const Tensor& src = t.out(DType::f32);
  d.copy(src.buffer(), t.copy.buffer(), src.bytes());
  d.synchronize();
  for (auto _ : state) state.SetIterationTime(d.time_ns([&] { d.copy(src.buffer(), t.copy.buffer(), src.bytes()); }) * 1e-9);
  state.counters["copy GB/s"] = benchmark::Counter(2.0 * static_cast<double>(src.bytes()) * static_cast<double>(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
  state.SetLabel(d.info().name + ", " + std::to_string(src.bytes() >> 20) + " MiB read and written");
}

// Per device: BM_attention_merge/<device>/<out>_<part>/{heuristic,tuned} and .../copy_peer.
const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_merge_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const std::string base = "BM_attention_merge/" + dev;
    for (const Pair& pair : pairs)
      for (bool tuned : {false, true}) {
        if (tuned && tune_evals() <= 0) continue;
        const std::string name = base + "/" + std::string(to_string(pair.out)) + "_" + std::string(to_string(pair.part)) +
                                 (tuned ? "/tuned" : "/heuristic");
        benchmark::RegisterBenchmark(name.c_str(), [dev, pair, tuned](benchmark::State& s) { merge(s, dev, pair, tuned); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
    benchmark::RegisterBenchmark((base + "/copy_peer").c_str(), [dev](benchmark::State& s) { copy(s, dev); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.2);
  }
  return 0;
}();

}  // namespace
