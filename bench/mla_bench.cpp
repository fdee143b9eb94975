// mla_decode, multi-head latent attention decode over a paged latent cache, at DeepSeek-V3
// widths (kv_lora_rank 512, rope_dim 64, qk_nope_head_dim 128, v_head_dim 128) with batch 32,
// 16 heads (one device's shard of 128), context 4096, pages of 64 tokens, f16 — on the CPU and on
// every GPU-backend device present (opencl:N, vulkan:N). Decode is bound by reading the latent
// cache: "GB/s" counts the cache bytes read once (batch * context * 576 * 2) per call, next to
// the milliseconds. The peer is a device-side copy of the same cache buffer on the same device in
// the same run ("copy GB/s" counts bytes read + written), the ceiling a bandwidth-bound kernel
// can approach. Timed on the device's clock (steady clock on the CPU).
//
// $EJK_BENCH_MLA_SHAPE="B,H,CONTEXT" changes the shape (CPU-hosted drivers such as PoCL and
// lavapipe want a smaller one), $EJK_BENCH_MLA_DTYPE picks f32 | f16 | bf16,
// $EJK_BENCH_TUNE_EVALS the budget of the tuned rows (default 24; 0 skips them).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "ejk/ejk.hpp"
#include "mla_attention/mla_attention.hpp"

namespace {

using namespace ejk;
namespace mla = kernels::mla_attention;

constexpr std::int64_t nope = 128, rope = 64, rank = 512, v_dim = 128, block_size = 64;

struct Size {
  std::int64_t batch = 32, heads = 16, context = 4096;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_MLA_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.batch >> sep >> s.heads >> sep >> s.context;
    if (!in || s.batch <= 0 || s.heads <= 0 || s.context <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_MLA_SHAPE='") + env + "' (expected B,H,CONTEXT)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_MLA_DTYPE");
  return env ? parse_dtype(env) : DType::f16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 24;
}

double cache_bytes() {
  const Size s = size();
  return static_cast<double>(s.batch * s.context * (rank + rope)) * static_cast<double>(dtype_size(dtype()));
}

// Inputs of one device, made once: every sequence at the full context, pages shuffled.
struct Tensors {
  Context ctx;
  Tensor q_nope, q_pe, kv, tables, lens, w_kc, w_vc, out, copy;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    const std::int64_t blocks = (s.context + block_size - 1) / block_size, pages = s.batch * blocks;
    q_nope = ctx.random({s.batch, s.heads, nope}, t, 1);
    q_pe = ctx.random({s.batch, s.heads, rope}, t, 2);
    kv = ctx.random({pages, block_size, rank + rope}, t, 3);
    w_kc = ctx.random({s.heads, nope, rank}, t, 4);
    w_vc = ctx.random({s.heads, rank, v_dim}, t, 5);
    std::vector<double> order(static_cast<std::size_t>(pages));
    std::iota(order.begin(), order.end(), 0.0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(6));
    tables = ctx.from({s.batch, blocks}, DType::i32, order);
    lens = ctx.from({s.batch}, DType::i32, std::vector<double>(static_cast<std::size_t>(s.batch), static_cast<double>(s.context)));
    out = ctx.empty({s.batch, s.heads, v_dim}, t);
    copy = ctx.empty(kv.shape(), t);
  }

  Invocation invocation() const {
    const std::vector<TensorSpec> a{q_nope.spec(), q_pe.spec(), kv.spec(), tables.spec(), lens.spec(),
                                    w_kc.spec(),   w_vc.spec(), out.spec()};
    return mla::decode_invocation(a);
  }

  void run(const Config& config) {
    mla_decode(ctx, q_nope, q_pe, kv, tables, lens, w_kc, w_vc, out, {.check_tables = false, .config = config});
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

Config choose(Tensors& t, bool tuned, std::string& label) {
  const Invocation inv = t.invocation();
  const DeviceInfo& info = t.ctx.device().info();
  const Implementation& impl = Registry::global().implementation(inv, info);
  if (!tuned) {
    label = "heuristic " + impl.heuristic(inv, info).canonical();
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

void decode(benchmark::State& state, const std::string& device, bool tuned) {
  Tensors& t = tensors(device);
  std::string label;
  const Config config = choose(t, tuned, label);
  t.run(config);  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns([&] { t.run(config); }) * 1e-9);
  const double n = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(cache_bytes() * n / 1e9, benchmark::Counter::kIsRate);
  state.counters["TFLOP/s"] = benchmark::Counter(mla::MlaDecodeKernel().flops(t.invocation()) * n / 1e12,
                                                 benchmark::Counter::kIsRate);
  const Size s = size();
  state.SetLabel(t.ctx.device().info().name + ", B" + std::to_string(s.batch) + " H" + std::to_string(s.heads) + " ctx" +
                 std::to_string(s.context) + " " + std::string(to_string(dtype())) + ", " + label);
}

// The peer: the cache buffer copied on the same device.
void copy(benchmark::State& state, const std::string& device) {
  Tensors& t = tensors(device);
  Device& d = t.ctx.device();
  d.copy(t.kv.buffer(), t.copy.buffer(), t.kv.bytes());
  d.synchronize();
  for (auto _ : state)
    state.SetIterationTime(d.time_ns([&] { d.copy(t.kv.buffer(), t.copy.buffer(), t.kv.bytes()); }) * 1e-9);
  state.counters["copy GB/s"] = benchmark::Counter(2.0 * static_cast<double>(t.kv.bytes()) *
                                                       static_cast<double>(state.iterations()) / 1e9,
                                                   benchmark::Counter::kIsRate);
  state.SetLabel(d.info().name + ", " + std::to_string(t.kv.bytes() >> 20) + " MiB read and written");
}

// One decode row per device and config source (the CPU's as BM_mla_decode_cpu, the others as
// BM_mla_decode_gpu/<device>), and a copy row per device.
const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mla_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const bool gpu = dev.rfind("cpu", 0) != 0;
    const std::string base = gpu ? "BM_mla_decode_gpu/" + dev : std::string("BM_mla_decode_cpu");
    for (bool tuned : {false, true}) {
      if (tuned && tune_evals() <= 0) continue;
      benchmark::RegisterBenchmark((base + (tuned ? "/tuned" : "/heuristic")).c_str(),
                                   [dev, tuned](benchmark::State& s) { decode(s, dev, tuned); })
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
