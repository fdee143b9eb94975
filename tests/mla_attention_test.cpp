// Multi-head latent attention: mla_decode against its double-precision reference on random
// inputs (paged cache, shuffled tables, contexts ending mid-page, context 0, every storage
// dtype, every config of a small space), and mla_prefill (matmul + flash_attention) against a
// direct double-precision MLA, on every device.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "mla_attention/mla_attention.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace mla = kernels::mla_attention;

std::vector<double> uniform(std::mt19937_64& rng, std::int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0);
  }
  return v;
}

struct DecodeCase {
  std::int64_t heads = 4, nope = 32, rope = 16, rank = 64, v_dim = 32, block_size = 16;
  std::vector<std::int64_t> lens{37, 0, 64};  // 37 ends mid-page
  std::int64_t spare_blocks = 3;             // pages nobody's table points at
};

struct Decode {
  Tensor q_nope, q_pe, kv, tables, lens, w_kc, w_vc;
  std::vector<TensorSpec> specs() const {
    return {q_nope.spec(), q_pe.spec(), kv.spec(), tables.spec(), lens.spec(), w_kc.spec(), w_vc.spec()};
  }
};

Decode build(const Context& ctx, const DecodeCase& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto batch = static_cast<std::int64_t>(c.lens.size());
  std::int64_t max_blocks = 1;
  for (auto n : c.lens) max_blocks = std::max(max_blocks, (n + c.block_size - 1) / c.block_size);
  const std::int64_t num_blocks = batch * max_blocks + c.spare_blocks;
  Decode d;
  d.q_nope = ctx.from({batch, c.heads, c.nope}, t, uniform(rng, batch * c.heads * c.nope, -1, 1));
  d.q_pe = ctx.from({batch, c.heads, c.rope}, t, uniform(rng, batch * c.heads * c.rope, -1, 1));
  d.kv = ctx.from({num_blocks, c.block_size, c.rank + c.rope}, t,
                  uniform(rng, num_blocks * c.block_size * (c.rank + c.rope), -1, 1));
  // Weights scaled so that logits spread over a few units: softmax rows far from uniform
  // without a single key taking everything.
  const double wk = 2.0 / std::sqrt(static_cast<double>(c.nope * c.rank) / 16.0);
  d.w_kc = ctx.from({c.heads, c.nope, c.rank}, t, uniform(rng, c.heads * c.nope * c.rank, -wk, wk));
  d.w_vc = ctx.from({c.heads, c.rank, c.v_dim}, t, uniform(rng, c.heads * c.rank * c.v_dim, -1, 1));
  // Pages in shuffled order; unused entries past a context hold garbage that must never be read.
  std::vector<double> pages(static_cast<std::size_t>(num_blocks));
  std::iota(pages.begin(), pages.end(), 0.0);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<double> table(static_cast<std::size_t>(batch * max_blocks));
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t j = 0; j < max_blocks; ++j) {
      const bool used = j * c.block_size < c.lens[static_cast<std::size_t>(b)];
      table[static_cast<std::size_t>(b * max_blocks + j)] = used ? pages[static_cast<std::size_t>(b * max_blocks + j)] : -7.0;
    }
  d.tables = ctx.from({batch, max_blocks}, DType::i32, table);
  std::vector<double> lens(c.lens.begin(), c.lens.end());
  d.lens = ctx.from({batch}, DType::i32, lens);
  return d;
}

struct Result {
  double error = 0, tolerance = 0;
  std::vector<double> out;
};

Result check(const Context& ctx, const Decode& d, const std::optional<Config>& config = {}) {
  Tensor out = mla_decode(ctx, d.q_nope, d.q_pe, d.kv, d.tables, d.lens, d.w_kc, d.w_vc, {.config = config});
  auto specs = d.specs();
  specs.push_back(out.spec());
  const Invocation inv = mla::decode_invocation(specs);
  HostArrays in{d.q_nope.read(), d.q_pe.read(), d.kv.read(), d.tables.read(), d.lens.read(),
                d.w_kc.read(),   d.w_vc.read(), out.read()};
  const mla::MlaDecodeKernel k;
  const auto want = k.reference(inv, in);
  return {test::relative_error(in[mla::arg::out], want[0]), k.tolerance(inv), in[mla::arg::out]};
}

class MlaAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(MlaAttention, DecodeMatchesReferenceInEveryDtype) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Decode d = build(ctx, {}, t, 11);
    const Result r = check(ctx, d);
    EXPECT_LE(r.error, r.tolerance) << to_string(t);
    // Context 0 gives 0 (sequence 1 of the default case).
    for (std::int64_t i = 0; i < 4 * 32; ++i) EXPECT_EQ(r.out[static_cast<std::size_t>(4 * 32 + i)], 0.0) << to_string(t);
  }
}

TEST_P(MlaAttention, DecodeAtDeepSeekWidths) {
  Context ctx(GetParam());
  // kv_lora_rank 512, rope_dim 64, qk_nope_head_dim and v_head_dim 128, pages of 64 tokens;
  // few heads and tokens so that it stays fast.
  DecodeCase c{.heads = 2, .nope = 128, .rope = 64, .rank = 512, .v_dim = 128, .block_size = 64, .lens = {150, 64}};
  const Result r = check(ctx, build(ctx, c, DType::f16, 3));
  EXPECT_LE(r.error, r.tolerance);
}

// Odd latent and value widths (weights read two columns a load where rows are of even length,
// one otherwise) and a batch that is not a multiple of the four sequences a group takes.
TEST_P(MlaAttention, OddWidthsMatchTheReference) {
  Context ctx(GetParam());
  DecodeCase c{.heads = 3, .nope = 17, .rope = 6, .rank = 45, .v_dim = 19, .lens = {23, 9, 40, 5, 12}};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Result r = check(ctx, build(ctx, c, t, 13));
    EXPECT_LE(r.error, r.tolerance) << to_string(t);
  }
}

TEST_P(MlaAttention, EveryConfigOfASmallSpaceAgrees) {
  Context ctx(GetParam());
  DecodeCase c{.heads = 2, .block_size = 8, .lens = {29, 5}};
  // f16 too: the GPU backends stage 16-bit tiles as stored, a code path of its own.
  for (DType t : {DType::f32, DType::f16}) {
    const Decode d = build(ctx, c, t, 5);
    auto specs = d.specs();
    specs.push_back({{2, 2, 32}, t});
    const Invocation inv = mla::decode_invocation(specs);
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    const auto configs = impl.space(inv, ctx.device().info()).enumerate();
    ASSERT_FALSE(configs.empty());
    std::vector<double> first;
    for (const Config& config : configs) {
      const Result r = check(ctx, d, config);
      EXPECT_LE(r.error, r.tolerance) << to_string(t) << " " << config.canonical();
      if (first.empty()) first = r.out;
      else EXPECT_LE(test::relative_error(r.out, first), r.tolerance) << to_string(t) << " " << config.canonical();
    }
  }
}

TEST_P(MlaAttention, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  for (auto [batch, heads, context] : {std::tuple{1, 16, 512}, {32, 16, 4096}, {64, 128, 32768}, {3, 2, 7}}) {
    const Invocation inv = mla::MlaDecodeKernel().from_sizes(
        {{"batch", batch}, {"heads", heads}, {"context", context}}, DType::f16, nlohmann::json::object());
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    const Config h = impl.heuristic(inv, ctx.device().info());
    EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << h.canonical();
  }
}

TEST_P(MlaAttention, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const DecodeCase c;
  const Decode d = build(ctx, c, DType::f32, 1);
  auto run = [&](const Decode& x) { (void)mla_decode(ctx, x.q_nope, x.q_pe, x.kv, x.tables, x.lens, x.w_kc, x.w_vc); };
  {
    Decode x = d;  // a page index past the cache
    std::vector<double> t = x.tables.read();
    t[0] = static_cast<double>(x.kv.dim(0));
    x.tables = ctx.from(x.tables.shape(), DType::i32, t);
    expect_error([&] { run(x); }, "block_tables[0, 0] = " + std::to_string(x.kv.dim(0)) + " is not a page");
  }
  {
    Decode x = d;  // a context longer than the table covers
    x.lens = ctx.from({3}, DType::i32, std::vector<double>{37, 0, 65});
    expect_error([&] { run(x); }, "context_lens[2] = 65 is longer than block_tables [3, 4]");
  }
  {
    Decode x = d;
    x.lens = ctx.from({3}, DType::i32, std::vector<double>{-1, 0, 5});
    expect_error([&] { run(x); }, "context_lens[0] = -1 is negative");
  }
  {
    Decode x = d;  // cache rows narrower than kv_lora_rank + rope_dim
    x.kv = ctx.random({x.kv.dim(0), 16, 70}, DType::f32, 2);
    expect_error([&] { run(x); }, "kv_cache [15, 16, 70] f32 must be f32 [15, 16, 80]");
  }
  {
    Decode x = d;
    x.q_pe = ctx.random({3, 4, 8}, DType::f32, 2);
    expect_error([&] { run(x); }, "kv_cache [15, 16, 80] f32 must be f32 [15, 16, 72]");
    x = d;
    x.q_pe = ctx.random({3, 3, 16}, DType::f32, 2);
    expect_error([&] { run(x); }, "q_pe [3, 3, 16] f32 must be f32 [3, 4, 16]");
  }
  {
    Decode x = d;
    x.w_kc = ctx.random({4, 16, 64}, DType::f32, 2);
    expect_error([&] { run(x); }, "w_kc [4, 16, 64] f32 must be f32 [4, 32, 64]");
    x = d;
    x.w_vc = ctx.random({4, 48, 32}, DType::f32, 2);
    expect_error([&] { run(x); }, "w_vc [4, 48, 32] f32 must be f32 [4, 64, 32]");
  }
  {
    Decode x = d;
    x.q_nope = ctx.random({3, 4, 32}, DType::f16, 2);
    expect_error([&] { run(x); }, "q_pe [3, 4, 16] f32 must be f16 [3, 4, 16]");
    x = d;
    x.tables = ctx.random({3, 4}, DType::f32, 2);
    expect_error([&] { run(x); }, "block_tables [3, 4] f32 must be i32 [3, 4]");
    x = d;
    x.lens = ctx.from({2}, DType::i32, std::vector<double>{1, 1});
    expect_error([&] { run(x); }, "context_lens [2] i32 must be i32 [3]");
  }
  expect_error([&] { (void)mla_decode(ctx, d.q_nope, d.q_pe, d.kv, d.tables, d.lens, d.w_kc, d.w_vc, {.softmax_scale = 0.0, .check_tables = true, .config = {}}); },
               "softmax_scale");
}

// ---- prefill ----------------------------------------------------------------------------------

bool flash_attention_on(const Context& ctx) {
  for (const Implementation* impl : Registry::global().implementations("flash_attention"))
    if (impl->backend() == ctx.device().info().backend) return true;
  return false;
}

// Direct MLA prefill in doubles: per-head keys [c_kv . w_kc^T | k_pe], values c_kv . w_vc,
// causal within each sequence.
std::vector<double> prefill_reference(const std::vector<double>& qn, const std::vector<double>& qp,
                                      const std::vector<double>& ckv, const std::vector<double>& kpe,
                                      const std::vector<double>& wk, const std::vector<double>& wv,
                                      const std::vector<std::int64_t>& cu, std::int64_t H, std::int64_t dn,
                                      std::int64_t dr, std::int64_t R, std::int64_t dv) {
  const std::int64_t T = cu.back();
  const double scale = 1.0 / std::sqrt(static_cast<double>(dn + dr));
  std::vector<double> out(static_cast<std::size_t>(T * H * dv), 0.0);
  auto I = [](std::int64_t i) { return static_cast<std::size_t>(i); };
  for (std::int64_t h = 0; h < H; ++h) {
    std::vector<double> k(I(T * dn)), v(I(T * dv));
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t d = 0; d < dn; ++d) {
        double a = 0;
        for (std::int64_t c = 0; c < R; ++c) a += ckv[I(t * R + c)] * wk[I((h * dn + d) * R + c)];
        k[I(t * dn + d)] = a;
      }
      for (std::int64_t d = 0; d < dv; ++d) {
        double a = 0;
        for (std::int64_t c = 0; c < R; ++c) a += ckv[I(t * R + c)] * wv[I((h * R + c) * dv + d)];
        v[I(t * dv + d)] = a;
      }
    }
    for (std::size_t s = 0; s + 1 < cu.size(); ++s)
      for (std::int64_t i = cu[s]; i < cu[s + 1]; ++i) {
        std::vector<double> p;
        double mx = -INFINITY;
        for (std::int64_t j = cu[s]; j <= i; ++j) {
          double a = 0;
          for (std::int64_t d = 0; d < dn; ++d) a += qn[I((i * H + h) * dn + d)] * k[I(j * dn + d)];
          for (std::int64_t d = 0; d < dr; ++d) a += qp[I((i * H + h) * dr + d)] * kpe[I(j * dr + d)];
          p.push_back(a * scale);
          mx = std::max(mx, a * scale);
        }
        double sum = 0;
        for (auto& x : p) sum += (x = std::exp(x - mx));
        for (std::int64_t j = cu[s]; j <= i; ++j)
          for (std::int64_t d = 0; d < dv; ++d)
            out[I((i * H + h) * dv + d)] += p[I(j - cu[s])] / sum * v[I(j * dv + d)];
      }
  }
  return out;
}

TEST_P(MlaAttention, PackedPrefillMatchesReference) {
  Context ctx(GetParam());
  if (!flash_attention_on(ctx))
    GTEST_SKIP() << "mla_prefill runs flash_attention, which has no implementation registered for backend "
                 << to_string(ctx.device().info().backend);
  const std::int64_t H = 4, dn = 32, dr = 16, R = 64, dv = 24;
  const std::vector<std::int64_t> cu{0, 13, 13, 40};  // the second sequence is empty
  const std::int64_t T = cu.back();
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::mt19937_64 rng(21);
    Tensor qn = ctx.from({T, H, dn}, t, uniform(rng, T * H * dn, -1, 1));
    Tensor qp = ctx.from({T, H, dr}, t, uniform(rng, T * H * dr, -1, 1));
    Tensor ckv = ctx.from({T, R}, t, uniform(rng, T * R, -1, 1));
    Tensor kpe = ctx.from({T, dr}, t, uniform(rng, T * dr, -1, 1));
    Tensor wk = ctx.from({H, dn, R}, t, uniform(rng, H * dn * R, -0.3, 0.3));
    Tensor wv = ctx.from({H, R, dv}, t, uniform(rng, H * R * dv, -0.3, 0.3));
    const MlaPrefillWeights w = mla_prefill_weights(ctx, wk, wv, dr);
    Tensor cut = ctx.from({4}, DType::i32, std::vector<double>(cu.begin(), cu.end()));
    Tensor out = mla_prefill(ctx, qn, qp, ckv, kpe, w, {.cu_seqlens = cut, .max_seqlen = 0});
    ASSERT_EQ(out.shape(), (Shape{T, H, dv}));
    const auto want = prefill_reference(qn.read(), qp.read(), ckv.read(), kpe.read(), wk.read(), wv.read(), cu, H, dn,
                                        dr, R, dv);
    // The expanded keys, values and queries are rounded to the storage dtype before attention:
    // twice the dtype's tolerance.
    EXPECT_LE(test::relative_error(out.read(), want), 2 * default_tolerance(t)) << to_string(t);
  }
  // Without cu_seqlens every token is one sequence.
  {
    std::mt19937_64 rng(22);
    const DType t = DType::f32;
    Tensor qn = ctx.from({T, H, dn}, t, uniform(rng, T * H * dn, -1, 1));
    Tensor qp = ctx.from({T, H, dr}, t, uniform(rng, T * H * dr, -1, 1));
    Tensor ckv = ctx.from({T, R}, t, uniform(rng, T * R, -1, 1));
    Tensor kpe = ctx.from({T, dr}, t, uniform(rng, T * dr, -1, 1));
    Tensor wk = ctx.from({H, dn, R}, t, uniform(rng, H * dn * R, -0.3, 0.3));
    Tensor wv = ctx.from({H, R, dv}, t, uniform(rng, H * R * dv, -0.3, 0.3));
    Tensor out = mla_prefill(ctx, qn, qp, ckv, kpe, mla_prefill_weights(ctx, wk, wv, dr));
    const auto want = prefill_reference(qn.read(), qp.read(), ckv.read(), kpe.read(), wk.read(), wv.read(), {0, T}, H,
                                        dn, dr, R, dv);
    EXPECT_LE(test::relative_error(out.read(), want), 2 * default_tolerance(t)) << "one sequence";
  }
  // Inconsistent offsets name the argument.
  std::mt19937_64 rng(1);
  Tensor qn = ctx.from({T, H, dn}, DType::f32, uniform(rng, T * H * dn, -1, 1));
  Tensor qp = ctx.from({T, H, dr}, DType::f32, uniform(rng, T * H * dr, -1, 1));
  Tensor ckv = ctx.from({T, R}, DType::f32, uniform(rng, T * R, -1, 1));
  Tensor kpe = ctx.from({T, dr}, DType::f32, uniform(rng, T * dr, -1, 1));
  const MlaPrefillWeights w =
      mla_prefill_weights(ctx, ctx.random({H, dn, R}, DType::f32, 3), ctx.random({H, R, dv}, DType::f32, 4), dr);
  test::expect_error([&] {
    (void)mla_prefill(ctx, qn, qp, ckv, kpe, w, {.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 20, 39}), .max_seqlen = 0});
  }, "cu_seqlens");
  test::expect_error([&] {
    (void)mla_prefill(ctx, qn, qp, ckv, kpe, w, {.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 30, 20}), .max_seqlen = 0});
  }, "cu_seqlens");
  test::expect_error([&] { (void)mla_prefill(ctx, qn, qp, ctx.random({T, R + 1}, DType::f32, 5), kpe, w); },
                     "c_kv [40, 65] f32 must be f32 [40, 64]");
}

// The OpenCL C implementation on the device's backend (OpenCL, or CUDA running the OpenCL C), if
// any, and its tensor-core (variant mma) configs for `inv`.
const Implementation* opencl_c_decode(const DeviceInfo& info) {
  for (const Implementation* impl : Registry::global().implementations("mla_decode"))
    if (const auto src = impl->sources(); impl->backend() == info.backend && !src.empty() && src.front() == "mla_attention/mla_decode.cl")
      return impl;
  return nullptr;
}

std::vector<Config> mma_configs(const Implementation& impl, const Invocation& inv, const DeviceInfo& info) {
  std::vector<Config> out;
  for (const Config& c : impl.space(inv, info).enumerate())
    if (c.has("variant") && c.text("variant") == "mma") out.push_back(c);
  return out;
}

// The tensor-core passes (mla_decode_mma.cl's attend, mla_decode_mma_proj.cl's absorb and
// merge-and-project) against the double reference: f16 and bf16,
// every program of its space (warps x tile rows x staging: through registers or a cp.async ring
// of two or three stages) with one to four parts, a second group of 16 heads that is mostly zero
// rows, a row width of an odd number of k16 steps per k-group, contexts ending mid-tile and
// mid-page, and a context of 0; DeepSeek-V3 widths under every program; pages of 16 and 32
// tokens, and a group of 8 heads.
// Runs where the device offers the variant (NVIDIA GPUs from sm_80, through OpenCL or the CUDA
// backend's OpenCL C); elsewhere it says why it skips.
TEST_P(MlaAttention, TensorCoreVariantMatchesTheReference) {
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  const mla::MlaDecodeKernel mk;
  const Implementation* impl = opencl_c_decode(info);
  const Invocation probe = mk.from_sizes({{"batch", 2}, {"heads", 16}, {"context", 64}}, DType::f16, nlohmann::json::object());
  if (!impl) GTEST_SKIP() << info.id() << " runs no OpenCL C";
  if (mma_configs(*impl, probe, info).empty())
    GTEST_SKIP() << info.id() << " (" << info.name << ") lists no 16x8x16 f16 tensor-core fragments";
  const std::vector<std::map<std::string, std::int64_t>> shapes = {
      {{"batch", 4}, {"heads", 20}, {"context", 192}, {"kv_lora_rank", 128}, {"rope_dim", 32}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}},
      {{"batch", 3}, {"heads", 16}, {"context", 300}},
      // Pages of 16 and 32 tokens (16-row tiles only, or a tile a page), a row of 5 k16 steps.
      {{"batch", 3}, {"heads", 16}, {"context", 150}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}, {"block_size", 16}},
      {{"batch", 3}, {"heads", 8}, {"context", 200}, {"kv_lora_rank", 128}, {"rope_dim", 64}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}, {"block_size", 32}},
      // The projections' edges: two absorb blocks of 32 sequences (the second mostly empty), ten
      // merge groups of 4, three 16-column pairs of out for eight warps, one stage of w_vc.
      {{"batch", 37}, {"heads", 16}, {"context", 96}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 48},
       {"v_head_dim", 48}},
  };
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (std::size_t si = 0; si < shapes.size(); ++si) {
      const Invocation inv = mk.from_sizes(shapes[si], t, nlohmann::json::object());
      HostArrays in = mk.inputs(inv, 31 + si);
      // Ragged contexts: the whole table row, 37 tokens past half of it, 0, 33.
      auto& lens = in[mla::arg::context_lens];
      for (std::size_t b = 1; b < lens.size(); ++b) lens[b] = b == 1 ? std::floor(lens[0] / 2) + 37 : b == 2 ? 0 : 33;
      const HostArrays want = mk.reference(inv, in);
      std::vector<Config> configs{impl->heuristic(inv, info)};
      EXPECT_EQ(configs[0].text("variant"), "mma") << inv.signature();
      for (const Config& c : mma_configs(*impl, inv, info))
        if (c.get("splits") <= (si == 0 ? 4 : 2)) configs.push_back(c);
      // Both stagings (registers, and cp.async rings of two and, where local memory allows, three).
      std::set<std::int64_t> stagings;
      for (const Config& c : configs) stagings.insert(c.get("mma_async") ? c.get("mma_stages") : 0);
      EXPECT_TRUE(stagings.count(0) && stagings.count(2)) << inv.signature();
      if (si != 1) {
        EXPECT_TRUE(stagings.count(3)) << inv.signature();
      }
      for (const Config& c : configs) {
        std::vector<Tensor> args;
        for (std::size_t i = 0; i < inv.args.size(); ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
        impl->run(inv, c, args, ctx.device());
        const std::vector<double> got = args[mla::arg::out].read();
        EXPECT_LE(test::relative_error(got, want[0]), mk.tolerance(inv)) << to_string(t) << " " << inv.signature() << " " << c.canonical();
        // Sequence 2 has context 0: its outputs are exactly 0.
        const std::size_t row = got.size() / lens.size();
        EXPECT_TRUE(std::all_of(got.begin() + 2 * row, got.begin() + 3 * row, [](double x) { return x == 0.0; })) << c.canonical();
        ++runs;
      }
    }
  EXPECT_GT(runs, 20u);
}

// Two runs queued back to back, nothing read between them: the second takes the scratch the
// first released (OpenCL, CUDA and Vulkan recycle it) while the first may still be in flight, and
// both match the reference.
TEST_P(MlaAttention, RunsQueuedBackToBackEachMatchTheReference) {
  Context ctx(GetParam());
  const mla::MlaDecodeKernel mk;
  const Invocation inv =
      mk.from_sizes({{"batch", 3}, {"heads", 16}, {"context", 200}, {"kv_lora_rank", 64}, {"rope_dim", 16},
                     {"qk_nope_head_dim", 32}, {"v_head_dim", 32}, {"block_size", 16}},
                    DType::f32, nlohmann::json::object());
  const Implementation& impl = Registry::global().implementation(inv, ctx.device().info());
  const Config c = impl.heuristic(inv, ctx.device().info());
  std::vector<HostArrays> want;
  std::vector<std::vector<Tensor>> runs;
  for (std::uint64_t seed : {7, 8}) {
    const HostArrays in = mk.inputs(inv, seed);
    want.push_back(mk.reference(inv, in));
    std::vector<Tensor> args;
    for (std::size_t i = 0; i < inv.args.size(); ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
    impl.run(inv, c, args, ctx.device());
    runs.push_back(std::move(args));
  }
  for (std::size_t r = 0; r < runs.size(); ++r)
    EXPECT_LE(test::relative_error(runs[r][mla::arg::out].read(), want[r][0]), mk.tolerance(inv)) << "run " << r << " " << c.canonical();
}

// Vulkan's cooperative-matrix passes (mla_decode_attend_coopmat.comp, and around it
// mla_decode_absorb_coopmat.comp and mla_decode_merge_coopmat.comp) against the double
// reference: both subgroup counts with one to four parts, 32 heads (two groups of 16), a narrow
// latent whose row is 5 steps of 16 columns, pages of 16 tokens, ragged contexts ending mid-tile
// and mid-page and a context of 0, and DeepSeek-V3 widths. Runs where the device offers the
// variant (f16 16x16x16 cooperative matrices, full subgroups of 32); elsewhere it says why it
// skips.
TEST_P(MlaAttention, VulkanCoopmatMatchesTheReference) {
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  if (info.backend != Backend::vulkan) GTEST_SKIP() << info.id() << " is not a Vulkan device";
  const mla::MlaDecodeKernel mk;
  const Invocation probe = mk.from_sizes({{"batch", 2}, {"heads", 16}, {"context", 64}}, DType::f16, nlohmann::json::object());
  const Implementation& impl = Registry::global().implementation(probe, info);
  auto coop = [&](const Invocation& inv) {
    std::vector<Config> out;
    for (const Config& c : impl.space(inv, info).enumerate())
      if (c.text("variant") == "coopmat") out.push_back(c);
    return out;
  };
  if (coop(probe).empty()) GTEST_SKIP() << info.id() << " (" << info.name << ") offers no f16 cooperative matrices with full subgroups of 32";
  const std::vector<std::map<std::string, std::int64_t>> shapes = {
      {{"batch", 3}, {"heads", 16}, {"context", 300}},
      {{"batch", 4}, {"heads", 32}, {"context", 192}, {"kv_lora_rank", 128}, {"rope_dim", 32}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}},
      {{"batch", 3}, {"heads", 16}, {"context", 150}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}, {"block_size", 16}},
      // The projections' edges: two absorb blocks of 32 sequences, three merge groups of 16 (the
      // last mostly past the batch), three column fragments for eight subgroups, one chunk of w_vc.
      {{"batch", 37}, {"heads", 16}, {"context", 96}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 48},
       {"v_head_dim", 48}},
      // Merge groups of 16 and of 8 sequences (on devices of 96 to 144 compute units; the shapes
      // above take 4): the last group of each partly past the batch.
      {{"batch", 17}, {"heads", 144}, {"context", 96}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}},
      {{"batch", 17}, {"heads", 48}, {"context", 96}, {"kv_lora_rank", 64}, {"rope_dim", 16}, {"qk_nope_head_dim", 32},
       {"v_head_dim", 32}},
  };
  std::size_t runs = 0;
  for (std::size_t si = 0; si < shapes.size(); ++si) {
    const Invocation inv = mk.from_sizes(shapes[si], DType::f16, nlohmann::json::object());
    HostArrays in = mk.inputs(inv, 41 + si);
    auto& lens = in[mla::arg::context_lens];
    for (std::size_t b = 1; b < lens.size(); ++b) lens[b] = b == 1 ? std::floor(lens[0] / 2) + 37 : b == 2 ? 0 : 33;
    const HostArrays want = mk.reference(inv, in);
    std::vector<Config> configs{impl.heuristic(inv, info)};
    EXPECT_EQ(configs[0].text("variant"), "coopmat") << inv.signature();
    for (const Config& c : coop(inv))
      if (c.get("splits") <= 4) configs.push_back(c);
    for (const Config& c : configs) {
      std::vector<Tensor> args;
      for (std::size_t i = 0; i < inv.args.size(); ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
      impl.run(inv, c, args, ctx.device());
      const std::vector<double> got = args[mla::arg::out].read();
      EXPECT_LE(test::relative_error(got, want[0]), mk.tolerance(inv)) << inv.signature() << " " << c.canonical();
      const std::size_t row = got.size() / lens.size();
      EXPECT_TRUE(std::all_of(got.begin() + 2 * row, got.begin() + 3 * row, [](double x) { return x == 0.0; })) << c.canonical();
      ++runs;
    }
  }
  EXPECT_GT(runs, 10u);
}

// A tensor-core config that reaches run() without the space is refused, naming what it lacks:
// the device's fragments where it has none, the geometry's rules where it has them (8 warps
// share their softmax over 32 tokens at least).
TEST_P(MlaAttention, TensorCoreConfigOutsideTheSpaceIsRefused) {
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  const Implementation* impl = opencl_c_decode(info);
  if (!impl) GTEST_SKIP() << info.id() << " runs no OpenCL C";
  const mla::MlaDecodeKernel mk;
  const Invocation inv = mk.from_sizes({{"batch", 1}, {"heads", 16}, {"context", 128}}, DType::f16, nlohmann::json::object());
  std::vector<Tensor> args;
  for (const auto& a : inv.args) args.push_back(ctx.empty(a.shape, a.dtype));
  const bool offered = !mma_configs(*impl, inv, info).empty();
  const Config c{{"variant", std::string("mma")}, {"mma_warps", offered ? 8 : 4}, {"mma_block_n", offered ? 16 : 32}, {"splits", 1}};
  test::expect_error([&] { impl->run(inv, c, args, ctx.device()); },
                     offered ? "needs mma_warps 4 or 8" : "tensor-core fragments");
}

// The variant is offered exactly where the device lists m16n8k16 fragments of the storage type
// and the widths make whole tiles, never to CPU drivers, and the heuristic takes it there.
TEST(MlaDecodeOpenCL, TensorCoreVariantNeedsFragments) {
  DeviceInfo gpu = test::nvidia_opencl_like();
  const Implementation* impl = opencl_c_decode(gpu);
  if (!impl) GTEST_SKIP() << "built without OpenCL";
  const mla::MlaDecodeKernel mk;
  auto inv = [&](DType t, std::int64_t rank, std::int64_t rope) {
    return mk.from_sizes({{"batch", 32}, {"heads", 16}, {"context", 4096}, {"kv_lora_rank", rank}, {"rope_dim", rope}}, t,
                         nlohmann::json::object());
  };
  EXPECT_TRUE(mma_configs(*impl, inv(DType::f16, 512, 64), gpu).empty()) << "no fragments listed";
  gpu.coopmat = {CoopMatShape{16, 8, 16, DType::f16, DType::f32}};
  const auto deepseek = mma_configs(*impl, inv(DType::f16, 512, 64), gpu);
  EXPECT_FALSE(deepseek.empty());
  for (const Config& c : deepseek) {
    EXPECT_LE(c.get("mma_block_n"), 32) << "a 64-row tile of 576-wide rows exceeds 48 KiB";
    if (c.get("mma_async")) {
      EXPECT_TRUE(c.get("mma_block_n") == 16 && c.get("mma_stages") == 2 && c.get("mma_warps") == 4)
          << "two stages of 16 rows fill 48 KiB: " << c.canonical();
    }
  }
  EXPECT_TRUE(std::any_of(deepseek.begin(), deepseek.end(), [](const Config& c) { return c.get("mma_async") == 1; }))
      << "the cp.async ring fits at 16 rows";
  EXPECT_TRUE(mma_configs(*impl, inv(DType::bf16, 512, 64), gpu).empty()) << "only f16 fragments listed";
  EXPECT_TRUE(mma_configs(*impl, inv(DType::f32, 512, 64), gpu).empty());
  EXPECT_TRUE(mma_configs(*impl, inv(DType::f16, 96, 32), gpu).empty()) << "kv_lora_rank not a multiple of 64";
  EXPECT_TRUE(mma_configs(*impl, inv(DType::f16, 512, 8), gpu).empty()) << "row not a multiple of 16";
  const Config h = impl->heuristic(inv(DType::f16, 512, 64), gpu);
  EXPECT_EQ(h.text("variant"), "mma");
  EXPECT_EQ(h.get("mma_async"), 1) << "the cp.async ring, measured faster on an H200";
  EXPECT_EQ(h.get("mma_block_n"), 16);
  EXPECT_EQ(h.get("splits"), 4) << "128 groups of 44 KiB in one wave of one a compute unit: 132 units, 48 KiB";
  // An H200's OpenCL: fixed-size local arrays up to 227 KiB, so two stages of 64 rows (166 KiB, one
  // group a multiprocessor) and 4 parts, the best of an exhaustive tune there.
  DeviceInfo h200 = gpu;
  h200.static_local_mem = 227 * 1024;
  const Config big = impl->heuristic(inv(DType::f16, 512, 64), h200);
  EXPECT_EQ(big.text("variant"), "mma");
  EXPECT_EQ(big.get("mma_block_n"), 64);
  EXPECT_EQ(big.get("mma_stages"), 2);
  EXPECT_EQ(big.get("mma_warps"), 4);
  EXPECT_EQ(big.get("splits"), 4);
  const Config small = impl->heuristic(
      mk.from_sizes({{"batch", 4}, {"heads", 16}, {"context", 8192}}, DType::f16, nlohmann::json::object()), h200);
  EXPECT_EQ(small.get("splits"), 32) << "4 groups a part: parts until they fill the units";
  DeviceInfo cpu = gpu;
  cpu.cpu = true;
  EXPECT_TRUE(mma_configs(*impl, inv(DType::f16, 512, 64), cpu).empty()) << "a CPU driver";
}

INSTANTIATE_TEST_SUITE_P(All, MlaAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

// ---- device-independent ---------------------------------------------------------------------

TEST(MlaWorkloads, RecipeSizesAndValidInputs) {
  const mla::MlaDecodeKernel k;
  const Invocation inv = k.from_sizes({{"batch", 2}, {"heads", 4}, {"context", 100}, {"block_size", 32}, {"kv_lora_rank", 64},
                                       {"rope_dim", 16}, {"qk_nope_head_dim", 32}, {"v_head_dim", 32}},
                                      DType::f16, nlohmann::json::object());
  const mla::Problem p = mla::Problem::of(inv);
  EXPECT_EQ(p.max_blocks, 4);
  EXPECT_EQ(p.num_blocks, 8);
  const HostArrays a = k.inputs(inv, 3);
  std::vector<std::int64_t> tables(a[mla::arg::block_tables].begin(), a[mla::arg::block_tables].end());
  std::vector<std::int64_t> lens(a[mla::arg::context_lens].begin(), a[mla::arg::context_lens].end());
  EXPECT_NO_THROW(mla::check_tables(p, tables, lens));
  std::sort(tables.begin(), tables.end());
  EXPECT_EQ(std::unique(tables.begin(), tables.end()), tables.end()) << "pages are distinct";
  EXPECT_NO_THROW((void)k.reference(inv, a));
  test::expect_error([&] { (void)k.from_sizes({{"batch", 2}, {"heads", 4}}, DType::f16, nlohmann::json::object()); },
                     "needs size 'context'");
  test::expect_error([&] { (void)k.from_sizes({{"batch", 2}, {"heads", 4}, {"context", 9}, {"seq", 3}}, DType::f16,
                                              nlohmann::json::object()); },
                     "has no size 'seq'");
}

}  // namespace
}  // namespace ejk
