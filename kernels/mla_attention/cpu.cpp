// mla_decode on the native CPU backend, in three passes over the device's thread pool:
//   absorb   q_lat = q_nope . w_kc per (sequence, head), scaled, with q_pe appended;
//   attend   one task per (sequence, group of heads, part of the context): each tile of block_n
//            cache rows is converted to f32 once and then serves every head of the group (the
//            latent cache is the one key/value head of all of them), online softmax per head;
//   combine  per (sequence, head): the parts merged by their log-sum-exp, then o_lat . w_vc.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "ejk/error.hpp"
#include "mla_attention/impls.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {
namespace {

// Reads element i of a buffer of the problem's storage dtype as f32.
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
  // n consecutive elements from i into dst.
  void row(std::int64_t i, std::int64_t n, float* dst) const {
    if (t == DType::f32) {
      std::copy_n(static_cast<const float*>(base) + i, n, dst);
      return;
    }
    for (std::int64_t k = 0; k < n; ++k) dst[k] = (*this)(i + k);
  }
};

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
      for (std::int64_t bn : {32, 16, 8}) {
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
    const Reader qn{data(args[arg::q_nope]), p.dtype}, qp{data(args[arg::q_pe]), p.dtype};
    const Reader kv{data(args[arg::kv_cache]), p.dtype}, wk{data(args[arg::w_kc]), p.dtype}, wv{data(args[arg::w_vc]), p.dtype};
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
        for (std::int64_t k = 0; k < hg; ++k) {
          const float* q = qs.data() + (b * H + g * hg + k) * W;
          float* row = sc + k * bn;
          float mx = m[k];
          for (std::int64_t j = 0; j < rows; ++j) {
            const float* r = tile + j * W;
            float dot = 0.f;
            for (std::int64_t c = 0; c < W; ++c) dot += q[c] * r[c];
            row[j] = dot;
            mx = std::max(mx, dot);
          }
          const float alpha = std::exp(m[k] - mx);
          float sum = 0.f;
          for (std::int64_t j = 0; j < rows; ++j) sum += (row[j] = std::exp(row[j] - mx));
          l[k] = l[k] * alpha + sum;
          m[k] = mx;
          float* a = acc + k * R;
          for (std::int64_t c = 0; c < R; ++c) a[c] *= alpha;
          for (std::int64_t j = 0; j < rows; ++j) {
            const float w = row[j];
            const float* r = tile + j * W;
            for (std::int64_t c = 0; c < R; ++c) a[c] += w * r[c];
          }
        }
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

std::shared_ptr<const Implementation> cpu_implementation() { return std::make_shared<CpuMlaDecode>(); }

}  // namespace ejk::kernels::mla_attention
