// CPU attention, f32, B1 H8 S2048 D64: ejk's flash attention forward and backward (heuristic
// config, and forward with the best of its space) next to the unfused OpenBLAS attention in the
// same run: per head Q.K^T with cblas_sgemm into a materialised score matrix, a row softmax
// spread over the same thread pool, and P.V with cblas_sgemm. FLOPs: 4 B H Sq Sk D forward
// (half when causal), 2.5x that backward.
#include <cmath>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "backends/cpu/cpu_device.hpp"
#include "ejk/ejk.hpp"
#include "flash_attention/flash_attention.hpp"

namespace {

using namespace ejk;
namespace fa = kernels::flash_attention;

constexpr std::int64_t B = 1, H = 8, S = 2048, D = 64;

void report(benchmark::State& state, double flops) {
  const double total = flops * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(total / 1e9, benchmark::Counter::kIsRate);
  state.counters["TFLOP/s"] = benchmark::Counter(total / 1e12, benchmark::Counter::kIsRate);
}

double forward_flops(bool causal) { return 4.0 * B * H * S * S * D / (causal ? 2.0 : 1.0); }

struct Inputs {
  Context ctx{"cpu"};
  Tensor q = ctx.random({B, S, H, D}, DType::f32, 1), k = ctx.random({B, S, H, D}, DType::f32, 2),
         v = ctx.random({B, S, H, D}, DType::f32, 3), dout = ctx.random({B, S, H, D}, DType::f32, 4);
};

Inputs& inputs() {
  static Inputs in;
  return in;
}

void BM_ejk_flash_attention_fwd(benchmark::State& state) {
  auto& in = inputs();
  const bool causal = state.range(0) != 0;
  AttentionOutput r = flash_attention(in.ctx, in.q, in.k, in.v, {.causal = causal});
  for (auto _ : state) flash_attention(in.ctx, in.q, in.k, in.v, r.out, r.lse, {.causal = causal});
  report(state, forward_flops(causal));
}

// The forward with the fastest config of its space (timed once per config here).
void BM_ejk_flash_attention_fwd_swept(benchmark::State& state) {
  auto& in = inputs();
  AttentionOutput r = flash_attention(in.ctx, in.q, in.k, in.v);
  std::vector<TensorSpec> specs{in.q.spec(), in.k.spec(), in.v.spec()};
  for (int i = 0; i < 6; ++i) specs.push_back(fa::absent());
  specs.push_back(r.out.spec());
  specs.push_back(r.lse.spec());
  const Invocation inv = fa::forward_invocation(specs, {});
  const auto& impl = Registry::global().implementation(inv, in.ctx.device().info());
  Config best = impl.heuristic(inv, in.ctx.device().info());
  double best_ns = 1e300;
  for (const auto& cfg : impl.space(inv, in.ctx.device().info()).enumerate()) {
    double ns = 1e300;
    for (int rep = 0; rep < 2; ++rep)
      ns = std::min(ns, in.ctx.device().time_ns([&] { flash_attention(in.ctx, in.q, in.k, in.v, r.out, r.lse, {.config = cfg}); }));
    if (ns < best_ns) best_ns = ns, best = cfg;
  }
  state.SetLabel(best.canonical());
  for (auto _ : state) flash_attention(in.ctx, in.q, in.k, in.v, r.out, r.lse, {.config = best});
  report(state, forward_flops(false));
}

void BM_ejk_flash_attention_bwd(benchmark::State& state) {
  auto& in = inputs();
  const bool causal = state.range(0) != 0;
  AttentionOutput r = flash_attention(in.ctx, in.q, in.k, in.v, {.causal = causal});
  AttentionGrads g = flash_attention_bwd(in.ctx, in.q, in.k, in.v, r.out, in.dout, r.lse, {.causal = causal});
  for (auto _ : state) flash_attention_bwd(in.ctx, in.q, in.k, in.v, r.out, in.dout, r.lse, g, {.causal = causal});
  report(state, 2.5 * forward_flops(causal));
}

// Unfused attention: scores materialised per head ([S, S] f32), OpenBLAS for both products.
void BM_openblas_unfused_attention(benchmark::State& state) {
  auto& in = inputs();
  auto& pool = ejk::cpu::cpu_device(in.ctx.device()).pool();
  const float* q = ejk::cpu::cpu_buffer(in.q.buffer()).as<float>();
  const float* k = ejk::cpu::cpu_buffer(in.k.buffer()).as<float>();
  const float* v = ejk::cpu::cpu_buffer(in.v.buffer()).as<float>();
  std::vector<float> out(static_cast<std::size_t>(B * S * H * D)), scores(static_cast<std::size_t>(S * S));
  const int s = static_cast<int>(S), d = static_cast<int>(D), ld = static_cast<int>(H * D);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  for (auto _ : state) {
    for (std::int64_t h = 0; h < H; ++h) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q + h * D, ld, k + h * D, ld, 0.f,
                  scores.data(), s);
      pool.parallel_for(S, [&](std::int64_t i) {
        float* row = scores.data() + i * S;
        float m = row[0];
        for (std::int64_t j = 1; j < S; ++j) m = std::max(m, row[j]);
        float sum = 0;
        for (std::int64_t j = 0; j < S; ++j) sum += row[j] = std::exp(row[j] - m);
        const float inv = 1.f / sum;
        for (std::int64_t j = 0; j < S; ++j) row[j] *= inv;
      });
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, 1.f, scores.data(), s, v + h * D, ld, 0.f,
                  out.data() + h * D, ld);
    }
    benchmark::DoNotOptimize(out.data());
  }
  report(state, forward_flops(false));
}

}  // namespace

BENCHMARK(BM_ejk_flash_attention_fwd)->Arg(0)->Arg(1)->ArgName("causal")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ejk_flash_attention_fwd_swept)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_ejk_flash_attention_bwd)->Arg(0)->Arg(1)->ArgName("causal")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_openblas_unfused_attention)->Unit(benchmark::kMillisecond)->UseRealTime();
