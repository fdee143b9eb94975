// flash_attention and flash_attention_bwd on the native CPU backend: tiled online-softmax
// forward and a FlashAttention-2 backward (dk/dv by key block, dq by query block, no atomics),
// multithreaded over (sequence, head, block) with the device's thread pool. The per-ISA task
// routines are in cpu_kernels.inc; this file plans a call and spreads its tasks.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "flash_attention/cpu_kernels.hpp"
#include "flash_attention/flash_attention.hpp"

namespace ejk::kernels::flash_attention {
namespace {

static_assert(max_head_dim <= cpu::max_head_dim_padded);

// The widest build the CPU runs; $EJK_FA_CPU_ISA (avx512, avx2, generic) picks a narrower one,
// so every build can be tested on one machine.
const cpu::Isa& isa() {
  bool avx512 = false, avx2 = false;
#if defined(__x86_64__)
  __builtin_cpu_init();
  avx512 = __builtin_cpu_supports("avx512f");
  avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  const char* env = std::getenv("EJK_FA_CPU_ISA");
  const std::string want = env ? env : "";
  if (!want.empty() && want != "avx512" && want != "avx2" && want != "generic")
    throw InvalidArgument("EJK_FA_CPU_ISA='" + want + "' (expected avx512, avx2 or generic)");
  if ((want.empty() || want == "avx512") && avx512) return cpu::avx512();
  if ((want.empty() || want == "avx512" || want == "avx2") && avx2) return cpu::avx2();
  return cpu::generic();
}

std::int64_t round_up(std::int64_t x, std::int64_t m) { return (x + m - 1) / m * m; }
std::int64_t pow2_at_least(std::int64_t x) {
  std::int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

ParamSpace cpu_space(const Vars& vars, const DeviceInfo& dev) {
  const std::int64_t lanes = isa().lanes;
  const std::int64_t dp = round_up(std::get<std::int64_t>(vars.at("head_dim")), lanes);
  ParamSpace s;
  s.param("block_q", {16, 32, 64, 128})
      .param("block_k", {16, 32, 64, 128, 256})
      .constraint("block_k % lanes == 0")
      // Blocks much longer than the sequences only compute padding.
      .constraint("block_q == 16 || block_q < 2 * seq_q")
      .constraint("block_k == 16 || block_k < 2 * seq_k")
      // A task's packed rows, score tiles and accumulators stay within the L2 cache.
      .constraint("(3 * block_q * head_dim_padded + 4 * block_q * block_k + 2 * block_k * head_dim_padded) * 4 <= local_mem")
      .bind(vars)
      .bind(device_vars(dev))
      .bind({{"lanes", lanes}, {"head_dim_padded", dp}});
  return s;
}

Config cpu_heuristic(const Invocation& inv, const Vars& vars, const DeviceInfo& dev, const Implementation& impl) {
  auto var = [&](const char* n) { return std::get<std::int64_t>(vars.at(n)); };
  const std::int64_t sq = var("seq_q"), sk = var("seq_k"), rows = var("batch") * var("heads");
  // Large blocks amortise the per-block softmax and accumulator traffic (128 x 128 measured
  // best for B1 H8 S2048 D64 on a 2-core AVX-512 machine), as long as every thread still gets
  // a few query blocks.
  std::int64_t bq = std::clamp<std::int64_t>(pow2_at_least(sq), 16, 128);
  const std::int64_t want_tasks = 4 * std::max<std::int64_t>(1, dev.compute_units);
  while (bq > 16 && rows * ((sq + bq - 1) / bq) < want_tasks) bq /= 2;
  Config c{{"block_q", bq}, {"block_k", std::clamp<std::int64_t>(pow2_at_least(sk), 16, 128)}};
  // Never outside the space, whatever the device's limits.
  ParamSpace space = impl.space(inv, dev);
  if (space.admits(c)) return c;
  auto all = space.enumerate();
  if (all.empty()) throw InvalidArgument("flash_attention cpu: empty parameter space for " + inv.signature());
  return all.front();
}

std::vector<std::int64_t> read_i32(const Tensor& t) {
  const auto* p = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

const void* data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }
void* mutable_data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }

// The part of a Plan both passes share, with the tables it points to.
struct Prepared {
  Problem p;
  std::vector<cpu::Seq> seqs;
  std::vector<cpu::Task> packs;     // (seq, kv head, key block)
  std::vector<cpu::Task> queries;   // (seq, head, query block), heaviest first
  std::vector<cpu::Task> keys;      // (seq, kv head, key block)
  std::vector<float> sinks;
  std::int64_t nblocks = 0;
  cpu::Plan plan{};
};

// q, k, v, bias, sinks, cu_q, cu_k, q_seg, k_seg at these positions of `args`.
void prepare_work(Prepared& w, const Invocation& inv, const Config& config, std::span<const Tensor> args,
                  const std::size_t (&at)[9]) {
  Problem& p = w.p;
  p = Problem::of(inv);
  const std::int64_t bq = config.get("block_q"), bk = config.get("block_k"), lanes = isa().lanes;
  if (bq <= 0 || bk <= 0 || bk % lanes != 0)
    throw InvalidArgument("flash_attention cpu: block_q " + std::to_string(bq) + " / block_k " + std::to_string(bk) +
                          " must be positive, block_k a multiple of " + std::to_string(lanes));
  std::vector<std::int64_t> cu_q, cu_k;
  if (p.varlen) {
    cu_q = read_i32(args[at[5]]);
    cu_k = read_i32(args[at[6]]);
  }
  const Sequences seq = sequences(p, cu_q, cu_k);
  std::int64_t block0 = 0;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const auto i = static_cast<std::size_t>(b);
    w.seqs.push_back({seq.q_start[i], seq.q_len[i], seq.k_start[i], seq.k_len[i], block0});
    const std::int64_t kblocks = (seq.k_len[i] + bk - 1) / bk;
    for (std::int64_t kb = 0; kb < kblocks; ++kb)
      for (std::int64_t h = 0; h < p.kv_heads; ++h)
        w.packs.push_back({static_cast<std::int32_t>(b), static_cast<std::int32_t>(h), static_cast<std::int32_t>(kb)});
    block0 += kblocks;
  }
  w.nblocks = block0;
  w.keys = w.packs;
  // Query tasks, the ones that see the most key blocks first so the pool ends evenly.
  std::vector<std::pair<std::int64_t, cpu::Task>> weighted;
  for (std::int64_t b = 0; b < p.batch; ++b) {
    const auto& s = w.seqs[static_cast<std::size_t>(b)];
    for (std::int64_t qb = 0; qb * bq < s.q_len; ++qb) {
      const std::int64_t i0 = qb * bq, i1 = std::min(s.q_len, i0 + bq) - 1;
      const std::int64_t lo = std::max<std::int64_t>(0, p.key_lo(i0, s.q_len, s.k_len));
      const std::int64_t hi = std::min(s.k_len - 1, p.key_hi(i1, s.q_len, s.k_len));
      const std::int64_t work = hi >= lo ? hi / bk - lo / bk + 1 : 0;
      for (std::int64_t h = 0; h < p.heads; ++h)
        weighted.push_back({work, {static_cast<std::int32_t>(b), static_cast<std::int32_t>(h), static_cast<std::int32_t>(qb)}});
    }
  }
  std::stable_sort(weighted.begin(), weighted.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& [_, t] : weighted) w.queries.push_back(t);

  cpu::Plan& P = w.plan;
  P.heads = p.heads;
  P.kv_heads = p.kv_heads;
  P.group = p.group();
  P.head_dim = p.head_dim;
  P.dp = round_up(p.head_dim, lanes);
  P.bq = bq;
  P.bk = bk;
  P.seq_q = p.seq_q;
  P.seq_k = p.seq_k;
  P.total_q = p.total_q;
  P.varlen = p.varlen;
  P.dtype = p.dtype;
  P.q = data(args[at[0]]);
  P.k = data(args[at[1]]);
  P.v = data(args[at[2]]);
  P.bias = p.has_bias ? data(args[at[3]]) : nullptr;
  P.bias_dtype = p.bias_dtype;
  P.bias_batch = p.bias_batch;
  P.bias_heads = p.bias_heads;
  if (p.has_sinks) {
    for (double x : args[at[4]].read()) w.sinks.push_back(static_cast<float>(x));
    P.sinks = w.sinks.data();
  }
  P.q_seg = p.has_segments ? static_cast<const std::int32_t*>(data(args[at[7]])) : nullptr;
  P.k_seg = p.has_segments ? static_cast<const std::int32_t*>(data(args[at[8]])) : nullptr;
  P.seqs = w.seqs.data();
  P.causal = p.causal;
  P.window_left = p.window_left;
  P.window_right = p.window_right;
  P.diagonal_offset = p.diagonal_offset;
  constexpr double log2e = 1.4426950408889634;
  if (p.softcap > 0) {
    // t = u / cap, then z * log2 e = (cap * log2 e) * tanh(t).
    P.qscale = static_cast<float>(p.scale / p.softcap);
    P.bias_scale = static_cast<float>(1.0 / p.softcap);
    P.cap2 = static_cast<float>(p.softcap * log2e);
  } else {
    P.qscale = static_cast<float>(p.scale * log2e);
    P.bias_scale = static_cast<float>(log2e);
    P.cap2 = 0.f;
  }
  P.softmax_scale = static_cast<float>(p.scale);
  P.grad_scale = static_cast<float>(p.scale / static_cast<double>(P.qscale));
  P.dropout = p.dropout > 0;
  P.threshold = p.threshold;
  P.seed_lo = static_cast<std::uint32_t>(p.seed);
  P.seed_hi = static_cast<std::uint32_t>(p.seed >> 32);
  P.keep_scale = static_cast<float>(1.0 / (1.0 - p.dropout));
}

// Runs fn(i) for i in [0, n) on the pool, each call with this thread's scratch.
template <class Fn>
void spread(ejk::cpu::ThreadPool& pool, std::int64_t n, std::int64_t scratch_floats, Fn fn) {
  pool.parallel_for(n, [&](std::int64_t i) {
    thread_local std::vector<float> scratch;
    if (static_cast<std::int64_t>(scratch.size()) < scratch_floats) scratch.resize(static_cast<std::size_t>(scratch_floats));
    fn(i, scratch.data());
  });
}

// Packed key blocks live across calls on the calling thread, so repeated calls reuse the memory.
float* pack_memory(std::int64_t floats) {
  thread_local std::vector<float> store;
  if (static_cast<std::int64_t>(store.size()) < floats) {
    store.clear();
    store.shrink_to_fit();
    store.resize(static_cast<std::size_t>(floats));
  }
  return store.data();
}

class CpuForward final : public Implementation {
 public:
  std::string_view kernel() const override { return "flash_attention"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return forward_args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(FlashAttentionKernel().vars(inv), dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(inv, FlashAttentionKernel().vars(inv), dev, *this);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const cpu::Isa& I = isa();
    Prepared w;
    prepare_work(w, inv, config, args,
            {fwd::q, fwd::k, fwd::v, fwd::bias, fwd::softmax_aux, fwd::cu_seqlens_q, fwd::cu_seqlens_k,
             fwd::q_segment_ids, fwd::kv_segment_ids});
    cpu::Plan& P = w.plan;
    const std::int64_t per_block = P.kv_heads * (P.head_dim * P.bk + P.bk * P.dp);
    P.kt = pack_memory(w.nblocks * per_block);
    P.vp = P.kt + w.nblocks * P.kv_heads * P.head_dim * P.bk;
    P.out = mutable_data(args[fwd::out]);
    P.lse = static_cast<float*>(mutable_data(args[fwd::lse]));

    P.tasks = w.packs.data();
    pool.parallel_for(static_cast<std::int64_t>(w.packs.size()), [&](std::int64_t i) { I.pack_forward(P, i); });
    P.tasks = w.queries.data();
    spread(pool, static_cast<std::int64_t>(w.queries.size()), I.scratch(P),
           [&](std::int64_t i, float* scratch) { I.forward(P, i, scratch); });
  }
};

class CpuBackward final : public Implementation {
 public:
  std::string_view kernel() const override { return "flash_attention_bwd"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return backward_args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(FlashAttentionBwdKernel().vars(inv), dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(inv, FlashAttentionBwdKernel().vars(inv), dev, *this);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const cpu::Isa& I = isa();
    Prepared w;
    prepare_work(w, inv, config, args,
            {bwd::q, bwd::k, bwd::v, bwd::bias, bwd::softmax_aux, bwd::cu_seqlens_q, bwd::cu_seqlens_k,
             bwd::q_segment_ids, bwd::kv_segment_ids});
    const Problem& p = w.p;
    cpu::Plan& P = w.plan;
    const std::int64_t trans = w.nblocks * P.kv_heads * P.head_dim * P.bk;
    const std::int64_t rows = w.nblocks * P.kv_heads * P.bk * P.dp;
    const std::int64_t bias_n = p.has_bias ? args[bwd::bias].numel() : 0;
    const std::int64_t delta_n = p.heads * p.total_q, parts_n = static_cast<std::int64_t>(w.queries.size());
    P.kt = pack_memory(2 * trans + rows + delta_n + parts_n + bias_n);
    P.vt = P.kt + trans;
    P.kp = P.vt + trans;
    P.delta = P.kp + rows;
    P.sink_part = P.delta + delta_n;
    P.dbias = p.has_bias ? P.sink_part + parts_n : nullptr;
    if (P.dbias) std::fill(P.dbias, P.dbias + bias_n, 0.f);
    P.o = data(args[bwd::out]);
    P.dout = data(args[bwd::dout]);
    P.lse_in = static_cast<const float*>(data(args[bwd::lse]));
    P.dq = mutable_data(args[bwd::dq]);
    P.dk = mutable_data(args[bwd::dk]);
    P.dv = mutable_data(args[bwd::dv]);

    P.tasks = w.packs.data();
    pool.parallel_for(static_cast<std::int64_t>(w.packs.size()), [&](std::int64_t i) { I.pack_backward(P, i); });
    P.tasks = w.queries.data();
    pool.parallel_for(parts_n, [&](std::int64_t i) { I.backward_prep(P, i); });

    // dk/dv tasks own disjoint rows of dk, dv and (unbroadcast) dbias. Where the bias is
    // broadcast over batch or heads, tasks of different sequences / kv heads would add into
    // the same dbias entries: those run in successive phases instead of atomically.
    const bool batch_shared = p.has_bias && p.bias_batch == 1 && p.batch > 1;
    const bool heads_shared = p.has_bias && p.bias_heads == 1 && p.kv_heads > 1;
    std::vector<std::vector<cpu::Task>> phases(1);
    if (batch_shared || heads_shared) {
      phases.assign(static_cast<std::size_t>((batch_shared ? p.batch : 1) * (heads_shared ? p.kv_heads : 1)), {});
      for (const auto& t : w.keys)
        phases[static_cast<std::size_t>((batch_shared ? t.seq : 0) * (heads_shared ? p.kv_heads : 1) +
                                        (heads_shared ? t.head : 0))]
            .push_back(t);
    } else {
      phases[0] = w.keys;
    }
    const std::int64_t scratch = I.scratch(P);
    for (std::size_t ph = 0; ph + 1 < phases.size(); ++ph) {
      P.tasks = phases[ph].data();
      spread(pool, static_cast<std::int64_t>(phases[ph].size()), scratch,
             [&](std::int64_t i, float* s) { I.backward_dkdv(P, i, s); });
    }
    // The last dk/dv phase and the dq pass share one parallel loop: dq never touches dbias.
    std::vector<cpu::Task> mixed = phases.back();
    const auto nkv = static_cast<std::int64_t>(mixed.size());
    mixed.insert(mixed.end(), w.queries.begin(), w.queries.end());
    P.tasks = mixed.data();
    spread(pool, static_cast<std::int64_t>(mixed.size()), scratch, [&](std::int64_t i, float* s) {
      if (i < nkv) {
        I.backward_dkdv(P, i, s);
      } else {
        // backward_dq reads P.tasks[i]: the query task sits at i in the mixed table.
        I.backward_dq(P, i, s);
      }
    });

    if (p.has_bias) {
      std::vector<double> vals(P.dbias, P.dbias + bias_n);
      args[bwd::dbias].write(vals);
    }
    if (p.has_sinks) {
      std::vector<double> ds(static_cast<std::size_t>(p.heads), 0.0);
      for (std::size_t i = 0; i < w.queries.size(); ++i)
        ds[static_cast<std::size_t>(w.queries[i].head)] += P.sink_part[i];
      args[bwd::dsoftmax_aux].write(ds);
    }
  }
};

}  // namespace

EJK_BUILTIN(implementations, "flash_attention/cpu") {
  r.add(std::make_shared<CpuForward>());
  r.add(std::make_shared<CpuBackward>());
}

}  // namespace ejk::kernels::flash_attention
