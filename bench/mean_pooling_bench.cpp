// mean_pooling and mean_pooling_bwd, padded [batch, seq, dim] and packed (the same tokens in
// sequences of random lengths), on every device present. Bandwidth-bound: "GB/s" counts the
// kernel's bytes (the token array and the pooled array once) per call. The peer is a device-side
// copy of the token array on the same device in the same run ("copy GB/s" counts bytes read +
// written), the ceiling a bandwidth-bound kernel can approach. Timed on the device's clock
// (steady clock on the CPU).
//
// $EJK_BENCH_POOL_SHAPE="B,S,D" changes the shape (default 32,512,1024), $EJK_BENCH_POOL_DTYPE
// picks f32 | f16 | bf16 (default bf16), $EJK_BENCH_TUNE_EVALS the budget of the tuned rows
// (default 24; 0 skips them).
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
#include "mean_pooling/mean_pooling.hpp"

namespace {

using namespace ejk;
namespace mp = kernels::mean_pooling;

struct Size {
  std::int64_t batch = 32, seq = 512, dim = 1024;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_POOL_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.batch >> sep >> s.seq >> sep >> s.dim;
    if (!in || s.batch <= 0 || s.seq <= 0 || s.dim <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_POOL_SHAPE='") + env + "' (expected B,S,D)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_POOL_DTYPE");
  return env ? parse_dtype(env) : DType::bf16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

struct Tensors {
  Context ctx;
  Tensor x, cu, none, pooled, dout, dx, copy;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    x = ctx.random({s.batch, s.seq, s.dim}, t, 1);
    // Packed: the same tokens cut at sorted random points into batch sequences.
    std::mt19937_64 rng(2);
    const std::int64_t tokens = s.batch * s.seq;
    std::uniform_int_distribution<std::int64_t> cut(0, tokens);
    std::vector<double> offsets(static_cast<std::size_t>(s.batch + 1));
    for (auto& o : offsets) o = static_cast<double>(cut(rng));
    offsets.front() = 0;
    offsets.back() = static_cast<double>(tokens);
    std::sort(offsets.begin(), offsets.end());
    cu = ctx.from({s.batch + 1}, DType::i32, offsets);
    none = ctx.empty({0}, DType::i32);
    pooled = ctx.empty({s.batch, s.dim}, t);
    dout = ctx.random({s.batch, s.dim}, t, 3);
    dx = ctx.empty(x.shape(), t);
    copy = ctx.empty(x.shape(), t);
  }
  Tensor tokens(bool packed) const { return packed ? x.reshaped({x.dim(0) * x.dim(1), x.dim(2)}) : x; }
  Tensor grads(bool packed) const { return packed ? dx.reshaped({dx.dim(0) * dx.dim(1), dx.dim(2)}) : dx; }
  Invocation invocation(mp::Direction dir, bool packed) const {
    const TensorSpec c = packed ? cu.spec() : none.spec();
    return dir == mp::Direction::forward ? mp::invocation(dir, tokens(packed).spec(), c, pooled.spec())
                                         : mp::invocation(dir, dout.spec(), c, grads(packed).spec());
  }
  void run(mp::Direction dir, bool packed, const Config& c) {
    const MeanPoolingOptions o{.cu_seqlens = packed ? cu : Tensor{}, .check_cu_seqlens = false, .config = c};
    if (dir == mp::Direction::forward) mean_pooling(ctx, tokens(packed), pooled, o);
    else mean_pooling_bwd(ctx, dout, grads(packed), o);
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

void pool(benchmark::State& state, const std::string& device, mp::Direction dir, bool packed, bool tuned) {
  Tensors& t = tensors(device);
  const Invocation inv = t.invocation(dir, packed);
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
  t.run(dir, packed, config);  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns([&] { t.run(dir, packed, config); }) * 1e-9);
  const double bytes = mp::MeanPoolingKernel(dir).bytes(inv);
  state.counters["GB/s"] = benchmark::Counter(bytes * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  const Size s = size();
  state.SetLabel(info.name + ", B" + std::to_string(s.batch) + " S" + std::to_string(s.seq) + " D" + std::to_string(s.dim) +
                 " " + std::string(to_string(dtype())) + (packed ? " packed" : " padded") + ", " + label);
}

// The peer: the token array copied on the same device.
void copy(benchmark::State& state, const std::string& device) {
  Tensors& t = tensors(device);
  Device& d = t.ctx.device();
  d.copy(t.x.buffer(), t.copy.buffer(), t.x.bytes());
  d.synchronize();
  for (auto _ : state) state.SetIterationTime(d.time_ns([&] { d.copy(t.x.buffer(), t.copy.buffer(), t.x.bytes()); }) * 1e-9);
  state.counters["copy GB/s"] = benchmark::Counter(2.0 * static_cast<double>(t.x.bytes()) * static_cast<double>(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
  state.SetLabel(d.info().name + ", " + std::to_string(t.x.bytes() >> 20) + " MiB read and written");
}

// Per device: BM_mean_pooling/<device>/{fwd,bwd}/{padded,packed}/{heuristic,tuned} and .../copy_peer.
const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mean_pooling_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const std::string base = "BM_mean_pooling/" + dev;
    for (mp::Direction dir : {mp::Direction::forward, mp::Direction::backward})
      for (bool packed : {false, true})
        for (bool tuned : {false, true}) {
          if (tuned && tune_evals() <= 0) continue;
          const std::string name = base + (dir == mp::Direction::forward ? "/fwd" : "/bwd") + (packed ? "/packed" : "/padded") +
                                   (tuned ? "/tuned" : "/heuristic");
          benchmark::RegisterBenchmark(name.c_str(),
                                       [dev, dir, packed, tuned](benchmark::State& s) { pool(s, dev, dir, packed, tuned); })
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
