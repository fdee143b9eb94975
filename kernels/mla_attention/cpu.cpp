// mla_decode on the native CPU backend, in three passes over the device's thread pool:
//   absorb   q_lat = q_nope . w_kc per (sequence, head), scaled, with q_pe appended;
//   attend   one task per (sequence, group of heads, part of the context): each tile of block_n
//            cache rows is converted to f32 once and then serves every head of the group (the
//            latent cache is the one key/value head of all of them), online softmax per head;
//   combine  per (sequence, head): the parts merged by their log-sum-exp, then o_lat . w_vc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/cpu_features.hpp"
#include "common/builtin.hpp"
#include "ejk/error.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

bool has_avx2_f16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu::has_f16c();
#else
  return false;
#endif
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void f16_row_f16c(const std::uint16_t* src, std::int64_t n, float* dst) {
  std::int64_t k = 0;
  for (; k + 8 <= n; k += 8)
    _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + k))));
  for (; k < n; ++k) dst[k] = f16_to_f32(src[k]);
}
#endif

// Reads a buffer of the problem's storage dtype as f32.
struct Reader {
  const void* base;
  DType t;
  bool f16c = false;
  float operator()(std::int64_t i) const {
    switch (t) {
      case DType::f16: return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      case DType::bf16: return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
      default: return static_cast<const float*>(base)[i];
    }
  }
  // n consecutive elements from i into dst.
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
#if defined(__x86_64__)
      if (f16c) return f16_row_f16c(static_cast<const std::uint16_t*>(base) + i, n, dst);
#endif
      for (std::int64_t k = 0; k < n; ++k) dst[k] = (*this)(i + k);
    }
  }
};

// One head against one converted tile: scores, online softmax update, accumulation into o_lat.
// Always inlined into a default and an AVX2+FMA wrapper, so the compiler vectorises the same
// loops for each; the dot products keep 16 partial sums so that they vectorise without
// reassociation.
struct HeadTile {
  const float* q;     // [W] scaled query
  const float* tile;  // [rows][W]
  std::int64_t rows, W, R;
  float* scores;      // [rows]
  float* acc;         // [R]
  float* m;
  float* l;
};

// Dot products of q with four rows at once (q loaded once per four), 16 partial sums each.
[[gnu::always_inline]] inline void dot4(const float* q, const float* r, std::int64_t W, float* out) {
  float l0[16] = {}, l1[16] = {}, l2[16] = {}, l3[16] = {};
  std::int64_t c = 0;
  for (; c + 16 <= W; c += 16)
    for (int i = 0; i < 16; ++i) {
      const float x = q[c + i];
      l0[i] += x * r[c + i];
      l1[i] += x * r[W + c + i];
      l2[i] += x * r[2 * W + c + i];
      l3[i] += x * r[3 * W + c + i];
    }
  float s[4] = {};
  for (; c < W; ++c)
    for (int k = 0; k < 4; ++k) s[k] += q[c] * r[k * W + c];
  for (int i = 0; i < 16; ++i) s[0] += l0[i], s[1] += l1[i], s[2] += l2[i], s[3] += l3[i];
  for (int k = 0; k < 4; ++k) out[k] = s[k];
}

[[gnu::always_inline]] inline float dot1(const float* q, const float* r, std::int64_t W) {
  float lanes[16] = {};
  std::int64_t c = 0;
  for (; c + 16 <= W; c += 16)
    for (int i = 0; i < 16; ++i) lanes[i] += q[c + i] * r[c + i];
  float dot = 0.f;
  for (; c < W; ++c) dot += q[c] * r[c];
  for (float x : lanes) dot += x;
  return dot;
}

[[gnu::always_inline]] inline void head_tile(const HeadTile& t) {
  std::int64_t j = 0;
  for (; j + 4 <= t.rows; j += 4) dot4(t.q, t.tile + j * t.W, t.W, t.scores + j);
  for (; j < t.rows; ++j) t.scores[j] = dot1(t.q, t.tile + j * t.W, t.W);
  float mx = *t.m;
  for (j = 0; j < t.rows; ++j) mx = std::max(mx, t.scores[j]);
  const float alpha = std::exp(*t.m - mx);
  float sum = 0.f;
  for (j = 0; j < t.rows; ++j) sum += (t.scores[j] = std::exp(t.scores[j] - mx));
  *t.l = *t.l * alpha + sum;
  *t.m = mx;
  // o_lat in chunks of 64 columns held in registers across the tile's rows.
  std::int64_t c0 = 0;
  for (; c0 + 64 <= t.R; c0 += 64) {
    float a[64];
    for (int i = 0; i < 64; ++i) a[i] = t.acc[c0 + i] * alpha;
    for (j = 0; j < t.rows; ++j) {
      const float w = t.scores[j];
      const float* r = t.tile + j * t.W + c0;
      for (int i = 0; i < 64; ++i) a[i] += w * r[i];
    }
    for (int i = 0; i < 64; ++i) t.acc[c0 + i] = a[i];
  }
  for (std::int64_t c = c0; c < t.R; ++c) {
    float a = t.acc[c] * alpha;
    for (j = 0; j < t.rows; ++j) a += t.scores[j] * t.tile[j * t.W + c];
    t.acc[c] = a;
  }
}

void head_tile_default(const HeadTile& t) { head_tile(t); }
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void head_tile_avx2(const HeadTile& t) { head_tile(t); }
#endif

void store(void* base, DType t, std::int64_t i, float x) {
  switch (t) {
    case DType::f16: static_cast<std::uint16_t*>(base)[i] = f32_to_f16(x); break;
    case DType::bf16: static_cast<std::uint16_t*>(base)[i] = f32_to_bf16(x); break;
    default: static_cast<float*>(base)[i] = x;
  }
}

const void* data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }
void* mutable_data(const Tensor& t) { return ejk::cpu::cpu_buffer(t.buffer()).data(); }

std::vector<std::int64_t> read_i32(const Tensor& t) {
  const auto* p = ejk::cpu::cpu_buffer(t.buffer()).as<std::int32_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

class CpuMlaDecode final : public Implementation {
 public:
  std::string_view kernel() const override { return "mla_decode"; }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return decode_args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("heads_per_group", {1, 2, 4, 8, 16})
        .param("block_n", {8, 16, 32, 64})
        .param("splits", {1, 2, 4, 8, 16})
        .constraint("heads % heads_per_group == 0")
        // A converted tile and the group's accumulators stay in the L2 cache.
        .constraint("(block_n * (kv_lora_rank + rope_dim) + heads_per_group * (kv_lora_rank + rope_dim + block_n)) * 4 <= local_mem")
        // Parts shorter than a tile only add merging work.
        .constraint("splits == 1 || splits * block_n <= max_context")
        .bind(MlaDecodeKernel().vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // Every head of a sequence in one group where the cache allows (the cache is read once per
  // group), and enough parts of the context that every thread gets a few tasks.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t want = 4 * std::max<std::int64_t>(1, dev.compute_units);
    for (std::int64_t hg : {16, 8, 4, 2, 1}) {
      if (p.heads % hg) continue;
      std::int64_t splits = 1;
      while (splits < 16 && p.batch * (p.heads / hg) * splits < want && splits * 2 * 256 <= p.capacity()) splits *= 2;
      for (std::int64_t bn : {16, 32, 8}) {
        Config c{{"heads_per_group", hg}, {"block_n", bn}, {"splits", splits}};
        if (s.admits(c)) return c;
      }
    }
    auto all = s.enumerate();
    if (all.empty()) throw InvalidArgument("mla_decode cpu: empty parameter space for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const std::int64_t hg = config.get("heads_per_group"), bn = config.get("block_n"), splits = config.get("splits");
    if (hg <= 0 || p.heads % hg != 0 || bn <= 0 || splits <= 0)
      throw InvalidArgument("mla_decode cpu: config " + config.canonical() + " needs heads_per_group dividing heads " +
                            std::to_string(p.heads) + " and positive block_n and splits");
    const auto tables = read_i32(args[arg::block_tables]);
    const auto lens = read_i32(args[arg::context_lens]);
    check_tables(p, tables, lens);
    if (p.batch == 0) return;

    const std::int64_t R = p.rank, W = p.width(), H = p.heads, groups = H / hg;
    const bool fast = has_avx2_f16c();
    const Reader qn{data(args[arg::q_nope]), p.dtype, fast}, qp{data(args[arg::q_pe]), p.dtype, fast};
    const Reader kv{data(args[arg::kv_cache]), p.dtype, fast}, wk{data(args[arg::w_kc]), p.dtype, fast};
    const Reader wv{data(args[arg::w_vc]), p.dtype, fast};
#if defined(__x86_64__)
    void (*const tile_fn)(const HeadTile&) = fast ? head_tile_avx2 : head_tile_default;
#else
    void (*const tile_fn)(const HeadTile&) = head_tile_default;
#endif
    void* out = mutable_data(args[arg::out]);

    // qs: scaled [q_lat | q_pe] per (sequence, head); parts: per (sequence, head, part) the
    // unnormalised o_lat, then max and sum of the part's softmax.
    std::vector<float> qs(static_cast<std::size_t>(p.batch * H * W));
    std::vector<float> part_o(static_cast<std::size_t>(p.batch * H * splits * R));
    std::vector<float> part_ml(static_cast<std::size_t>(p.batch * H * splits * 2));
    const float scale = static_cast<float>(p.scale);

    pool.parallel_for(p.batch * H, [&](std::int64_t bh) {
      const std::int64_t h = bh % H;
      float* q = qs.data() + bh * W;
      std::fill(q, q + R, 0.f);
      std::vector<float> wrow(static_cast<std::size_t>(R));
      for (std::int64_t d = 0; d < p.nope_dim; ++d) {
        const float x = qn(bh * p.nope_dim + d);
        wk.row((h * p.nope_dim + d) * R, R, wrow.data());
        for (std::int64_t c = 0; c < R; ++c) q[c] += x * wrow[static_cast<std::size_t>(c)];
      }
      for (std::int64_t c = 0; c < R; ++c) q[c] *= scale;
      for (std::int64_t c = 0; c < p.rope_dim; ++c) q[R + c] = scale * qp(bh * p.rope_dim + c);
    });

    pool.parallel_for(p.batch * groups * splits, [&](std::int64_t task) {
      const std::int64_t s = task % splits, g = task / splits % groups, b = task / (splits * groups);
      const std::int64_t n = lens[static_cast<std::size_t>(b)];
      const std::int64_t chunk = split_chunk(n, splits, bn);
      const std::int64_t start = std::min(n, s * chunk), end = std::min(n, start + chunk);
      thread_local std::vector<float> scratch;
      const std::size_t need = static_cast<std::size_t>(bn * W + hg * (R + bn + 2));
      if (scratch.size() < need) scratch.resize(need);
      float* tile = scratch.data();
      float* acc = tile + bn * W;
      float* sc = acc + hg * R;
      float* m = sc + hg * bn;
      float* l = m + hg;
      std::fill(acc, acc + hg * R, 0.f);
      std::fill(m, m + hg, -std::numeric_limits<float>::infinity());
      std::fill(l, l + hg, 0.f);
      for (std::int64_t t0 = start; t0 < end; t0 += bn) {
        const std::int64_t rows = std::min(bn, end - t0);
        for (std::int64_t j = 0; j < rows; ++j) {
          const std::int64_t pos = t0 + j;
          const std::int64_t page = tables[static_cast<std::size_t>(b * p.max_blocks + pos / p.block_size)];
          kv.row((page * p.block_size + pos % p.block_size) * W, W, tile + j * W);
        }
        for (std::int64_t k = 0; k < hg; ++k)
          tile_fn({qs.data() + (b * H + g * hg + k) * W, tile, rows, W, R, sc + k * bn, acc + k * R, m + k, l + k});
      }
      for (std::int64_t k = 0; k < hg; ++k) {
        const std::int64_t slot = (b * H + g * hg + k) * splits + s;
        std::copy_n(acc + k * R, R, part_o.data() + slot * R);
        part_ml[static_cast<std::size_t>(slot * 2)] = m[k];
        part_ml[static_cast<std::size_t>(slot * 2 + 1)] = l[k];
      }
    });

    pool.parallel_for(p.batch * H, [&](std::int64_t bh) {
      const std::int64_t h = bh % H;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::int64_t s = 0; s < splits; ++s) mx = std::max(mx, part_ml[static_cast<std::size_t>((bh * splits + s) * 2)]);
      std::vector<float> olat(static_cast<std::size_t>(R), 0.f), wrow(static_cast<std::size_t>(p.v_dim));
      float total = 0.f;
      for (std::int64_t s = 0; s < splits; ++s) {
        const std::int64_t slot = bh * splits + s;
        const float l = part_ml[static_cast<std::size_t>(slot * 2 + 1)];
        if (l == 0.f) continue;  // an empty part
        const float w = std::exp(part_ml[static_cast<std::size_t>(slot * 2)] - mx);
        total += w * l;
        for (std::int64_t c = 0; c < R; ++c) olat[static_cast<std::size_t>(c)] += w * part_o[static_cast<std::size_t>(slot * R + c)];
      }
      // Context 0: every part is empty and the output is 0.
      const float inv_total = total > 0.f ? 1.f / total : 0.f;
      std::vector<float> o(static_cast<std::size_t>(p.v_dim), 0.f);
      for (std::int64_t c = 0; c < R; ++c) {
        const float x = olat[static_cast<std::size_t>(c)] * inv_total;
        wv.row((h * R + c) * p.v_dim, p.v_dim, wrow.data());
        for (std::int64_t d = 0; d < p.v_dim; ++d) o[static_cast<std::size_t>(d)] += x * wrow[static_cast<std::size_t>(d)];
      }
      for (std::int64_t d = 0; d < p.v_dim; ++d) store(out, p.dtype, bh * p.v_dim + d, o[static_cast<std::size_t>(d)]);
    });
  }
};

}  // namespace

EJK_BUILTIN(implementations, "mla_attention/cpu") { r.add(std::make_shared<CpuMlaDecode>()); }

}  // namespace ejk::kernels::mla_attention
