// The decode engine on the native CPU backend: pass 1 as tasks (query block, kv head, split) on
// the device's thread pool, each streaming its chunk of keys in tiles of block_k rows converted
// to f32; pass 2 merges the splits per (token, head). Index arrays are read and checked on the
// host first (decode_attention::ranges), so bad tables are errors, not stray reads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/cpu_features.hpp"
#include "common/builtin.hpp"
#include "decode_attention/engine.hpp"
#include "decode_attention/impls.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::decode_attention {
namespace {

constexpr float NEG = -1.0e30f;
constexpr double log2e = 1.4426950408889634;

#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void f16_row_f16c(const std::uint16_t* src, std::int64_t n, float* dst) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
bool has_f16c() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return cpu::has_f16c();
  }();
  return yes;
}
#endif

// n elements of a cache or query array from element `at`, as f32 times `scale`.
void load_row(const void* base, DType t, std::int64_t at, std::int64_t n, float* dst, float scale = 1.f) {
  switch (t) {
    case DType::f32: {
      const float* s = static_cast<const float*>(base) + at;
      for (std::int64_t i = 0; i < n; ++i) dst[i] = s[i] * scale;
      return;
    }
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(base) + at;
#if defined(__x86_64__)
      if (has_f16c()) {
        f16_row_f16c(s, n, dst);
        if (scale != 1.f)
          for (std::int64_t i = 0; i < n; ++i) dst[i] *= scale;
        return;
      }
#endif
      for (std::int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]) * scale;
      return;
    }
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(base) + at;
      for (std::int64_t i = 0; i < n; ++i) {
        const std::uint32_t u = static_cast<std::uint32_t>(s[i]) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        dst[i] = f * scale;
      }
      return;
    }
    default: throw InvalidArgument("decode attention cpu: dtype " + std::string(to_string(t)) + " is not a float");
  }
}

void store(void* base, DType t, std::int64_t at, float x) {
  switch (t) {
    case DType::f32: static_cast<float*>(base)[at] = x; return;
    case DType::f16: static_cast<std::uint16_t*>(base)[at] = f32_to_f16(x); return;
    case DType::bf16: static_cast<std::uint16_t*>(base)[at] = f32_to_bf16(x); return;
    default: return;
  }
}

// The tile loops, built for AVX-512 (which brings FMA), AVX2 and plain x86-64 and picked at load
// time by CPU features (not by model: "arch=" clones never match AMD parts). Eight
// partial sums let the compiler keep a dot product in vector registers without reassociating
// on its own.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define EJK_DECODE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define EJK_DECODE_CLONES
#endif

inline float dot(const float* a, const float* b, std::int64_t n) {
  float s[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  float t = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
  for (; i < n; ++i) t += a[i] * b[i];
  return t;
}

// S[r][j] = Q[r] . K[j] for R rows and n keys of D elements.
EJK_DECODE_CLONES void tile_scores(const float* Q, std::int64_t R, const float* K, std::int64_t n, std::int64_t D, float* S,
                                   std::int64_t ld) {
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t j = 0; j < n; ++j) S[r * ld + j] = dot(Q + r * D, K + j * D, D);
}

// acc[r] = acc[r] * alpha[r] + sum_j P[r][j] V[j].
EJK_DECODE_CLONES void tile_pv(float* acc, const float* alpha, std::int64_t R, const float* P, std::int64_t ld,
                               const float* V, std::int64_t n, std::int64_t D) {
  for (std::int64_t r = 0; r < R; ++r) {
    float* a = acc + r * D;
    const float s = alpha[r];
    for (std::int64_t d = 0; d < D; ++d) a[d] *= s;
    for (std::int64_t j = 0; j < n; ++j) {
      const float p = P[r * ld + j];
      if (p == 0.f) continue;
      const float* v = V + j * D;
      for (std::int64_t d = 0; d < D; ++d) a[d] += p * v[d];
    }
  }
}

const void* data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }

std::vector<std::int64_t> read_index(const Tensor& t) {
  const auto* p = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return {p, p + t.numel()};
}

struct Block {
  std::int64_t seq, t0, nq;  // sequence, first query token, query tokens
};

struct Plan {
  const Engine* e = nullptr;
  Ranges r;
  std::vector<Block> blocks;
  std::vector<std::int32_t> tables;
  std::int64_t splits = 1, bk = 16;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  float qscale = 1.f, cap2 = 0.f;
  std::vector<float> acc, ml;  // partials: [token, head, split, D] and [token, head, split, 2]

  std::int64_t key_row(std::int64_t s, std::int64_t g, std::int64_t t) const {
    if (e->layout == Layout::contiguous) return ((s * e->seq_len + t) * e->kv_heads + g) * e->head_dim;
    const std::int64_t page = tables[static_cast<std::size_t>(s * e->max_blocks + t / e->block_size)];
    return ((page * e->kv_heads + g) * e->block_size + t % e->block_size) * e->head_dim;
  }
};

// Pass 1 for block `b`, kv head `g`, split `c`.
void partial(Plan& P, const Block& b, std::int64_t g, std::int64_t c, std::vector<float>& scratch) {
  const Engine& e = *P.e;
  const auto s = static_cast<std::size_t>(b.seq);
  const std::int64_t D = e.head_dim, G = e.group(), R = G * b.nq, bk = P.bk;
  const std::int64_t qlen = P.r.q_len[s], i0 = b.t0 - P.r.q_start[s], kvb = P.r.kv_begin[s], kve = P.r.kv_end[s];
  // Rows r = qi * G + hh: token t0 + qi, head g * G + hh; they see keys [lo, hi).
  std::vector<std::int64_t> lo(static_cast<std::size_t>(b.nq)), hi(static_cast<std::size_t>(b.nq));
  for (std::int64_t qi = 0; qi < b.nq; ++qi) {
    const std::int64_t pos = kve - qlen + i0 + qi;
    lo[static_cast<std::size_t>(qi)] = e.window > 0 ? std::max(kvb, pos - e.window + 1) : kvb;
    hi[static_cast<std::size_t>(qi)] = pos + 1;
  }
  const std::int64_t u0 = lo.front(), u1 = hi.back();
  const std::int64_t span = std::max<std::int64_t>(0, u1 - u0);
  const std::int64_t chunk = ((span + P.splits - 1) / P.splits + bk - 1) / bk * bk;
  const std::int64_t c0 = u0 + c * chunk, c1 = std::min(c0 + chunk, u1);

  scratch.resize(static_cast<std::size_t>(R * D * 2 + 2 * bk * D + R * bk + 3 * R));
  // Q: the rows' queries (scaled); acc: their accumulators; K, V: a tile converted to f32;
  // S: the tile's scores, then probabilities.
  float* Q = scratch.data();
  float* acc = Q + R * D;
  float* K = acc + R * D;
  float* V = K + bk * D;
  float* S = V + bk * D;
  float* m = S + R * bk;
  float* l = m + R;
  float* alpha = l + R;
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int64_t tok = b.t0 + r / G, h = g * G + r % G;
    load_row(P.q, e.dtype, (tok * e.heads + h) * D, D, Q + r * D, P.qscale);
    m[r] = NEG;
    l[r] = 0.f;
  }
  std::fill(acc, acc + R * D, 0.f);
  for (std::int64_t base = c0; base < c1; base += bk) {
    const std::int64_t n = std::min(bk, c1 - base);
    for (std::int64_t j = 0; j < n; ++j) {
      const std::int64_t at = P.key_row(b.seq, g, base + j);
      load_row(P.k, e.dtype, at, D, K + j * D);
      load_row(P.v, e.dtype, at, D, V + j * D);
    }
    tile_scores(Q, R, K, n, D, S, bk);
    for (std::int64_t r = 0; r < R; ++r) {
      const auto qi = static_cast<std::size_t>(r / G);
      float mx = NEG;
      for (std::int64_t j = 0; j < n; ++j) {
        const std::int64_t t = base + j;
        float z = NEG;
        if (t >= lo[qi] && t < hi[qi]) z = P.cap2 > 0.f ? P.cap2 * std::tanh(S[r * bk + j]) : S[r * bk + j];
        S[r * bk + j] = z;
        mx = std::max(mx, z);
      }
      const float mn = std::max(m[r], mx);
      alpha[r] = std::exp2(m[r] - mn);
      float sum = 0.f;
      for (std::int64_t j = 0; j < n; ++j) {
        const float z = S[r * bk + j];
        const float p = z <= NEG * 0.5f ? 0.f : std::exp2(z - mn);
        S[r * bk + j] = p;
        sum += p;
      }
      l[r] = l[r] * alpha[r] + sum;
      m[r] = mn;
    }
    tile_pv(acc, alpha, R, S, bk, V, n, D);
  }
  for (std::int64_t r = 0; r < R; ++r) {
    const std::int64_t tok = b.t0 + r / G, h = g * G + r % G;
    const std::int64_t at = (tok * e.heads + h) * P.splits + c;
    std::copy(acc + r * D, acc + (r + 1) * D, P.acc.begin() + at * D);
    P.ml[static_cast<std::size_t>(2 * at)] = m[r];
    P.ml[static_cast<std::size_t>(2 * at + 1)] = l[r];
  }
}

std::int64_t pow2_at_least(std::int64_t x) {
  std::int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

class CpuDecode final : public Implementation {
 public:
  explicit CpuDecode(Binding b) : b_(std::move(b)) {}
  std::string_view kernel() const override { return b_.kernel; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return b_.args; }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    ParamSpace s;
    s.param("splits", {1, 2, 4, 8, 16, 32}).param("block_k", {16, 32, 64, 128});
    if (e.varlen) s.param("block_q", {1, 2, 4, 8});
    // More splits than tiles of the longest context only add empty tasks.
    s.constraint("splits == 1 || splits * block_k <= max_keys")
        // A task's tiles stay within the L2 cache.
        .constraint("(2 * block_k * head_dim + " + std::string(e.varlen ? "block_q" : "1") +
                    " * group * (2 * head_dim + block_k)) * 4 <= local_mem")
        .bind(vars(e))
        .bind(device_vars(dev));
    return s;
  }

  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Engine e = b_.engine(inv);
    const std::int64_t bq = e.varlen ? std::clamp<std::int64_t>(pow2_at_least(e.max_q_len), 1, 8) : 1;
    // Tiles of 64 keys amortise the per-tile softmax; enough tasks for every thread.
    const std::int64_t bk = 64;
    Config c{{"splits", heuristic_splits(e, bq, bk, 2 * std::max<std::int64_t>(1, dev.compute_units))}, {"block_k", bk}};
    if (e.varlen) c.set("block_q", bq);
    ParamSpace space = this->space(inv, dev);
    if (space.admits(c)) return c;
    auto all = space.enumerate();
    if (all.empty()) throw SelectionError(b_.kernel + " cpu: empty parameter space for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    auto& pool = ejk::cpu::cpu_device(device).pool();
    Plan P;
    const Engine e = b_.engine(inv);
    P.e = &e;
    P.splits = config.get("splits");
    P.bk = config.get("block_k");
    const std::int64_t bq = e.varlen ? config.get("block_q") : 1;
    if (P.splits <= 0 || P.bk <= 0 || bq <= 0)
      throw InvalidArgument(b_.kernel + " cpu: config " + config.canonical() + " needs positive splits, block_k, block_q");
    auto idx = [&](int slot) { return slot >= 0 ? read_index(args[static_cast<std::size_t>(slot)]) : std::vector<std::int64_t>{}; };
    const auto tables = idx(e.at.block_tables);
    P.r = ranges(e, idx(e.at.kv_begin), idx(e.at.kv_end), idx(e.at.q_loc), tables);
    P.tables.assign(tables.begin(), tables.end());
    for (std::int64_t s = 0; s < e.num_seqs; ++s) {
      const auto si = static_cast<std::size_t>(s);
      for (std::int64_t t0 = 0; t0 < P.r.q_len[si]; t0 += bq)
        P.blocks.push_back({s, P.r.q_start[si] + t0, std::min(bq, P.r.q_len[si] - t0)});
    }
    P.q = data(args[static_cast<std::size_t>(e.at.q)]);
    P.k = data(args[static_cast<std::size_t>(e.at.k)]);
    P.v = data(args[static_cast<std::size_t>(e.at.v)]);
    const LogitScales z = logit_scales(e);
    P.qscale = z.qscale;
    P.cap2 = z.cap2;
    const std::int64_t parts = e.tokens * e.heads * P.splits;
    P.acc.assign(static_cast<std::size_t>(parts * e.head_dim), 0.f);
    P.ml.assign(static_cast<std::size_t>(parts * 2), 0.f);
    const auto nb = static_cast<std::int64_t>(P.blocks.size());
    pool.parallel_for(nb * e.kv_heads * P.splits, [&](std::int64_t i) {
      thread_local std::vector<float> scratch;
      const std::int64_t c = i % P.splits, g = (i / P.splits) % e.kv_heads, b = i / (P.splits * e.kv_heads);
      partial(P, P.blocks[static_cast<std::size_t>(b)], g, c, scratch);
    });

    std::vector<float> sinks;
    if (e.sinks)
      for (double x : args[static_cast<std::size_t>(e.at.sinks)].read()) sinks.push_back(static_cast<float>(x * log2e));
    void* out = ejk::cpu::cpu_buffer(args[static_cast<std::size_t>(e.at.out)].buffer()).data();
    const std::int64_t owned = e.varlen ? (e.num_seqs ? P.r.q_start.back() + P.r.q_len.back() : 0) : e.tokens;
    const std::int64_t D = e.head_dim;
    pool.parallel_for(owned * e.heads, [&](std::int64_t row) {
      const std::int64_t h = row % e.heads;
      const float* ml = P.ml.data() + row * P.splits * 2;
      float M = e.sinks ? sinks[static_cast<std::size_t>(h)] : NEG;
      for (std::int64_t c = 0; c < P.splits; ++c) M = std::max(M, ml[2 * c]);
      float L = e.sinks ? std::exp2(sinks[static_cast<std::size_t>(h)] - M) : 0.f;
      thread_local std::vector<float> w;
      w.resize(static_cast<std::size_t>(P.splits));
      for (std::int64_t c = 0; c < P.splits; ++c) {
        w[static_cast<std::size_t>(c)] = std::exp2(ml[2 * c] - M);
        L += ml[2 * c + 1] * w[static_cast<std::size_t>(c)];
      }
      for (std::int64_t d = 0; d < D; ++d) {
        float a = 0.f;
        for (std::int64_t c = 0; c < P.splits; ++c)
          a += P.acc[static_cast<std::size_t>((row * P.splits + c) * D + d)] * w[static_cast<std::size_t>(c)];
        // With no key seen, acc is 0 whatever L holds (a sink alone): out 0.
        store(out, e.dtype, row * D + d, L > 0.f ? a / L : 0.f);
      }
    });
  }

 private:
  Binding b_;
};

}  // namespace

// One implementation for every kernel the engine runs.
EJK_BUILTIN(implementations, "decode_attention/cpu") {
  for (Binding b : clients()) r.add(std::make_shared<CpuDecode>(std::move(b)));
}

}  // namespace ejk::kernels::decode_attention
