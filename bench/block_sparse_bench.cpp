// block_sparse_attention and its backward at seq 4096 (batch 1, 16 heads, head_dim 64, f16)
// with a causal local window + strided layout in blocks of 64 (local_blocks 3, stride 8: about
// 12 of 64 key blocks per query block), on the CPU and on every GPU-backend device present.
// "TFLOP/s" counts the useful work only (the query-key pairs of live blocks, under the causal
// mask); "x dense" is the time of dense causal flash_attention (or flash_attention_bwd) at the
// same shape on the same device, measured in the same row, over this kernel's time. Timed on the
// device's clock (steady clock on the CPU); heuristic configs.
//
// $EJK_BENCH_BSA_SHAPE="B,H,SEQ,D" changes the shape (CPU-hosted drivers such as PoCL and
// lavapipe want a smaller one), $EJK_BENCH_BSA_DTYPE picks f32 | f16 | bf16,
// $EJK_BENCH_BSA_LAYOUT="BLOCK,LOCAL,STRIDE" the layout (default 64,3,8).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "block_sparse_attention/block_sparse_attention.hpp"
#include "ejk/ejk.hpp"

namespace {

using namespace ejk;
namespace bsa = kernels::block_sparse_attention;

struct Size {
  std::int64_t batch = 1, heads = 16, seq = 4096, dim = 64;
  std::int64_t block = 64, local = 3, stride = 8;
};

Size size() {
  Size s;
  char sep = 0;
  if (const char* env = std::getenv("EJK_BENCH_BSA_SHAPE")) {
    std::istringstream in(env);
    in >> s.batch >> sep >> s.heads >> sep >> s.seq >> sep >> s.dim;
    if (!in || s.batch <= 0 || s.heads <= 0 || s.seq <= 0 || s.dim <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_BSA_SHAPE='") + env + "' (expected B,H,SEQ,D)");
  }
  if (const char* env = std::getenv("EJK_BENCH_BSA_LAYOUT")) {
    std::istringstream in(env);
    in >> s.block >> sep >> s.local >> sep >> s.stride;
    if (!in || s.block <= 0) throw InvalidArgument(std::string("EJK_BENCH_BSA_LAYOUT='") + env + "' (expected BLOCK,LOCAL,STRIDE)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_BSA_DTYPE");
  return env ? parse_dtype(env) : DType::f16;
}

struct Tensors {
  Context ctx;
  Tensor q, k, v, out, lse, dout, dq, dk, dv, dense_out, dense_lse;
  BlockSparseLayout layout;
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    q = ctx.random({s.batch, s.seq, s.heads, s.dim}, t, 1);
    k = ctx.random({s.batch, s.seq, s.heads, s.dim}, t, 2);
    v = ctx.random({s.batch, s.seq, s.heads, s.dim}, t, 3);
    dout = ctx.random({s.batch, s.seq, s.heads, s.dim}, t, 4);
    out = ctx.empty(q.shape(), t);
    dense_out = ctx.empty(q.shape(), t);
    lse = ctx.empty({s.batch, s.heads, s.seq}, DType::f32);
    dense_lse = ctx.empty({s.batch, s.heads, s.seq}, DType::f32);
    dq = ctx.empty(q.shape(), t);
    dk = ctx.empty(k.shape(), t);
    dv = ctx.empty(v.shape(), t);
    layout = block_sparse_layout(ctx, s.batch, s.heads, s.seq, s.seq,
                                 {.block_q = s.block, .block_k = s.block, .causal = true, .local_blocks = s.local, .stride = s.stride});
    forward();
    dense_forward();
    ctx.device().synchronize();
  }
  void forward() { block_sparse_attention(ctx, q, k, v, layout, out, lse); }
  void backward() { block_sparse_attention_bwd(ctx, q, k, v, out, dout, lse, layout, {dq, dk, dv}); }
  void dense_forward() { flash_attention(ctx, q, k, v, dense_out, dense_lse, {.causal = true}); }
  void dense_backward() {
    AttentionGrads g{dq, dk, dv, {}, {}};
    flash_attention_bwd(ctx, q, k, v, dense_out, dout, dense_lse, g, {.causal = true});
  }
  double flops(bool backward) const {
    const Size s = size();
    const double pairs = layout.density * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.seq * s.seq);
    return (backward ? 2.5 : 1.0) * 4.0 * pairs * static_cast<double>(s.dim);
  }
};

Tensors& tensors(const std::string& device) {
  static std::map<std::string, std::unique_ptr<Tensors>> all;
  auto& t = all[device];
  if (!t) t = std::make_unique<Tensors>(device);
  return *t;
}

// The median of a few timed runs of fn on the device's clock.
template <class Fn>
double median_ns(Device& d, Fn&& fn) {
  std::vector<double> ns;
  for (int i = 0; i < 5; ++i) ns.push_back(d.time_ns(fn));
  std::nth_element(ns.begin(), ns.begin() + 2, ns.end());
  return ns[2];
}

void attention(benchmark::State& state, const std::string& device, bool backward) {
  Tensors& t = tensors(device);
  Device& d = t.ctx.device();
  auto run = [&] { backward ? t.backward() : t.forward(); };
  auto dense = [&] { backward ? t.dense_backward() : t.dense_forward(); };
  run();  // compile and warm up outside the timed loop
  dense();
  d.synchronize();
  double total = 0;
  for (auto _ : state) {
    const double ns = d.time_ns(run);
    total += ns;
    state.SetIterationTime(ns * 1e-9);
  }
  const double n = static_cast<double>(state.iterations());
  const double dense_ns = median_ns(d, dense);
  state.counters["TFLOP/s"] = benchmark::Counter(t.flops(backward) * n / 1e12, benchmark::Counter::kIsRate);
  state.counters["x dense"] = dense_ns / (total / n);
  state.counters["density"] = t.layout.density;
  const Size s = size();
  state.SetLabel(d.info().name + ", B" + std::to_string(s.batch) + " H" + std::to_string(s.heads) + " seq" +
                 std::to_string(s.seq) + " D" + std::to_string(s.dim) + " " + std::string(to_string(dtype())) +
                 ", causal blocks of " + std::to_string(s.block) + " local " + std::to_string(s.local) + " stride " +
                 std::to_string(s.stride));
}

const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "block_sparse_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const bool gpu = dev.rfind("cpu", 0) != 0;
    const std::string base = gpu ? "BM_block_sparse_attention_gpu/" + dev : std::string("BM_block_sparse_attention_cpu");
    for (bool backward : {false, true})
      benchmark::RegisterBenchmark((base + (backward ? "/bwd" : "/fwd")).c_str(),
                                   [dev, backward](benchmark::State& s) { attention(s, dev, backward); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
  }
  return 0;
}();

}  // namespace
