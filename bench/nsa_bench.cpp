// native_sparse_attention forward and backward at NSA's training shape (64 query heads over 4
// kv heads, head_dim 128, 16 selected blocks of 64 tokens, sequence 4096, bf16, random
// selections of distinct earlier blocks with the own block always in) on every device present.
// "TFLOP/s" counts the work done: per token and query head, the selected keys each token
// really sees (causal in its own block) and its visible compressed keys, 2 flops per
// multiply-add of a score (head_dim_k) and of an output row (head_dim_v); the backward counts
// 2.5 times that (scores again, dP, dQ, dK, dV). The peer, on the same device in the same run,
// is dense causal flash_attention (flash_attention / flash_attention_bwd) of the same q, k, v:
// the attention NSA replaces ("x dense" = its time over NSA's).
//
// $EJK_BENCH_NSA_SHAPE="B,T,HQ,H,D,S,BS" changes the shape (CPU-hosted drivers want a smaller
// one), $EJK_BENCH_NSA_DTYPE picks f32 | f16 | bf16, $EJK_BENCH_TUNE_EVALS the budget of tuned
// rows (default 0: heuristic rows only).
#include <algorithm>
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
#include "native_sparse_attention/nsa.hpp"

namespace {

using namespace ejk;
namespace nsa = kernels::native_sparse_attention;

struct Size {
  std::int64_t batch = 1, seq = 4096, heads = 64, kv_heads = 4, dim = 128, selected = 16, block_size = 64;
};

Size size() {
  Size s;
  if (const char* env = std::getenv("EJK_BENCH_NSA_SHAPE")) {
    char sep = 0;
    std::istringstream in(env);
    in >> s.batch >> sep >> s.seq >> sep >> s.heads >> sep >> s.kv_heads >> sep >> s.dim >> sep >> s.selected >> sep >>
        s.block_size;
    if (!in || s.batch <= 0 || s.seq <= 0 || s.heads <= 0 || s.kv_heads <= 0 || s.dim <= 0 || s.selected <= 0 ||
        s.block_size <= 0)
      throw InvalidArgument(std::string("EJK_BENCH_NSA_SHAPE='") + env + "' (expected B,T,HQ,H,D,S,BS)");
  }
  return s;
}

DType dtype() {
  const char* env = std::getenv("EJK_BENCH_NSA_DTYPE");
  return env ? parse_dtype(env) : DType::bf16;
}

int tune_evals() {
  const char* env = std::getenv("EJK_BENCH_TUNE_EVALS");
  return env ? std::atoi(env) : 0;
}

struct Tensors {
  Context ctx;
  Tensor q, k, v, g_cmp, g_slc, bi, counts, dout;
  NsaOutput f;
  NsaGrads grads;
  double work = 0;  // forward flops of the keys each token really sees
  explicit Tensors(const std::string& device) : ctx(device) {
    const Size s = size();
    const DType t = dtype();
    const std::int64_t B = s.batch, T = s.seq, HQ = s.heads, H = s.kv_heads, D = s.dim, S = s.selected, BS = s.block_size;
    q = ctx.random({B, T, HQ, D}, t, 1);
    k = ctx.random({B, T, H, D}, t, 2);
    v = ctx.random({B, T, H, D}, t, 3);
    g_cmp = ctx.random({B, T, HQ}, t, 4);
    g_slc = ctx.random({B, T, HQ}, t, 5);
    dout = ctx.random({B, T, HQ, D}, t, 6);
    // Per (token, kv head): the own block and distinct random earlier ones, as top-k gives.
    std::mt19937_64 rng(7);
    std::vector<double> idx(static_cast<std::size_t>(B * T * H * S), -1.0);
    std::vector<std::int64_t> blocks;
    double keys = 0;
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t i = 0; i < T; ++i) {
        const std::int64_t own = i / BS;
        keys += static_cast<double>(HQ) * static_cast<double>((i + 1) / BS);  // visible compressed keys
        for (std::int64_t h = 0; h < H; ++h) {
          blocks.resize(static_cast<std::size_t>(own));
          std::iota(blocks.begin(), blocks.end(), 0);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          double* row = idx.data() + ((b * T + i) * H + h) * S;
          row[0] = static_cast<double>(own);
          keys += static_cast<double>(HQ / H) * static_cast<double>(i % BS + 1);
          for (std::int64_t j = 1; j < S && j <= own; ++j) {
            row[j] = static_cast<double>(blocks[static_cast<std::size_t>(j - 1)]);
            keys += static_cast<double>(HQ / H) * static_cast<double>(BS);
          }
        }
      }
    bi = ctx.from({B, T, H, S}, DType::i32, idx);
    work = keys * 4.0 * static_cast<double>(D);
    f = native_sparse_attention(ctx, q, k, v, g_cmp, g_slc, bi, options({}));
    grads = native_sparse_attention_bwd(ctx, q, k, v, g_cmp, g_slc, bi, f, dout, options({}));
  }

  NsaOptions options(const std::optional<Config>& config) const {
    NsaOptions o;
    o.block_size = size().block_size;
    o.check_indices = false;
    o.config = config;
    return o;
  }

  Invocation invocation(bool backward) const {
    const Size s = size();
    const std::map<std::string, std::int64_t> sizes{{"batch", s.batch},       {"seq", s.seq},          {"heads", s.heads},
                                                    {"kv_heads", s.kv_heads}, {"head_dim", s.dim},     {"selected", s.selected}};
    const nlohmann::json o{{"block_size", s.block_size}};
    return backward ? nsa::NsaBwdKernel().from_sizes(sizes, dtype(), o) : nsa::NsaKernel().from_sizes(sizes, dtype(), o);
  }

  void run(bool backward, const Config& config) {
    if (backward) grads = native_sparse_attention_bwd(ctx, q, k, v, g_cmp, g_slc, bi, f, dout, options(config));
    else f = native_sparse_attention(ctx, q, k, v, g_cmp, g_slc, bi, options(config));
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
  return t.ctx.device().info().name + ", B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " HQ" +
         std::to_string(s.heads) + " H" + std::to_string(s.kv_heads) + " D" + std::to_string(s.dim) + " S" +
         std::to_string(s.selected) + " BS" + std::to_string(s.block_size) + " " + std::string(to_string(dtype()));
}

void sparse(benchmark::State& state, const std::string& device, bool backward, bool tuned) {
  Tensors& t = tensors(device);
  const Invocation inv = t.invocation(backward);
  const DeviceInfo& info = t.ctx.device().info();
  Config config = Registry::global().implementation(inv, info).heuristic(inv, info);
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
  t.run(backward, config);  // compile and warm up outside the timed loop
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns([&] { t.run(backward, config); }) * 1e-9);
  const double n = static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = benchmark::Counter((backward ? 2.5 : 1.0) * t.work * n / 1e12, benchmark::Counter::kIsRate);
  state.SetLabel(shape_label(t) + ", " + label);
}

// The peer: dense causal attention of the same tensors.
void dense(benchmark::State& state, const std::string& device, bool backward) {
  Tensors& t = tensors(device);
  AttentionOutput a = flash_attention(t.ctx, t.q, t.k, t.v, {.causal = true});
  auto once = [&] {
    if (backward) (void)flash_attention_bwd(t.ctx, t.q, t.k, t.v, a.out, t.dout, a.lse, {.causal = true});
    else a = flash_attention(t.ctx, t.q, t.k, t.v, {.causal = true});
  };
  once();
  t.ctx.device().synchronize();
  for (auto _ : state) state.SetIterationTime(t.ctx.device().time_ns(once) * 1e-9);
  const Size s = size();
  const double flops = 2.0 * static_cast<double>(s.batch * s.heads) * static_cast<double>(s.seq) *
                       static_cast<double>(s.seq + 1) * static_cast<double>(2 * s.dim) / 2.0;
  state.counters["TFLOP/s"] = benchmark::Counter((backward ? 2.5 : 1.0) * flops * static_cast<double>(state.iterations()) / 1e12,
                                                 benchmark::Counter::kIsRate);
  state.SetLabel(shape_label(t) + ", dense causal flash_attention");
}

const int registered = [] {
  std::vector<std::string> devices;
  try {
    for (const auto& d : list_devices()) devices.push_back(d.id());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nsa_bench: no devices: %s\n", e.what());
  }
  for (const auto& dev : devices) {
    const bool gpu = dev.rfind("cpu", 0) != 0;
    for (bool backward : {false, true}) {
      const std::string base = std::string("BM_nsa_") + (backward ? "bwd" : "fwd") + (gpu ? "_gpu/" + dev : "_cpu");
      for (bool tuned : {false, true}) {
        if (tuned && tune_evals() <= 0) continue;
        benchmark::RegisterBenchmark((base + (tuned ? "/tuned" : "/heuristic")).c_str(),
                                     [dev, backward, tuned](benchmark::State& s) { sparse(s, dev, backward, tuned); })
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.2);
      }
      benchmark::RegisterBenchmark((base + "/dense_peer").c_str(), [dev, backward](benchmark::State& s) { dense(s, dev, backward); })
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.2);
    }
  }
  return 0;
}();

}  // namespace
