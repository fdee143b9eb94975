// block_sparse_attention and its backward on the native CPU backend, over the device's thread
// pool. q, k, v (and out, dout) are converted to f32 once; then
//   forward  one task per (batch, head, tile of block_m queries): for each live key block of the
//            tile's query block, tiles of block_n keys: scores, online softmax, accumulation;
//   dq       the same tasks (their own tile), with P from the saved lse and dz = P (dP - D);
//   dk, dv   one task per (batch, kv head, tile of block_n keys): for each head of the group and
//            each live query block of the tile's key block (the transposed lists), tiles of
//            block_m queries; the group's heads are summed in the task, so nothing is shared.
// Tiles wholly above the causal diagonal are skipped as the blocks absent from the lists are.
// Each task body is compiled twice (default and AVX2+FMA, picked at run time); the tile
// products hold 4 x 8 blocks in GCC vector registers and the exponentials are vectorised.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "common/builtin.hpp"
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

#if defined(__x86_64__)
bool has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

[[gnu::always_inline]] inline float dot(const float* a, const float* b, std::int64_t n) {
  float lanes[16] = {};
  std::int64_t d = 0;
  for (; d + 16 <= n; d += 16)
    for (int x = 0; x < 16; ++x) lanes[x] += a[d + x] * b[d + x];
  float s = 0;
  for (; d < n; ++d) s += a[d] * b[d];
  for (float x : lanes) s += x;
  return s;
}

// Eight floats in a GCC vector: one AVX register in the AVX2 build, two SSE ones otherwise.
// The loads and stores below are always inlined, so the ABI GCC warns about (vectors passed by
// value without AVX) never exists in this file; the other helpers take pointers only.
#pragma GCC diagnostic ignored "-Wpsabi"
using vf8 = float __attribute__((vector_size(32)));
using vi8 = std::int32_t __attribute__((vector_size(32)));
[[gnu::always_inline]] inline vf8 vload(const float* p) {
  vf8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void vstore(float* p, vf8 v) { std::memcpy(p, &v, sizeof v); }

// x[c] = e^(x[c] - top) for c < n (n a multiple of 8): 2^y as an exact power of two times a
// degree-6 polynomial (Cephes exp2f's coefficients, as flash_attention's CPU kernels); -inf
// gives exactly 0.
[[gnu::always_inline]] inline void exp_shifted(float* x, std::int64_t n, float top) {
  for (std::int64_t c = 0; c < n; c += 8) {
    const vf8 y = (vload(x + c) - top) * 1.44269504088896340736f;
    const vi8 under = y < -126.f;
    vf8 t = y < -126.f ? vf8{} - 126.f : y;
    const vf8 r = (t + 12582912.f) - 12582912.f;  // rounds to an integer (1.5 * 2^23)
    const vf8 f = t - r;
    vf8 q = vf8{} + 1.535336188319500e-4f;
    q = q * f + 1.339887440266574e-3f;
    q = q * f + 9.618437357674640e-3f;
    q = q * f + 5.550332471162809e-2f;
    q = q * f + 2.402264791363012e-1f;
    q = q * f + 6.931472028550421e-1f;
    q = q * f + 1.f;
    const vi8 bits = (__builtin_convertvector(r, vi8) + 127) << 23;
    vf8 scale;
    std::memcpy(&scale, &bits, sizeof scale);
    vstore(x + c, under ? vf8{} : q * scale);
  }
}

// S[r * n8 + c] = q_r . Kt[:, c] for r < m, c < n8 (a multiple of 8), with row r of q at
// q + r * ldq: four rows by eight keys held in registers across head_dim.
[[gnu::always_inline]] inline void scores(const float* q, std::int64_t ldq, std::int64_t m, const float* Kt,
                                          std::int64_t n8, std::int64_t D, float* S) {
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4)
    for (std::int64_t c = 0; c < n8; c += 8) {
      vf8 a0{}, a1{}, a2{}, a3{};
      const float *q0 = q + r * ldq, *q1 = q0 + ldq, *q2 = q1 + ldq, *q3 = q2 + ldq;
      for (std::int64_t d = 0; d < D; ++d) {
        const vf8 k = vload(Kt + d * n8 + c);
        a0 += q0[d] * k;
        a1 += q1[d] * k;
        a2 += q2[d] * k;
        a3 += q3[d] * k;
      }
      vstore(S + r * n8 + c, a0);
      vstore(S + (r + 1) * n8 + c, a1);
      vstore(S + (r + 2) * n8 + c, a2);
      vstore(S + (r + 3) * n8 + c, a3);
    }
  for (; r < m; ++r)
    for (std::int64_t c = 0; c < n8; c += 8) {
      vf8 a{};
      for (std::int64_t d = 0; d < D; ++d) a += q[r * ldq + d] * vload(Kt + d * n8 + c);
      vstore(S + r * n8 + c, a);
    }
}

// acc[r * D + d] += sum_{c < n} P[r * n8 + c] v_c[d], row c of v at v + c * ldv: four rows by
// eight columns of acc held in registers across the keys.
[[gnu::always_inline]] inline void accumulate(const float* P, std::int64_t n8, std::int64_t m, std::int64_t n,
                                              const float* v, std::int64_t ldv, std::int64_t D, float* acc) {
  const std::int64_t D8 = D / 8 * 8;
  std::int64_t r = 0;
  for (; r + 4 <= m; r += 4)
    for (std::int64_t d = 0; d < D8; d += 8) {
      float* o = acc + r * D + d;
      vf8 a0 = vload(o), a1 = vload(o + D), a2 = vload(o + 2 * D), a3 = vload(o + 3 * D);
      const float* p = P + r * n8;
      for (std::int64_t c = 0; c < n; ++c) {
        const vf8 x = vload(v + c * ldv + d);
        a0 += p[c] * x;
        a1 += p[n8 + c] * x;
        a2 += p[2 * n8 + c] * x;
        a3 += p[3 * n8 + c] * x;
      }
      vstore(o, a0);
      vstore(o + D, a1);
      vstore(o + 2 * D, a2);
      vstore(o + 3 * D, a3);
    }
  for (std::int64_t rr = 0; rr < m; ++rr) {
    const bool vectorised = rr < r;
    for (std::int64_t d = vectorised ? D8 : 0; d < D; ++d) {
      float a = acc[rr * D + d];
      for (std::int64_t c = 0; c < n; ++c) a += P[rr * n8 + c] * v[c * ldv + d];
      acc[rr * D + d] = a;
    }
  }
}

// The problem's arrays.
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
};

struct Geometry {
  std::int64_t bm, bn;
};

// The tile named by `prefix` ("" or "dq_") in config.
Geometry read_config(const Problem& p, const Config& config, const char* k, const std::string& prefix = "") {
  const std::int64_t bm = config.get(prefix + "block_m"), bn = config.get(prefix + "block_n");
  if (bm <= 0 || bn <= 0 || p.block_q % bm != 0 || p.block_k % bn != 0)
    throw InvalidArgument(std::string(k) + " cpu: config " + config.canonical() + " needs " + prefix +
                          "block_m dividing block_q " + std::to_string(p.block_q) + " and " + prefix +
                          "block_n dividing block_k " + std::to_string(p.block_k));
  return {bm, bn};
}

// block_m x block_n: the tile of queries by keys (the forward's; the backward's dk/dv pass), and
// for the backward dq_block_m x dq_block_n, the dq pass's.
ParamSpace cpu_space(bool backward, const DeviceInfo& dev, Vars vars) {
  ParamSpace s;
  const std::vector<Value> sizes{1, 2, 4, 8, 16, 32, 64};
  for (const std::string prefix : {"", "dq_"}) {
    if (!prefix.empty() && !backward) break;
    const std::string m = prefix + "block_m", n = prefix + "block_n";
    s.param(m, sizes).param(n, sizes);
    // A kernel tile lies within one block of the layout.
    s.constraint("block_q % " + m + " == 0").constraint("block_k % " + n + " == 0");
    // The tile's scores and accumulators stay in the L2 cache.
    s.constraint("(" + m + " * " + n + " + 2 * " + m + " * head_dim) * 4 <= local_mem");
  }
  s.bind(std::move(vars)).bind(device_vars(dev));
  return s;
}

// The largest tiles of a few that fit: more work per list entry, fewer passes over k and v.
Config cpu_heuristic(const ParamSpace& s, const Invocation& inv, const char* k, bool backward) {
  for (std::int64_t bm : {32, 16, 64, 8, 4, 2, 1})
    for (std::int64_t bn : {32, 64, 16, 8, 4, 2, 1}) {
      Config c{{"block_m", bm}, {"block_n", bn}};
      if (backward) c = Config{{"block_m", bm}, {"block_n", bn}, {"dq_block_m", bm}, {"dq_block_n", bn}};
      if (s.admits(c)) return c;
    }
  throw InvalidArgument(std::string(k) + " cpu: empty parameter space for " + inv.signature());
}

// Everything a task reads; outputs are f32 scratch converted to the storage dtype at the end.
struct Work {
  Tiles t;
  std::int64_t bm = 0, bn = 0;
  const std::int64_t *counts = nullptr, *indices = nullptr, *qcounts = nullptr, *qindices = nullptr;
  const float *dout = nullptr, *lse_in = nullptr, *delta = nullptr;
  float *out = nullptr, *lse = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

// Forward: one (batch, head, query tile).
[[gnu::always_inline]] inline void forward_task(const Work& w, std::int64_t task) {
  const Problem& p = w.t.p;
  const std::int64_t bm = w.bm, bn = w.bn, D = p.head_dim, tiles = (p.seq_q + bm - 1) / bm;
  const std::int64_t tile = task % tiles, h = task / tiles % p.heads, b = task / (tiles * p.heads);
  const std::int64_t i0 = tile * bm, m = std::min(bm, p.seq_q - i0), bi = i0 / p.block_q, hk = h / p.group();
  const std::int64_t bn8 = (bn + 7) / 8 * 8, dd = p.seq_k - p.seq_q;
  thread_local std::vector<float> scratch;
  scratch.assign(static_cast<std::size_t>(bm * bn8 + D * bn8 + bm * D + 2 * bm), 0.f);
  float* S = scratch.data();
  float* Kt = S + bm * bn8;
  float* acc = Kt + D * bn8;
  float* mx = acc + bm * D;
  float* l = mx + bm;
  std::fill(mx, mx + bm, neg_inf);
  const std::int64_t row = p.list_row(b, h, p.nbq, bi);
  for (std::int64_t e = 0; e < w.counts[row]; ++e) {
    const std::int64_t bj = w.indices[row * p.nbk + e];
    const std::int64_t jend = std::min(p.seq_k, (bj + 1) * p.block_k);
    for (std::int64_t j0 = bj * p.block_k; j0 < jend; j0 += bn) {
      if (w.t.above_diagonal(i0 + m, j0)) break;
      const std::int64_t n = std::min(bn, jend - j0), n8 = (n + 7) / 8 * 8;
      // Keys transposed, padded to eight with zeros.
      for (std::int64_t c = 0; c < n8; ++c) {
        const float* kr = c < n ? w.t.k + w.t.krow(b, j0 + c, hk) : nullptr;
        for (std::int64_t d = 0; d < D; ++d) Kt[d * n8 + c] = kr ? kr[d] : 0.f;
      }
      scores(w.t.qrow(b, i0, h), p.heads * D, m, Kt, n8, D, S);
      for (std::int64_t r = 0; r < m; ++r) {
        float* s = S + r * n8;
        const std::int64_t i = i0 + r;
        float top = mx[r];
        for (std::int64_t c = 0; c < n8; ++c) {
          const std::int64_t j = j0 + c;
          if (c >= n || (p.causal && j > i + dd) || (w.t.qseg && w.t.qseg[b * p.seq_q + i] != w.t.kseg[b * p.seq_k + j])) {
            s[c] = neg_inf;
            continue;
          }
          const float u = s[c] * w.t.scale;
          s[c] = w.t.cap > 0 ? w.t.cap * std::tanh(u / w.t.cap) : u;
          top = std::max(top, s[c]);
        }
        if (top == neg_inf) {  // nothing allowed yet in this row: P 0, the row unchanged
          std::fill(s, s + n8, 0.f);
          continue;
        }
        const float alpha = std::exp(mx[r] - top);
        exp_shifted(s, n8, top);
        float sum = 0;
        for (std::int64_t c = 0; c < n; ++c) sum += s[c];
        l[r] = l[r] * alpha + sum;
        mx[r] = top;
        float* a = acc + r * D;
        for (std::int64_t d = 0; d < D; ++d) a[d] *= alpha;
      }
      accumulate(S, n8, m, n, w.t.v + w.t.krow(b, j0, hk), p.kv_heads * D, D, acc);
    }
  }
  for (std::int64_t r = 0; r < m; ++r) {
    const float inv_l = l[r] > 0 ? 1.f / l[r] : 0.f;  // a row with no allowed key gives 0
    float* o = w.out + ((b * p.seq_q + i0 + r) * p.heads + h) * D;
    for (std::int64_t d = 0; d < D; ++d) o[d] = acc[r * D + d] * inv_l;
    w.lse[(b * p.heads + h) * p.seq_q + i0 + r] = l[r] > 0 ? mx[r] + std::log(l[r]) : neg_inf;
  }
}

// Logits of a tile from raw scores (q . k): scaled, capped, masked (-inf) where not allowed and
// past the n keys; returns nothing, works in place on rows of n8.
[[gnu::always_inline]] inline void mask_logits(const Work& w, std::int64_t b, std::int64_t i0, std::int64_t m,
                                               std::int64_t j0, std::int64_t n, std::int64_t n8, float* S) {
  const Problem& p = w.t.p;
  const std::int64_t dd = p.seq_k - p.seq_q;
  for (std::int64_t r = 0; r < m; ++r) {
    const std::int64_t i = i0 + r;
    float* s = S + r * n8;
    for (std::int64_t c = 0; c < n8; ++c) {
      const std::int64_t j = j0 + c;
      if (c >= n || (p.causal && j > i + dd) || (w.t.qseg && w.t.qseg[b * p.seq_q + i] != w.t.kseg[b * p.seq_k + j])) {
        s[c] = neg_inf;
        continue;
      }
      const float u = s[c] * w.t.scale;
      s[c] = w.t.cap > 0 ? w.t.cap * std::tanh(u / w.t.cap) : u;
    }
  }
}

// Rows c < n8 of x (row c at x + c * ldx, n of them real, the rest zero) transposed into
// T[d * n8 + c].
[[gnu::always_inline]] inline void transpose_rows(const float* x, std::int64_t ldx, std::int64_t n, std::int64_t n8,
                                                  std::int64_t D, float* T) {
  for (std::int64_t c = 0; c < n8; ++c)
    for (std::int64_t d = 0; d < D; ++d) T[d * n8 + c] = c < n ? x[c * ldx + d] : 0.f;
}

// Row r of a tile: S (logits z) becomes P = e^(z - lse) and dS (dout . v) becomes
// dz * softmax_scale = P (dP - D) times the cap's derivative 1 - tanh^2 = 1 - (z / cap)^2; all
// zero when the row has no allowed key (lse -inf).
[[gnu::always_inline]] inline void grad_row(const Work& w, std::int64_t at, float* S, float* dS, std::int64_t n8) {
  const float L = w.lse_in[at], Di = w.delta[at], cap = w.t.cap, scale = w.t.scale;
  if (L == neg_inf) {
    std::fill(S, S + n8, 0.f);
    std::fill(dS, dS + n8, 0.f);
    return;
  }
  float z[64];  // n8 <= 64: block_n is at most 64, a power of two
  std::copy_n(S, n8, z);
  exp_shifted(S, n8, L);
  for (std::int64_t c = 0; c < n8; ++c) {
    const float th = cap > 0 && S[c] > 0.f ? z[c] / cap : 0.f;
    dS[c] = S[c] * (dS[c] - Di) * (1.f - th * th) * scale;
  }
}

// dq: one (batch, head, query tile).
[[gnu::always_inline]] inline void dq_task(const Work& w, std::int64_t task) {
  const Problem& p = w.t.p;
  const std::int64_t bm = w.bm, bn = w.bn, D = p.head_dim, tiles = (p.seq_q + bm - 1) / bm;
  const std::int64_t tile = task % tiles, h = task / tiles % p.heads, b = task / (tiles * p.heads);
  const std::int64_t i0 = tile * bm, m = std::min(bm, p.seq_q - i0), bi = i0 / p.block_q, hk = h / p.group();
  const std::int64_t bn8 = (bn + 7) / 8 * 8, ld = p.heads * D, ldk = p.kv_heads * D;
  thread_local std::vector<float> scratch;
  scratch.assign(static_cast<std::size_t>(2 * bm * bn8 + 2 * D * bn8 + bm * D), 0.f);
  float* S = scratch.data();
  float* dS = S + bm * bn8;
  float* Kt = dS + bm * bn8;
  float* Vt = Kt + D * bn8;
  float* acc = Vt + D * bn8;
  const std::int64_t row = p.list_row(b, h, p.nbq, bi);
  for (std::int64_t e = 0; e < w.counts[row]; ++e) {
    const std::int64_t bj = w.indices[row * p.nbk + e];
    const std::int64_t jend = std::min(p.seq_k, (bj + 1) * p.block_k);
    for (std::int64_t j0 = bj * p.block_k; j0 < jend; j0 += bn) {
      if (w.t.above_diagonal(i0 + m, j0)) break;
      const std::int64_t n = std::min(bn, jend - j0), n8 = (n + 7) / 8 * 8;
      transpose_rows(w.t.k + w.t.krow(b, j0, hk), ldk, n, n8, D, Kt);
      transpose_rows(w.t.v + w.t.krow(b, j0, hk), ldk, n, n8, D, Vt);
      scores(w.t.qrow(b, i0, h), ld, m, Kt, n8, D, S);
      mask_logits(w, b, i0, m, j0, n, n8, S);
      scores(w.dout + ((b * p.seq_q + i0) * p.heads + h) * D, ld, m, Vt, n8, D, dS);
      for (std::int64_t r = 0; r < m; ++r) grad_row(w, (b * p.heads + h) * p.seq_q + i0 + r, S + r * n8, dS + r * n8, n8);
      accumulate(dS, n8, m, n, w.t.k + w.t.krow(b, j0, hk), ldk, D, acc);
    }
  }
  for (std::int64_t r = 0; r < m; ++r) std::copy_n(acc + r * D, D, w.dq + ((b * p.seq_q + i0 + r) * p.heads + h) * D);
}

// dk, dv: one (batch, kv head, key tile), the group's heads summed here.
[[gnu::always_inline]] inline void dkdv_task(const Work& w, std::int64_t task) {
  const Problem& p = w.t.p;
  const std::int64_t bm = w.bm, bn = w.bn, D = p.head_dim, tiles = (p.seq_k + bn - 1) / bn;
  const std::int64_t tile = task % tiles, hk = task / tiles % p.kv_heads, b = task / (tiles * p.kv_heads);
  const std::int64_t j0 = tile * bn, n = std::min(bn, p.seq_k - j0), bj = j0 / p.block_k;
  const std::int64_t n8 = (n + 7) / 8 * 8, bm8 = (bm + 7) / 8 * 8, ld = p.heads * D, ldk = p.kv_heads * D;
  thread_local std::vector<float> scratch;
  scratch.assign(static_cast<std::size_t>(2 * bm * n8 + 2 * n8 * bm8 + 2 * D * n8 + 2 * n8 * D), 0.f);
  float* S = scratch.data();
  float* dS = S + bm * n8;
  float* PT = dS + bm * n8;  // P and dS transposed: [n8][bm8]
  float* dST = PT + n8 * bm8;
  float* Kt = dST + n8 * bm8;
  float* Vt = Kt + D * n8;
  float* dk = Vt + D * n8;
  float* dv = dk + n8 * D;
  // The task's keys and values, transposed once for every query tile.
  transpose_rows(w.t.k + w.t.krow(b, j0, hk), ldk, n, n8, D, Kt);
  transpose_rows(w.t.v + w.t.krow(b, j0, hk), ldk, n, n8, D, Vt);
  for (std::int64_t h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    const std::int64_t row = p.list_row(b, h, p.nbk, bj);
    for (std::int64_t e = 0; e < w.qcounts[row]; ++e) {
      const std::int64_t bi = w.qindices[row * p.nbq + e];
      const std::int64_t iend = std::min(p.seq_q, (bi + 1) * p.block_q);
      for (std::int64_t i0 = bi * p.block_q; i0 < iend; i0 += bm) {
        const std::int64_t m = std::min(bm, iend - i0);
        if (w.t.above_diagonal(i0 + m, j0)) continue;
        scores(w.t.qrow(b, i0, h), ld, m, Kt, n8, D, S);
        mask_logits(w, b, i0, m, j0, n, n8, S);
        scores(w.dout + ((b * p.seq_q + i0) * p.heads + h) * D, ld, m, Vt, n8, D, dS);
        for (std::int64_t r = 0; r < m; ++r) grad_row(w, (b * p.heads + h) * p.seq_q + i0 + r, S + r * n8, dS + r * n8, n8);
        for (std::int64_t r = 0; r < m; ++r)
          for (std::int64_t c = 0; c < n; ++c) {
            PT[c * bm8 + r] = S[r * n8 + c];
            dST[c * bm8 + r] = dS[r * n8 + c];
          }
        // dv_c += sum_r P[r, c] dout_r; dk_c += sum_r dz[r, c] q_r.
        accumulate(PT, bm8, n, m, w.dout + ((b * p.seq_q + i0) * p.heads + h) * D, ld, D, dv);
        accumulate(dST, bm8, n, m, w.t.qrow(b, i0, h), ld, D, dk);
      }
    }
  }
  for (std::int64_t c = 0; c < n; ++c) {
    std::copy_n(dk + c * D, D, w.dk + w.t.krow(b, j0 + c, hk));
    std::copy_n(dv + c * D, D, w.dv + w.t.krow(b, j0 + c, hk));
  }
}

using TaskFn = void (*)(const Work&, std::int64_t);
void forward_default(const Work& w, std::int64_t t) { forward_task(w, t); }
void dq_default(const Work& w, std::int64_t t) { dq_task(w, t); }
void dkdv_default(const Work& w, std::int64_t t) { dkdv_task(w, t); }
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void forward_avx2(const Work& w, std::int64_t t) { forward_task(w, t); }
__attribute__((target("avx2,fma"))) void dq_avx2(const Work& w, std::int64_t t) { dq_task(w, t); }
__attribute__((target("avx2,fma"))) void dkdv_avx2(const Work& w, std::int64_t t) { dkdv_task(w, t); }
#endif

#if defined(__x86_64__)
TaskFn pick(TaskFn fallback, TaskFn avx2) { return has_avx2() ? avx2 : fallback; }
#endif

// Writes f32 values to a tensor of the problem's dtype.
void store_all(const Tensor& t, const std::vector<float>& v, ejk::cpu::ThreadPool& pool) {
  const std::int64_t n = t.numel(), chunk = 1 << 16;
  pool.parallel_for((n + chunk - 1) / chunk, [&](std::int64_t c) {
    for (std::int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) store(t, i, v[static_cast<std::size_t>(i)]);
  });
}

Tiles make_tiles(const Problem& p, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                 const Tensor& qseg, const Tensor& kseg) {
  Tiles t{p, q.data(), k.data(), v.data()};
  if (p.has_segments) {
    t.qseg = ejk::cpu::cpu_buffer(qseg.buffer()).as<std::int32_t>();
    t.kseg = ejk::cpu::cpu_buffer(kseg.buffer()).as<std::int32_t>();
  }
  t.scale = static_cast<float>(p.scale);
  t.cap = static_cast<float>(p.softcap);
  return t;
}

class CpuForward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(false, dev, BlockSparseAttentionKernel().vars(inv));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), inv, "block_sparse_attention", false);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const auto [bm, bn] = read_config(p, config, "block_sparse_attention");
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const auto counts = ints(args[fwd::kv_block_counts]), indices = ints(args[fwd::kv_block_indices]);
    check_lists(p, counts, indices, false);
    if (p.batch * p.seq_q * p.heads == 0) return;
    const auto q = to_f32(args[fwd::q], pool), k = to_f32(args[fwd::k], pool), v = to_f32(args[fwd::v], pool);
    std::vector<float> out(static_cast<std::size_t>(args[fwd::out].numel()));
    Work w{make_tiles(p, q, k, v, args[fwd::q_segment_ids], args[fwd::kv_segment_ids]), bm, bn};
    w.counts = counts.data();
    w.indices = indices.data();
    w.out = out.data();
    w.lse = ejk::cpu::cpu_buffer(args[fwd::lse].buffer()).as<float>();
#if defined(__x86_64__)
    const TaskFn fn = pick(forward_default, forward_avx2);
#else
    const TaskFn fn = forward_default;
#endif
    pool.parallel_for(p.batch * p.heads * ((p.seq_q + bm - 1) / bm), [&](std::int64_t task) { fn(w, task); });
    store_all(args[fwd::out], out, pool);
  }
};

class CpuBackward final : public Implementation {
 public:
  std::string_view kernel() const override { return "block_sparse_attention_bwd"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(true, dev, BlockSparseAttentionBwdKernel().vars(inv));
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), inv, "block_sparse_attention_bwd", true);
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const auto [bm, bn] = read_config(p, config, "block_sparse_attention_bwd");
    const auto [qbm, qbn] = read_config(p, config, "block_sparse_attention_bwd", "dq_");
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const auto counts = ints(args[bwd::kv_block_counts]), indices = ints(args[bwd::kv_block_indices]);
    const auto qcounts = ints(args[bwd::q_block_counts]), qindices = ints(args[bwd::q_block_indices]);
    check_lists(p, counts, indices, false);
    check_lists(p, qcounts, qindices, true);
    const std::int64_t D = p.head_dim;
    const auto q = to_f32(args[bwd::q], pool), k = to_f32(args[bwd::k], pool), v = to_f32(args[bwd::v], pool);
    const auto out = to_f32(args[bwd::out], pool), dout = to_f32(args[bwd::dout], pool);
    // D_i = dout_i . out_i, [batch, heads, seq_q] like lse.
    std::vector<float> delta(static_cast<std::size_t>(p.batch * p.heads * p.seq_q));
    pool.parallel_for(p.batch * p.seq_q, [&](std::int64_t bi) {
      const std::int64_t b = bi / p.seq_q, i = bi % p.seq_q;
      for (std::int64_t h = 0; h < p.heads; ++h) {
        const std::size_t o = static_cast<std::size_t>(((b * p.seq_q + i) * p.heads + h) * D);
        delta[static_cast<std::size_t>((b * p.heads + h) * p.seq_q + i)] = dot(dout.data() + o, out.data() + o, D);
      }
    });
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
    Work w{make_tiles(p, q, k, v, args[bwd::q_segment_ids], args[bwd::kv_segment_ids]), bm, bn};
    w.counts = counts.data();
    w.indices = indices.data();
    w.qcounts = qcounts.data();
    w.qindices = qindices.data();
    w.dout = dout.data();
    w.lse_in = ejk::cpu::cpu_buffer(args[bwd::lse].buffer()).as<float>();
    w.delta = delta.data();
    w.dq = dq.data();
    w.dk = dk.data();
    w.dv = dv.data();
#if defined(__x86_64__)
    const TaskFn dq_fn = pick(dq_default, dq_avx2), dkdv_fn = pick(dkdv_default, dkdv_avx2);
#else
    const TaskFn dq_fn = dq_default, dkdv_fn = dkdv_default;
#endif
    Work wq = w;  // the dq pass's own tile
    wq.bm = qbm;
    wq.bn = qbn;
    pool.parallel_for(p.batch * p.heads * ((p.seq_q + qbm - 1) / qbm), [&](std::int64_t task) { dq_fn(wq, task); });
    pool.parallel_for(p.batch * p.kv_heads * ((p.seq_k + bn - 1) / bn), [&](std::int64_t task) { dkdv_fn(w, task); });
    store_all(args[bwd::dq], dq, pool);
    store_all(args[bwd::dk], dk, pool);
    store_all(args[bwd::dv], dv, pool);
  }
};

}  // namespace

EJK_BUILTIN(implementations, "block_sparse_attention/cpu") {
  r.add(std::make_shared<CpuForward>());
  r.add(std::make_shared<CpuBackward>());
}

}  // namespace ejk::kernels::block_sparse_attention
