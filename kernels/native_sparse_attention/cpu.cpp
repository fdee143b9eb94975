// native_sparse_attention and its backward on the native CPU backend, over the device's thread
// pool, in the passes the device kernels use (see opencl.cpp):
//   pool  the mean of every whole block's keys and values (f32), at its first token's row;
//   fwd   one task per (token, kv head, part of the group's query heads): both branches, tiles of
//         block_n keys converted to f32 once and shared by the part's heads, online softmax;
//   bwd   dq    per (token, kv head, part): dS over both branches, dq, dg and the rows' deltas;
//         dcmp  per (whole block, kv head): the compressed key's and value's gradient, from every
//               later query of the sequence;
//         dkv   per (tile of block_n keys of one block, kv head): the queries of the sequence
//               whose selection holds the block (from the selection's inverse, built once in
//               token order), then the pooled gradient shared out.
// Every output element is written by one task: no atomics, results independent of the thread
// count and of the config.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "native_sparse_attention/nsa.hpp"

namespace ejk::kernels::native_sparse_attention {
namespace {

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

struct Reader {
  const void* base;
  DType t;
  float operator()(std::int64_t i) const {
    switch (t) {
      case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      default: return static_cast<const float*>(base)[i];
    }
  }
  void row(std::int64_t i, std::int64_t n, float* dst) const {
    if (t == DType::f32) {
      std::copy_n(static_cast<const float*>(base) + i, n, dst);
    } else if (t == DType::bf16) {
      const std::uint16_t* src = static_cast<const std::uint16_t*>(base) + i;
      for (std::int64_t k = 0; k < n; ++k) {
        const std::uint32_t u = std::uint32_t{src[k]} << 16;
        std::memcpy(dst + k, &u, 4);
      }
    } else {
      for (std::int64_t k = 0; k < n; ++k) dst[k] = (*this)(i + k);
    }
  }
};

struct Writer {
  void* base;
  DType t;
  void operator()(std::int64_t i, float x) const {
    switch (t) {
      case DType::f16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(x); break;
      case DType::bf16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(x); break;
      default: static_cast<float*>(base)[i] = x;
    }
  }
};

void* data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }

std::vector<std::int64_t> read_i32(const Tensor& t) {
  const auto* p = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

// 16 partial sums, so that the compiler vectorises the reduction without reassociating it.
[[gnu::always_inline]] inline float dot(const float* a, const float* b, std::int64_t n) {
  float lanes[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += a[i + j] * b[i + j];
  float s = 0.f;
  for (; i < n; ++i) s += a[i] * b[i];
  for (float x : lanes) s += x;
  return s;
}

// One staged tile against the task's heads. Always inlined into a default and an AVX2+FMA
// wrapper, picked at run time, so that the compiler vectorises the same loops for each.
struct FwdTile {
  const float* qs;  // [hp][K] scaled queries
  const float* tk;  // [n][K]
  const float* tv;  // [n][V]
  std::int64_t n, hp, K, V, bn;
  float* sc;   // [hp][bn]
  float* acc;  // [hp][V]
  float* m;
  float* l;
};

[[gnu::always_inline]] inline void fwd_tile(const FwdTile& t) {
  for (std::int64_t i = 0; i < t.hp; ++i) {
    float* s = t.sc + i * t.bn;
    float mx = t.m[i];
    for (std::int64_t r = 0; r < t.n; ++r) mx = std::max(mx, s[r] = dot(t.qs + i * t.K, t.tk + r * t.K, t.K));
    const float alpha = std::exp(t.m[i] - mx);
    float sum = 0.f;
    for (std::int64_t r = 0; r < t.n; ++r) sum += (s[r] = std::exp(s[r] - mx));
    t.l[i] = t.l[i] * alpha + sum;
    t.m[i] = mx;
    float* a = t.acc + i * t.V;
    for (std::int64_t d = 0; d < t.V; ++d) a[d] *= alpha;
    for (std::int64_t r = 0; r < t.n; ++r)
      for (std::int64_t d = 0; d < t.V; ++d) a[d] += s[r] * t.tv[r * t.V + d];
  }
}

struct DqTile {
  const float* qs;   // [hp][K] scaled queries
  const float* dob;  // [hp][V] gated dout
  const float* tk;
  const float* tv;
  std::int64_t n, hp, K, V;
  const float* lse;    // [hp]
  const float* delta;  // [hp]
  float* acc;          // [hp][K]: dq / scale
};

[[gnu::always_inline]] inline void dq_tile(const DqTile& t) {
  for (std::int64_t i = 0; i < t.hp; ++i)
    for (std::int64_t r = 0; r < t.n; ++r) {
      const float pr = std::exp(dot(t.qs + i * t.K, t.tk + r * t.K, t.K) - t.lse[i]);
      const float ds = pr * (dot(t.dob + i * t.V, t.tv + r * t.V, t.V) - t.delta[i]);
      for (std::int64_t d = 0; d < t.K; ++d) t.acc[i * t.K + d] += ds * t.tk[r * t.K + d];
    }
}

// One query head's contribution to the gradients of rows keys (a selected tile, or the one
// pooled row of a block).
struct KeyTile {
  const float* q;   // [K] scaled query
  const float* d;   // [V] gated dout
  const float* tk;  // [rows][K]
  const float* tv;  // [rows][V]
  std::int64_t rows, K, V;
  float times, lse, delta;  // times: how often the query's selection lists the block
  float* gk;                // [rows][K]
  float* gv;                // [rows][V]
};

[[gnu::always_inline]] inline void key_tile(const KeyTile& t) {
  for (std::int64_t r = 0; r < t.rows; ++r) {
    const float pr = t.times * std::exp(dot(t.q, t.tk + r * t.K, t.K) - t.lse);
    const float ds = pr * (dot(t.d, t.tv + r * t.V, t.V) - t.delta);
    for (std::int64_t c = 0; c < t.V; ++c) t.gv[r * t.V + c] += pr * t.d[c];
    for (std::int64_t c = 0; c < t.K; ++c) t.gk[r * t.K + c] += ds * t.q[c];
  }
}

void fwd_tile_default(const FwdTile& t) { fwd_tile(t); }
void dq_tile_default(const DqTile& t) { dq_tile(t); }
void key_tile_default(const KeyTile& t) { key_tile(t); }
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void fwd_tile_avx2(const FwdTile& t) { fwd_tile(t); }
__attribute__((target("avx2,fma"))) void dq_tile_avx2(const DqTile& t) { dq_tile(t); }
__attribute__((target("avx2,fma"))) void key_tile_avx2(const KeyTile& t) { key_tile(t); }
#endif

bool has_avx2_fma() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// What both passes share: the problem, readers of the inputs, the index arrays and the pooled
// keys and values.
struct Setup {
  Problem p;
  Reader q, k, v, gc, gs;
  std::vector<std::int64_t> bi, bc, cu;
  std::vector<Place> place;
  std::vector<float> kc, vc;  // [tokens, kv_heads, head_dim]: whole blocks at their first row

  Setup(const Invocation& inv, std::span<const Tensor> args, ejk::cpu::ThreadPool& pool)
      : p(Problem::of(inv)),
        q{data(args[0]), p.dtype},
        k{data(args[1]), p.dtype},
        v{data(args[2]), p.dtype},
        gc{data(args[fwd::g_cmp]), p.dtype},
        gs{data(args[fwd::g_slc]), p.dtype},
        bi(read_i32(args[fwd::block_indices])),
        bc(read_i32(args[fwd::block_counts])),
        cu(read_i32(args[fwd::cu_seqlens])) {
    check_indices(p, bi, bc, cu);
    place = places(p, cu);
    const std::int64_t H = p.kv_heads, K = p.dk, V = p.dv, BS = p.block_size;
    kc.assign(static_cast<std::size_t>(p.tokens() * H * K), 0.f);
    vc.assign(static_cast<std::size_t>(p.tokens() * H * V), 0.f);
    pool.parallel_for(p.tokens(), [&](std::int64_t t) {
      if (!whole_block_start(t)) return;
      const float mean = 1.f / static_cast<float>(BS);
      for (std::int64_t h = 0; h < H; ++h) {
        float* kr = kc.data() + (t * H + h) * K;
        float* vr = vc.data() + (t * H + h) * V;
        for (std::int64_t j = t; j < t + BS; ++j) {
          for (std::int64_t d = 0; d < K; ++d) kr[d] += k((j * H + h) * K + d);
          for (std::int64_t d = 0; d < V; ++d) vr[d] += v((j * H + h) * V + d);
        }
        for (std::int64_t d = 0; d < K; ++d) kr[d] *= mean;
        for (std::int64_t d = 0; d < V; ++d) vr[d] *= mean;
      }
    });
  }

  bool whole_block_start(std::int64_t t) const {
    const Place& pl = place[static_cast<std::size_t>(t)];
    return pl.pos % p.block_size == 0 && t + p.block_size <= pl.eos;
  }

  // Calls fn(tile) for the tiles of at most block_n keys of one branch of token t, kv head h:
  // rows of kc/vc (compression) or k/v (selection), converted into tk/tv.
  template <class Fn>
  void tiles(int branch, std::int64_t t, std::int64_t h, std::int64_t bn, float* tk, float* tv, Fn&& fn) const {
    const Place& pl = place[static_cast<std::size_t>(t)];
    const std::int64_t H = p.kv_heads, K = p.dk, V = p.dv, BS = p.block_size;
    if (branch == 0) {
      const std::int64_t nc = (pl.pos + 1) / BS;
      for (std::int64_t c0 = 0; c0 < nc; c0 += bn) {
        const std::int64_t n = std::min(bn, nc - c0);
        for (std::int64_t r = 0; r < n; ++r) {
          const std::int64_t row = (pl.bos + (c0 + r) * BS) * H + h;
          std::copy_n(kc.data() + row * K, K, tk + r * K);
          std::copy_n(vc.data() + row * V, V, tv + r * V);
        }
        fn(n);
      }
      return;
    }
    const std::int64_t cnt = bc[static_cast<std::size_t>(t * H + h)];
    for (std::int64_t i = 0; i < cnt; ++i) {
      const std::int64_t e = bi[static_cast<std::size_t>((t * H + h) * p.selected + i)];
      if (e < 0 || e * BS > pl.pos) continue;
      const std::int64_t len = std::min(BS, pl.pos - e * BS + 1);
      for (std::int64_t j0 = 0; j0 < len; j0 += bn) {
        const std::int64_t n = std::min(bn, len - j0);
        for (std::int64_t r = 0; r < n; ++r) {
          const std::int64_t row = (pl.bos + e * BS + j0 + r) * H + h;
          k.row(row * K, K, tk + r * K);
          v.row(row * V, V, tv + r * V);
        }
        fn(n);
      }
    }
  }
};

void check_config(const Problem& p, const Config& config, const char* kname, std::int64_t& bn, std::int64_t& hp) {
  bn = config.get("block_n");
  hp = config.get("heads_per_task");
  if (bn <= 0 || hp <= 0 || p.group % hp != 0)
    throw InvalidArgument(std::string(kname) + " cpu: config " + config.canonical() +
                          " needs a positive block_n and heads_per_task dividing the group of " + std::to_string(p.group));
}

ParamSpace cpu_space(const Vars& vars, const DeviceInfo& dev) {
  ParamSpace s;
  s.param("block_n", {8, 16, 32, 64})
      .param("heads_per_task", {1, 2, 4, 8, 16})
      .constraint("group % heads_per_task == 0")
      // A converted tile and the task's rows stay in the L2 cache.
      .constraint("(block_n * (head_dim_k + head_dim_v) + heads_per_task * (2 * head_dim_k + 2 * head_dim_v + block_n)) * 4 <= local_mem")
      .bind(vars)
      .bind(device_vars(dev));
  return s;
}

Config cpu_heuristic(const ParamSpace& s, const Problem& p, const char* kname, const std::string& sig) {
  for (std::int64_t hp : {16, 8, 4, 2, 1}) {
    if (p.group % hp) continue;
    for (std::int64_t bn : {std::min<std::int64_t>(64, std::max<std::int64_t>(8, p.block_size)), std::int64_t{16}, std::int64_t{8}}) {
      Config c{{"block_n", bn}, {"heads_per_task", hp}};
      if (s.admits(c)) return c;
    }
  }
  auto all = s.enumerate();
  if (all.empty()) throw InvalidArgument(std::string(kname) + " cpu: empty parameter space for " + sig);
  return all.front();
}

class CpuNsa final : public Implementation {
 public:
  std::string_view kernel() const override { return "native_sparse_attention"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(NsaKernel().vars(inv), dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), Problem::of(inv), "native_sparse_attention", inv.signature());
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const Setup su(inv, args, pool);
    const Problem& p = su.p;
    std::int64_t bn = 0, hp = 0;
    check_config(p, config, "native_sparse_attention", bn, hp);
    const std::int64_t H = p.kv_heads, HQ = p.heads, K = p.dk, V = p.dv, parts = p.group / hp;
    const Writer o{data(args[fwd::o]), p.dtype}, oc{data(args[fwd::o_cmp]), p.dtype}, os{data(args[fwd::o_slc]), p.dtype};
    float* lse = static_cast<float*>(data(args[fwd::lse]));
    const float scale = static_cast<float>(p.scale);
#if defined(__x86_64__)
    void (*const tile_fn)(const FwdTile&) = has_avx2_fma() ? fwd_tile_avx2 : fwd_tile_default;
#else
    void (*const tile_fn)(const FwdTile&) = fwd_tile_default;
#endif
    pool.parallel_for(p.tokens() * H * parts, [&](std::int64_t task) {
      const std::int64_t part = task % parts, h = task / parts % H, t = task / (parts * H);
      thread_local std::vector<float> buf;
      const std::size_t need = static_cast<std::size_t>(bn * (K + V) + hp * (K + 2 * V + bn + 2));
      if (buf.size() < need) buf.resize(need);
      float* tk = buf.data();
      float* tv = tk + bn * K;
      float* qs = tv + bn * V;
      float* acc = qs + hp * K;
      float* first = acc + hp * V;  // the compression branch's output
      float* sc = first + hp * V;
      float* m = sc + hp * bn;
      float* l = m + hp;
      const std::int64_t hq0 = h * p.group + part * hp;
      for (std::int64_t i = 0; i < hp; ++i) {
        su.q.row((t * HQ + hq0 + i) * K, K, qs + i * K);
        for (std::int64_t d = 0; d < K; ++d) qs[i * K + d] *= scale;
      }
      for (int branch = 0; branch < 2; ++branch) {
        std::fill(acc, acc + hp * V, 0.f);
        std::fill(m, m + hp, neg_inf);
        std::fill(l, l + hp, 0.f);
        su.tiles(branch, t, h, bn, tk, tv, [&](std::int64_t n) { tile_fn({qs, tk, tv, n, hp, K, V, bn, sc, acc, m, l}); });
        const Writer& out = branch == 0 ? oc : os;
        for (std::int64_t i = 0; i < hp; ++i) {
          const std::int64_t th = t * HQ + hq0 + i;
          const float inv_l = l[i] > 0.f ? 1.f / l[i] : 0.f;
          for (std::int64_t d = 0; d < V; ++d) {
            const float x = acc[i * V + d] * inv_l;
            out(th * V + d, x);
            if (branch == 0) first[i * V + d] = x;
            else o(th * V + d, su.gc(th) * first[i * V + d] + su.gs(th) * x);
          }
          lse[th * 2 + branch] = l[i] > 0.f ? m[i] + std::log(l[i]) : neg_inf;
        }
      }
    });
  }
};

class CpuNsaBwd final : public Implementation {
 public:
  std::string_view kernel() const override { return "native_sparse_attention_bwd"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_space(NsaBwdKernel().vars(inv), dev);
  }
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    return cpu_heuristic(space(inv, dev), Problem::of(inv), "native_sparse_attention_bwd", inv.signature());
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const Setup su(inv, args, pool);
    const Problem& p = su.p;
    std::int64_t bn = 0, hp = 0;
    check_config(p, config, "native_sparse_attention_bwd", bn, hp);
    const std::int64_t N = p.tokens(), H = p.kv_heads, HQ = p.heads, G = p.group, K = p.dk, V = p.dv;
    const std::int64_t BS = p.block_size, parts = G / hp;
    const Reader ocr{data(args[bwd::o_cmp]), p.dtype}, osr{data(args[bwd::o_slc]), p.dtype};
    const Reader dor{data(args[bwd::dout]), p.dtype};
    const float* lse = static_cast<const float*>(data(args[bwd::lse]));
    const Writer dq{data(args[bwd::dq]), p.dtype}, dk{data(args[bwd::dk]), p.dtype}, dv{data(args[bwd::dv]), p.dtype};
    const Writer dgc{data(args[bwd::dg_cmp]), p.dtype}, dgs{data(args[bwd::dg_slc]), p.dtype};
    const float scale = static_cast<float>(p.scale);
#if defined(__x86_64__)
    void (*const tile_fn)(const DqTile&) = has_avx2_fma() ? dq_tile_avx2 : dq_tile_default;
    void (*const key_fn)(const KeyTile&) = has_avx2_fma() ? key_tile_avx2 : key_tile_default;
#else
    void (*const tile_fn)(const DqTile&) = dq_tile_default;
    void (*const key_fn)(const KeyTile&) = key_tile_default;
#endif
    // delta[token, head, branch] = g_b * (do . o_b), the softmax's row term of each branch.
    std::vector<float> delta(static_cast<std::size_t>(N * HQ * 2));

    pool.parallel_for(N * H * parts, [&](std::int64_t task) {
      const std::int64_t part = task % parts, h = task / parts % H, t = task / (parts * H);
      thread_local std::vector<float> buf;
      const std::size_t need = static_cast<std::size_t>(bn * (K + V) + hp * (2 * K + 2 * V + bn + 2));
      if (buf.size() < need) buf.resize(need);
      float* tk = buf.data();
      float* tv = tk + bn * K;
      float* qs = tv + bn * V;
      float* acc = qs + hp * K;  // dq / scale
      float* dob = acc + hp * K;
      float* ob = dob + hp * V;
      float* sc = ob + hp * V;
      float* lb = sc + hp * bn;
      float* db = lb + hp;
      const std::int64_t hq0 = h * G + part * hp;
      for (std::int64_t i = 0; i < hp; ++i) {
        su.q.row((t * HQ + hq0 + i) * K, K, qs + i * K);
        for (std::int64_t d = 0; d < K; ++d) qs[i * K + d] *= scale;
      }
      std::fill(acc, acc + hp * K, 0.f);
      for (int branch = 0; branch < 2; ++branch) {
        for (std::int64_t i = 0; i < hp; ++i) {
          const std::int64_t th = t * HQ + hq0 + i;
          const float gate = branch == 0 ? su.gc(th) : su.gs(th);
          (branch == 0 ? ocr : osr).row(th * V, V, ob + i * V);
          dor.row(th * V, V, dob + i * V);
          const float D = dot(dob + i * V, ob + i * V, V);
          (branch == 0 ? dgc : dgs)(th, D);
          for (std::int64_t d = 0; d < V; ++d) dob[i * V + d] *= gate;
          db[i] = gate * D;
          delta[static_cast<std::size_t>(th * 2 + branch)] = db[i];
          lb[i] = lse[th * 2 + branch];
        }
        su.tiles(branch, t, h, bn, tk, tv, [&](std::int64_t n) { tile_fn({qs, dob, tk, tv, n, hp, K, V, lb, db, acc}); });
      }
      for (std::int64_t i = 0; i < hp; ++i)
        for (std::int64_t d = 0; d < K; ++d) dq((t * HQ + hq0 + i) * K + d, scale * acc[i * K + d]);
    });

    // The compressed rows' gradients, from every query that sees the block.
    std::vector<float> dkc(static_cast<std::size_t>(N * H * K), 0.f), dvc(static_cast<std::size_t>(N * H * V), 0.f);
    pool.parallel_for(N * H, [&](std::int64_t task) {
      const std::int64_t h = task % H, j0 = task / H;
      if (!su.whole_block_start(j0)) return;
      const Place& pl = su.place[static_cast<std::size_t>(j0)];
      const float* kr = su.kc.data() + (j0 * H + h) * K;
      const float* vr = su.vc.data() + (j0 * H + h) * V;
      float* gk = dkc.data() + (j0 * H + h) * K;
      float* gv = dvc.data() + (j0 * H + h) * V;
      std::vector<float> qr(static_cast<std::size_t>(K)), dr(static_cast<std::size_t>(V));
      for (std::int64_t t = j0 + BS - 1; t < pl.eos; ++t)
        for (std::int64_t g = 0; g < G; ++g) {
          const std::int64_t th = t * HQ + h * G + g;
          su.q.row(th * K, K, qr.data());
          for (auto& x : qr) x *= scale;
          dor.row(th * V, V, dr.data());
          const float gate = su.gc(th);
          for (auto& x : dr) x *= gate;
          key_fn({qr.data(), dr.data(), kr, vr, 1, K, V, 1.f, lse[th * 2], delta[static_cast<std::size_t>(th * 2)], gk, gv});
        }
    });

    // The selection's inverse: per (block start j, kv head h), at j * H + h, the queries that list
    // the block in token order, with how often each lists it (each entry adds the block's keys to
    // the softmax). Built in token order, so the sums below run in the same order every time.
    struct Selector {
      std::int64_t t, times;
    };
    std::vector<std::int64_t> first(static_cast<std::size_t>(N * H + 1), 0);
    std::vector<Selector> selectors;
    for (int fill = 0; fill < 2; ++fill) {
      std::vector<std::int64_t> next(first.begin(), first.end() - 1);
      if (fill) selectors.resize(static_cast<std::size_t>(first.back()));
      for (std::int64_t t = 0; t < N; ++t) {
        const Place& pl = su.place[static_cast<std::size_t>(t)];
        for (std::int64_t h = 0; h < H; ++h) {
          const std::int64_t* list = su.bi.data() + (t * H + h) * p.selected;
          const std::int64_t cnt = su.bc[static_cast<std::size_t>(t * H + h)];
          for (std::int64_t i = 0; i < cnt; ++i) {
            const std::int64_t e = list[i];
            if (e < 0 || e * BS > pl.pos || std::find(list, list + i, e) != list + i) continue;
            const std::size_t at = static_cast<std::size_t>((pl.bos + e * BS) * H + h);
            if (!fill) {
              ++first[at + 1];
            } else {
              selectors[static_cast<std::size_t>(next[at]++)] = {t, std::count(list, list + cnt, e)};
            }
          }
        }
      }
      if (!fill) std::partial_sum(first.begin(), first.end(), first.begin());
    }

    // Per tile of keys within one block: every query of the sequence that selects the block.
    pool.parallel_for(N * H, [&](std::int64_t task) {
      const std::int64_t h = task % H, j0 = task / H;
      const Place& pl = su.place[static_cast<std::size_t>(j0)];
      if (pl.pos % BS % bn != 0) return;
      const std::int64_t block0 = j0 - pl.pos % BS;
      const std::int64_t n = std::min({bn, block0 + BS - j0, pl.eos - j0});
      std::vector<float> tk(static_cast<std::size_t>(n * K)), tv(static_cast<std::size_t>(n * V));
      std::vector<float> gk(static_cast<std::size_t>(n * K), 0.f), gv(static_cast<std::size_t>(n * V), 0.f);
      std::vector<float> qr(static_cast<std::size_t>(K)), dr(static_cast<std::size_t>(V));
      for (std::int64_t r = 0; r < n; ++r) {
        su.k.row(((j0 + r) * H + h) * K, K, tk.data() + r * K);
        su.v.row(((j0 + r) * H + h) * V, V, tv.data() + r * V);
      }
      const std::size_t at = static_cast<std::size_t>(block0 * H + h);
      for (std::int64_t k = first[at]; k < first[at + 1]; ++k) {
        const auto [t, times] = selectors[static_cast<std::size_t>(k)];
        if (t < j0) continue;
        const std::int64_t rows = std::min(n, t - j0 + 1);
        for (std::int64_t g = 0; g < G; ++g) {
          const std::int64_t th = t * HQ + h * G + g;
          su.q.row(th * K, K, qr.data());
          for (auto& x : qr) x *= scale;
          dor.row(th * V, V, dr.data());
          const float gate = su.gs(th);
          for (auto& x : dr) x *= gate;
          key_fn({qr.data(), dr.data(), tk.data(), tv.data(), rows, K, V, static_cast<float>(times), lse[th * 2 + 1],
                  delta[static_cast<std::size_t>(th * 2 + 1)], gk.data(), gv.data()});
        }
      }
      const bool pooled = su.whole_block_start(block0);
      const float share = 1.f / static_cast<float>(BS);
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t row = (j0 + r) * H + h;
        for (std::int64_t d = 0; d < K; ++d)
          dk(row * K + d, gk[static_cast<std::size_t>(r * K + d)] + (pooled ? share * dkc[static_cast<std::size_t>((block0 * H + h) * K + d)] : 0.f));
        for (std::int64_t d = 0; d < V; ++d)
          dv(row * V + d, gv[static_cast<std::size_t>(r * V + d)] + (pooled ? share * dvc[static_cast<std::size_t>((block0 * H + h) * V + d)] : 0.f));
      }
    });
  }
};

}  // namespace

EJK_BUILTIN(implementations, "native_sparse_attention/cpu") {
  r.add(std::make_shared<CpuNsa>());
  r.add(std::make_shared<CpuNsaBwd>());
}

}  // namespace ejk::kernels::native_sparse_attention
