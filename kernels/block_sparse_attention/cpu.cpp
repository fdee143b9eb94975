// block_sparse_attention and its backward on the native CPU backend, over the device's thread
// pool. q, k, v (and out, dout) are converted to f32 once; then
//   forward  one task per (batch, head, tile of block_m queries): for each live key block of the
//            tile's query block, tiles of block_n keys: scores, online softmax, accumulation;
//   dq       the same tasks, with P from the saved lse and dz = P (dP - D);
//   dk, dv   one task per (batch, kv head, tile of block_n keys): for each head of the group and
//            each live query block of the tile's key block (the transposed lists), tiles of
//            block_m queries; the group's heads are summed in the task, so nothing is shared.
// Tiles wholly above the causal diagonal are skipped as the blocks absent from the lists are.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "block_sparse_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::block_sparse_attention {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

std::vector<float> to_f32(const Tensor& t, ejk::cpu::ThreadPool& pool) {
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  const void* base = ejk::cpu::cpu_buffer(t.buffer()).data();
  const std::int64_t n = t.numel(), chunk = 1 << 16;
  pool.parallel_for((n + chunk - 1) / chunk, [&](std::int64_t c) {
    for (std::int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) {
      const auto u = static_cast<std::size_t>(i);
      switch (t.dtype()) {
        case DType::f16: out[u] = f16_to_f32(static_cast<const std::uint16_t*>(base)[i]); break;
        case DType::bf16: out[u] = bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]); break;
        default: out[u] = static_cast<const float*>(base)[i];
      }
    }
  });
  return out;
}

void store(const Tensor& t, std::int64_t i, float x) {
  void* base = ejk::cpu::cpu_buffer(t.buffer()).data();
  switch (t.dtype()) {
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(x); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(x); break;
    default: static_cast<float*>(base)[i] = x;
  }
}

std::vector<std::int64_t> ints(const Tensor& t) {
  const auto* p = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

// The problem's arrays and the masked, capped logits of a tile.
struct Tiles {
  const Problem& p;
  const float *q, *k, *v;
  const std::int32_t *qseg = nullptr, *kseg = nullptr;
  float scale = 0, cap = 0;

  const float* qrow(std::int64_t b, std::int64_t i, std::int64_t h) const {
    return q + ((b * p.seq_q + i) * p.heads + h) * p.head_dim;
  }
  std::int64_t krow(std::int64_t b, std::int64_t j, std::int64_t hk) const {
    return ((b * p.seq_k + j) * p.kv_heads + hk) * p.head_dim;
  }
  // True when no (i, j) of queries [i0, i1) and keys from j0 is below the causal diagonal.
  bool above_diagonal(std::int64_t i1, std::int64_t j0) const { return p.causal && j0 > i1 - 1 + p.seq_k - p.seq_q; }
  // S[r * n + t] = z(i0 + r, j0 + t), or -inf where not allowed.
  void logits(std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t m, std::int64_t j0, std::int64_t n,
              float* S) const {
    const std::int64_t hk = h / p.group(), D = p.head_dim, dd = p.seq_k - p.seq_q;
    for (std::int64_t r = 0; r < m; ++r) {
      const std::int64_t i = i0 + r;
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t j = j0 + t;
        float& s = S[r * n + t];
        if (i >= p.seq_q || j >= p.seq_k || (p.causal && j > i + dd) ||
            (qseg && qseg[b * p.seq_q + i] != kseg[b * p.seq_k + j])) {
          s = neg_inf;
          continue;
        }
        const float* a = qrow(b, i, h);
        const float* c = k + krow(b, j, hk);
        float dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += a[d] * c[d];
        dot *= scale;
        s = cap > 0 ? cap * std::tanh(dot / cap) : dot;
      }
    }
  }
};

struct Geometry {
  std::int64_t bm, bn;
};

Geometry read_config(const Problem& p, const Config& config, const char* k) {
  const std::int64_t bm = config.get("block_m"), bn = config.get("block_n");
  if (bm <= 0 || bn <= 0 || p.block_q % bm != 0 || p.block_k % bn != 0)
    throw InvalidArgument(std::string(k) + " cpu: config " + config.canonical() + " needs block_m dividing block_q " +
                          std::to_string(p.block_q) + " and block_n dividing block_k " + std::to_string(p.block_k));
  return {bm, bn};
}

ParamSpace cpu_space(const Invocation& inv, const DeviceInfo& dev, Vars vars) {
  ParamSpace s;
  s.param("block_m", {1, 2, 4, 8, 16, 32, 64})
      .param("block_n", {1, 2, 4, 8, 16, 32, 64})
      // A kernel tile lies within one block of the layout.
      .constraint("block_q % block_m == 0")
      .constraint("block_k % block_n == 0")
      // The tile's scores and accumulators stay in the L2 cache.
      .constraint("(block_m * block_n + 2 * block_m * head_dim) * 4 <= local_mem")
      .bind(std::move(vars))
      .bind(device_vars(dev));
  (void)inv;
  return s;
}

// The largest tiles of a few that fit: more work per list entry, fewer passes over k and v.
Config cpu_heuristic(const ParamSpace& s, const Invocation& inv, const char* k) {
  for (std::int64_t bm : {32, 16, 64, 8, 4, 2, 1})
    for (std::int64_t bn : {32, 64, 16, 8, 4, 2, 1}) {
      Config c{{"block_m", bm}, {"block_n", bn}};
      if (s.admits(c)) return c;
    }
  throw InvalidArgument(std::string(k) + " cpu: empty parameter space for " + inv.signature());
}

class CpuForward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(inv, dev, BlockSparseAttentionKernel().vars(inv));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), inv, "block_sparse_attention");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const auto [bm, bn] = read_config(p, config, "block_sparse_attention");
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const auto counts = ints(args[fwd::kv_block_counts]), indices = ints(args[fwd::kv_block_indices]);
    check_lists(p, counts, indices, false);
    if (p.batch * p.seq_q * p.heads == 0) return;
    const auto q = to_f32(args[fwd::q], pool), k = to_f32(args[fwd::k], pool), v = to_f32(args[fwd::v], pool);
    Tiles t{p, q.data(), k.data(), v.data()};
    if (p.has_segments) {
      t.qseg = ejk::cpu::cpu_buffer(args[fwd::q_segment_ids].buffer()).as<std::int32_t>();
      t.kseg = ejk::cpu::cpu_buffer(args[fwd::kv_segment_ids].buffer()).as<std::int32_t>();
    }
    t.scale = static_cast<float>(p.scale);
    t.cap = static_cast<float>(p.softcap);
    float* lse = ejk::cpu::cpu_buffer(args[fwd::lse].buffer()).as<float>();
    const std::int64_t tiles = (p.seq_q + bm - 1) / bm, D = p.head_dim;
    pool.parallel_for(p.batch * p.heads * tiles, [&](std::int64_t task) {
      const std::int64_t tile = task % tiles, h = task / tiles % p.heads, b = task / (tiles * p.heads);
      const std::int64_t i0 = tile * bm, m = std::min(bm, p.seq_q - i0), bi = i0 / p.block_q, hk = h / p.group();
      std::vector<float> S(static_cast<std::size_t>(bm * bn)), acc(static_cast<std::size_t>(bm * D), 0.f);
      std::vector<float> mx(static_cast<std::size_t>(bm), neg_inf), l(static_cast<std::size_t>(bm), 0.f);
      const std::int64_t row = p.list_row(b, h, p.nbq, bi);
      for (std::int64_t e = 0; e < counts[static_cast<std::size_t>(row)]; ++e) {
        const std::int64_t bj = indices[static_cast<std::size_t>(row * p.nbk + e)];
        const std::int64_t jend = std::min(p.seq_k, (bj + 1) * p.block_k);
        for (std::int64_t j0 = bj * p.block_k; j0 < jend; j0 += bn) {
          if (t.above_diagonal(i0 + m, j0)) break;
          const std::int64_t n = std::min(bn, jend - j0);
          t.logits(b, h, i0, m, j0, n, S.data());
          for (std::int64_t r = 0; r < m; ++r) {
            float* s = S.data() + r * n;
            float top = mx[static_cast<std::size_t>(r)];
            for (std::int64_t c = 0; c < n; ++c) top = std::max(top, s[c]);
            if (top == neg_inf) continue;  // nothing allowed yet in this row
            const float alpha = std::exp(mx[static_cast<std::size_t>(r)] - top);
            float sum = 0;
            for (std::int64_t c = 0; c < n; ++c) sum += (s[c] = std::exp(s[c] - top));
            l[static_cast<std::size_t>(r)] = l[static_cast<std::size_t>(r)] * alpha + sum;
            mx[static_cast<std::size_t>(r)] = top;
            float* a = acc.data() + r * D;
            for (std::int64_t d = 0; d < D; ++d) a[d] *= alpha;
            for (std::int64_t c = 0; c < n; ++c) {
              if (s[c] == 0.f) continue;
              const float* vr = t.v + t.krow(b, j0 + c, hk);
              for (std::int64_t d = 0; d < D; ++d) a[d] += s[c] * vr[d];
            }
          }
        }
      }
      for (std::int64_t r = 0; r < m; ++r) {
        const float lr = l[static_cast<std::size_t>(r)];
        const float inv_l = lr > 0 ? 1.f / lr : 0.f;  // a row with no allowed key gives 0
        const std::int64_t o = ((b * p.seq_q + i0 + r) * p.heads + h) * D;
        for (std::int64_t d = 0; d < D; ++d) store(args[fwd::out], o + d, acc[static_cast<std::size_t>(r * D + d)] * inv_l);
        lse[(b * p.heads + h) * p.seq_q + i0 + r] = lr > 0 ? mx[static_cast<std::size_t>(r)] + std::log(lr) : neg_inf;
      }
    });
  }
};

class CpuBackward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention_bwd"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(inv, dev, BlockSparseAttentionBwdKernel().vars(inv));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), inv, "block_sparse_attention_bwd");
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const auto [bm, bn] = read_config(p, config, "block_sparse_attention_bwd");
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const auto counts = ints(args[bwd::kv_block_counts]), indices = ints(args[bwd::kv_block_indices]);
    const auto qcounts = ints(args[bwd::q_block_counts]), qindices = ints(args[bwd::q_block_indices]);
    check_lists(p, counts, indices, false);
    check_lists(p, qcounts, qindices, true);
    const std::int64_t D = p.head_dim;
    const auto q = to_f32(args[bwd::q], pool), k = to_f32(args[bwd::k], pool), v = to_f32(args[bwd::v], pool);
    const auto out = to_f32(args[bwd::out], pool), dout = to_f32(args[bwd::dout], pool);
    const float* lse = ejk::cpu::cpu_buffer(args[bwd::lse].buffer()).as<float>();
    Tiles t{p, q.data(), k.data(), v.data()};
    if (p.has_segments) {
      t.qseg = ejk::cpu::cpu_buffer(args[bwd::q_segment_ids].buffer()).as<std::int32_t>();
      t.kseg = ejk::cpu::cpu_buffer(args[bwd::kv_segment_ids].buffer()).as<std::int32_t>();
    }
    t.scale = static_cast<float>(p.scale);
    t.cap = static_cast<float>(p.softcap);
    // D_i = dout_i . out_i, [batch, heads, seq_q] like lse.
    std::vector<float> delta(static_cast<std::size_t>(p.batch * p.heads * p.seq_q));
    pool.parallel_for(p.batch * p.seq_q, [&](std::int64_t bi) {
      const std::int64_t b = bi / std::max<std::int64_t>(1, p.seq_q), i = bi % std::max<std::int64_t>(1, p.seq_q);
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::int64_t o = ((b * p.seq_q + i) * p.heads + h) * D;
        float s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += dout[static_cast<std::size_t>(o + d)] * out[static_cast<std::size_t>(o + d)];
        delta[static_cast<std::size_t>((b * p.heads + h) * p.seq_q + i)] = s;
      }
    });
    // dz from the logits z of a tile (in place): P (dP - D) times the cap's derivative.
    auto dz = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j, float z) -> std::pair<float, float> {
      const float L = lse[(b * p.heads + h) * p.seq_q + i];
      if (z == neg_inf || L == neg_inf) return {0.f, 0.f};
      const float P = std::exp(z - L);
      const float* g = dout.data() + ((b * p.seq_q + i) * p.heads + h) * D;
      const float* vr = t.v + t.krow(b, j, h / p.group());
      float dp = 0;
      for (std::int64_t d = 0; d < D; ++d) dp += g[d] * vr[d];
      float ds = P * (dp - delta[static_cast<std::size_t>((b * p.heads + h) * p.seq_q + i)]);
      if (t.cap > 0) {
        const float th = z / t.cap;
        ds *= 1.f - th * th;
      }
      return {P, ds * t.scale};
    };

    const std::int64_t qtiles = (p.seq_q + bm - 1) / bm;
    pool.parallel_for(p.batch * p.heads * qtiles, [&](std::int64_t task) {
      const std::int64_t tile = task % qtiles, h = task / qtiles % p.heads, b = task / (qtiles * p.heads);
      const std::int64_t i0 = tile * bm, m = std::min(bm, p.seq_q - i0), bi = i0 / p.block_q, hk = h / p.group();
      std::vector<float> S(static_cast<std::size_t>(bm * bn)), acc(static_cast<std::size_t>(bm * D), 0.f);
      const std::int64_t row = p.list_row(b, h, p.nbq, bi);
      for (std::int64_t e = 0; e < counts[static_cast<std::size_t>(row)]; ++e) {
        const std::int64_t bj = indices[static_cast<std::size_t>(row * p.nbk + e)];
        const std::int64_t jend = std::min(p.seq_k, (bj + 1) * p.block_k);
        for (std::int64_t j0 = bj * p.block_k; j0 < jend; j0 += bn) {
          if (t.above_diagonal(i0 + m, j0)) break;
          const std::int64_t n = std::min(bn, jend - j0);
          t.logits(b, h, i0, m, j0, n, S.data());
          for (std::int64_t r = 0; r < m; ++r)
            for (std::int64_t c = 0; c < n; ++c) {
              const float ds = dz(b, h, i0 + r, j0 + c, S[static_cast<std::size_t>(r * n + c)]).second;
              if (ds == 0.f) continue;
              const float* kr = t.k + t.krow(b, j0 + c, hk);
              float* a = acc.data() + r * D;
              for (std::int64_t d = 0; d < D; ++d) a[d] += ds * kr[d];
            }
        }
      }
      for (std::int64_t r = 0; r < m; ++r) {
        const std::int64_t o = ((b * p.seq_q + i0 + r) * p.heads + h) * D;
        for (std::int64_t d = 0; d < D; ++d) store(args[bwd::dq], o + d, acc[static_cast<std::size_t>(r * D + d)]);
      }
    });

    const std::int64_t ktiles = (p.seq_k + bn - 1) / bn;
    pool.parallel_for(p.batch * p.kv_heads * ktiles, [&](std::int64_t task) {
      const std::int64_t tile = task % ktiles, hk = task / ktiles % p.kv_heads, b = task / (ktiles * p.kv_heads);
      const std::int64_t j0 = tile * bn, n = std::min(bn, p.seq_k - j0), bj = j0 / p.block_k;
      std::vector<float> S(static_cast<std::size_t>(bm * bn)), dk(static_cast<std::size_t>(bn * D), 0.f),
          dv(static_cast<std::size_t>(bn * D), 0.f);
      for (std::int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
        const std::int64_t row = p.list_row(b, h, p.nbk, bj);
        for (std::int64_t e = 0; e < qcounts[static_cast<std::size_t>(row)]; ++e) {
          const std::int64_t bi = qindices[static_cast<std::size_t>(row * p.nbq + e)];
          const std::int64_t iend = std::min(p.seq_q, (bi + 1) * p.block_q);
          for (std::int64_t i0 = bi * p.block_q; i0 < iend; i0 += bm) {
            const std::int64_t m = std::min(bm, iend - i0);
            if (t.above_diagonal(i0 + m, j0)) continue;
            t.logits(b, h, i0, m, j0, n, S.data());
            for (std::int64_t r = 0; r < m; ++r) {
              const float* g = dout.data() + ((b * p.seq_q + i0 + r) * p.heads + h) * D;
              const float* qr = t.qrow(b, i0 + r, h);
              for (std::int64_t c = 0; c < n; ++c) {
                const auto [P, ds] = dz(b, h, i0 + r, j0 + c, S[static_cast<std::size_t>(r * n + c)]);
                if (P == 0.f) continue;
                float* a = dv.data() + c * D;
                float* w = dk.data() + c * D;
                for (std::int64_t d = 0; d < D; ++d) {
                  a[d] += P * g[d];
                  w[d] += ds * qr[d];
                }
              }
            }
          }
        }
      }
      for (std::int64_t c = 0; c < n; ++c) {
        const std::int64_t o = t.krow(b, j0 + c, hk);
        for (std::int64_t d = 0; d < D; ++d) {
          store(args[bwd::dk], o + d, dk[static_cast<std::size_t>(c * D + d)]);
          store(args[bwd::dv], o + d, dv[static_cast<std::size_t>(c * D + d)]);
        }
      }
    });
  }
};

}  // namespace

std::shared_ptr<const Implementation> cpu_implementation() { return std::make_shared<CpuForward>(); }
std::shared_ptr<const Implementation> cpu_bwd_implementation() { return std::make_shared<CpuBackward>(); }

}  // namespace ejk::kernels::block_sparse_attention
