// mean_pooling and mean_pooling_bwd on the native CPU backend, over the device's thread pool.
// Tasks are (sequence, block of block_cols columns, part of the sequence): the columns of a
// task stay in an f32 accumulator in L1 while its rows stream past. With splits > 1 a long
// sequence is shared by several tasks and a second pass adds their partial sums (forward); the
// backward pass writes each part's tokens on their own.
#include <algorithm>
#include <bit>
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
#include "ejk/error.hpp"
#include "mean_pooling/mean_pooling.hpp"

namespace ejk::kernels::mean_pooling {
namespace {

bool has_f16c() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && cpu::has_f16c();
#else
  return false;
#endif
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void add_f16_row_f16c(const std::uint16_t* p, std::int64_t n, float* acc) {
  std::int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    _mm256_storeu_ps(acc + c, _mm256_add_ps(_mm256_loadu_ps(acc + c),
                                            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c)))));
  for (; c < n; ++c) acc[c] += f16_to_f32(p[c]);
}
#endif

// acc[0..n) += row[0..n) for a row of the storage dtype; the loops vectorise (f16 through F16C
// where the processor has it).
void add_row(const void* base, DType t, std::int64_t i, std::int64_t n, float* acc) {
  switch (t) {
    case DType::f16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + i;
#if defined(__x86_64__)
      static const bool f16c = has_f16c();
      if (f16c) return add_f16_row_f16c(p, n, acc);
#endif
      for (std::int64_t c = 0; c < n; ++c) acc[c] += f16_to_f32(p[c]);
      break;
    }
    case DType::bf16: {
      const auto* p = static_cast<const std::uint16_t*>(base) + i;
      for (std::int64_t c = 0; c < n; ++c) acc[c] += std::bit_cast<float>(std::uint32_t{p[c]} << 16);
      break;
    }
    default: {
      const float* p = static_cast<const float*>(base) + i;
      for (std::int64_t c = 0; c < n; ++c) acc[c] += p[c];
    }
  }
}

void store_row(void* base, DType t, std::int64_t i, std::int64_t n, const float* v) {
  switch (t) {
    case DType::f16:
      for (std::int64_t c = 0; c < n; ++c) static_cast<std::uint16_t*>(base)[i + c] = f32_to_f16(v[c]);
      break;
    case DType::bf16:
      for (std::int64_t c = 0; c < n; ++c) static_cast<std::uint16_t*>(base)[i + c] = f32_to_bf16(v[c]);
      break;
    default: std::copy_n(v, n, static_cast<float*>(base) + i);
  }
}

std::vector<std::int64_t> read_offsets(const Problem& p, const Tensor& cu) {
  std::vector<double> v;
  if (p.packed) {
    const auto* c = ejk::cpu::cpu_buffer(cu.buffer()).as<std::int32_t>();
    v.assign(c, c + p.segs + 1);
  }
  return offsets(p, v);
}

class CpuMeanPooling final : public Implementation {
 public:
  explicit CpuMeanPooling(Direction dir) : kernel_(dir) {}
  std::string_view kernel() const override { return kernel_.name(); }
  Backend backend() const override { return Backend::cpu; }
  std::vector<ArgDef> args() const override { return kernel_.args(); }

  ParamSpace space(const Invocation& inv, const DeviceInfo& dev) const override {
    ParamSpace s;
    s.param("block_cols", {16, 64, 256, 1024})
        .param("splits", {1, 2, 4, 8, 16})
        // Of the blocks as wide as a row or wider (one block per row), only the narrowest.
        .constraint("block_cols == 16 || block_cols / 4 < dim")
        // Parts shorter than 16 tokens only add merging work.
        .constraint("splits == 1 || splits * 16 <= longest")
        .bind(kernel_.vars(inv))
        .bind(device_vars(dev));
    return s;
  }

  // Blocks of 256 columns (an L1-sized accumulator); sequences split until every thread has a
  // few tasks.
  Config heuristic(const Invocation& inv, const DeviceInfo& dev) const override {
    const Problem p = Problem::of(inv);
    const ParamSpace s = space(inv, dev);
    const std::int64_t want = 4 * std::max<std::int64_t>(1, dev.compute_units);
    for (std::int64_t bc : {256, 64, 16}) {
      const std::int64_t blocks = (p.dim + bc - 1) / bc;
      std::int64_t splits = 1;
      while (splits < 16 && p.segs * blocks * splits < want && splits * 2 * 64 <= p.longest()) splits *= 2;
      Config c{{"block_cols", bc}, {"splits", splits}};
      if (s.admits(c)) return c;
    }
    auto all = s.enumerate();
    if (all.empty()) throw SelectionError(std::string(kernel()) + " cpu: empty parameter space for " + inv.signature());
    return all.front();
  }

  void run(const Invocation& inv, const Config& config, std::span<const Tensor> args, Device& device) const override {
    const Problem p = Problem::of(inv);
    const std::int64_t bc = config.get("block_cols"), splits = config.get("splits");
    if (bc <= 0 || splits <= 0)
      throw InvalidArgument(std::string(kernel()) + " cpu: config " + config.canonical() + " needs positive block_cols and splits");
    const auto o = read_offsets(p, args[arg::cu_seqlens]);
    if (p.segs == 0 || p.dim == 0) return;
    auto& pool = ejk::cpu::cpu_device(device).pool();
    const void* in = ejk::cpu::cpu_buffer(args[arg::in].buffer()).data();
    void* out = ejk::cpu::cpu_buffer(args[arg::out].buffer()).data();
    const std::int64_t D = p.dim, blocks = (D + bc - 1) / bc;
    auto part = [&](std::int64_t s, std::int64_t q, std::int64_t& a, std::int64_t& b) {
      const std::int64_t start = o[static_cast<std::size_t>(s)], end = o[static_cast<std::size_t>(s + 1)];
      const std::int64_t chunk = split_chunk(end - start, splits);
      a = std::min(end, start + q * chunk);
      b = std::min(end, a + chunk);
    };
    auto inv_len = [&](std::int64_t s) {
      const std::int64_t n = o[static_cast<std::size_t>(s + 1)] - o[static_cast<std::size_t>(s)];
      return n > 0 ? 1.f / static_cast<float>(n) : 0.f;
    };

    if (p.dir == Direction::backward) {
      pool.parallel_for(p.segs * blocks * splits, [&](std::int64_t task) {
        const std::int64_t q = task % splits, blk = task / splits % blocks, s = task / (splits * blocks);
        const std::int64_t c0 = blk * bc, n = std::min(bc, D - c0);
        std::int64_t a, b;
        part(s, q, a, b);
        if (a == b) return;
        // The scaled block is encoded once, then copied to every token of the part.
        thread_local std::vector<float> row;
        thread_local std::vector<std::byte> stored;
        row.assign(static_cast<std::size_t>(n), 0.f);
        add_row(in, p.dtype, s * D + c0, n, row.data());
        const float w = inv_len(s);
        for (auto& x : row) x *= w;
        const std::size_t e = dtype_size(p.dtype), bytes = static_cast<std::size_t>(n) * e;
        stored.resize(bytes);
        store_row(stored.data(), p.dtype, 0, n, row.data());
        auto* dst = static_cast<std::byte*>(out);
        for (std::int64_t t = a; t < b; ++t) std::memcpy(dst + static_cast<std::size_t>(t * D + c0) * e, stored.data(), bytes);
      });
      return;
    }

    // Forward: partial sums per (part, sequence, column) when split, else the mean directly.
    std::vector<float> partial(splits > 1 ? static_cast<std::size_t>(splits * p.segs * D) : 0);
    pool.parallel_for(p.segs * blocks * splits, [&](std::int64_t task) {
      const std::int64_t q = task % splits, blk = task / splits % blocks, s = task / (splits * blocks);
      const std::int64_t c0 = blk * bc, n = std::min(bc, D - c0);
      std::int64_t a, b;
      part(s, q, a, b);
      thread_local std::vector<float> acc;
      acc.assign(static_cast<std::size_t>(n), 0.f);
      for (std::int64_t t = a; t < b; ++t) add_row(in, p.dtype, t * D + c0, n, acc.data());
      if (splits > 1) {
        std::copy(acc.begin(), acc.end(), partial.begin() + (q * p.segs + s) * D + c0);
        return;
      }
      const float w = inv_len(s);
      for (auto& x : acc) x *= w;
      store_row(out, p.dtype, s * D + c0, n, acc.data());
    });
    if (splits == 1) return;
    pool.parallel_for(p.segs * blocks, [&](std::int64_t task) {
      const std::int64_t blk = task % blocks, s = task / blocks;
      const std::int64_t c0 = blk * bc, n = std::min(bc, D - c0);
      thread_local std::vector<float> acc;
      acc.assign(static_cast<std::size_t>(n), 0.f);
      for (std::int64_t q = 0; q < splits; ++q) {
        const float* src = partial.data() + (q * p.segs + s) * D + c0;
        for (std::int64_t c = 0; c < n; ++c) acc[static_cast<std::size_t>(c)] += src[c];
      }
      const float w = inv_len(s);
      for (auto& x : acc) x *= w;
      store_row(out, p.dtype, s * D + c0, n, acc.data());
    });
  }

 private:
  MeanPoolingKernel kernel_;
};

}  // namespace

EJK_BUILTIN(implementations, "mean_pooling/cpu") {
  for (Direction dir : {Direction::forward, Direction::backward}) r.add(std::make_shared<CpuMeanPooling>(dir));
}

}  // namespace ejk::kernels::mean_pooling
