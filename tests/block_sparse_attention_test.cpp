// Block-sparse attention: the host layout against hand-written block sets for each pattern,
// and the forward and gradients (dq, dk, dv) of every device against the double-precision
// dense attention over the expanded element mask, for f32/f16/bf16, GQA, causal, soft cap,
// segment ids, random and broadcast block masks, rows with no live block, sequences that are
// not multiples of the block, every config of a small space, and the errors.
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "block_sparse_attention/block_sparse_attention.hpp"
#include "decode_support.hpp"

namespace ejk {
namespace {

namespace bsa = kernels::block_sparse_attention;

// Live (bi, bj) pairs of row 0 of a layout's lists, and the same from the transposed lists.
std::set<std::pair<int, int>> live(const bsa::Layout& l, std::int64_t row = 0) {
  std::set<std::pair<int, int>> s, t;
  for (std::int64_t bi = 0; bi < l.nbq; ++bi)
    for (std::int64_t e = 0; e < l.kv_counts[static_cast<std::size_t>(row * l.nbq + bi)]; ++e)
      s.insert({static_cast<int>(bi), l.kv_indices[static_cast<std::size_t>((row * l.nbq + bi) * l.nbk + e)]});
  for (std::int64_t bj = 0; bj < l.nbk; ++bj)
    for (std::int64_t e = 0; e < l.q_counts[static_cast<std::size_t>(row * l.nbk + bj)]; ++e)
      t.insert({l.q_indices[static_cast<std::size_t>((row * l.nbk + bj) * l.nbq + e)], static_cast<int>(bj)});
  EXPECT_EQ(s, t) << "the transposed lists disagree";
  return s;
}

TEST(BlockSparseLayout, PatternsGiveTheDocumentedBlocks) {
  using S = std::set<std::pair<int, int>>;
  auto build = [](std::int64_t sq, std::int64_t sk, bsa::Pattern p) { return bsa::build_layout(1, 1, sq, sk, p); };
  // 5 x 5 blocks of 4 (the last one short: 18 = 4 * 4 + 2).
  EXPECT_EQ(live(build(18, 18, {4, 4, false, 1, 0})), (S{{0, 0}, {1, 0}, {1, 1}, {2, 1}, {2, 2}, {3, 2}, {3, 3}, {4, 3}, {4, 4}}));
  EXPECT_EQ(live(build(18, 18, {4, 4, false, -1, 2})), (S{{0, 0}, {1, 1}, {2, 0}, {2, 2}, {3, 1}, {3, 3}, {4, 0}, {4, 2}, {4, 4}}));
  // Local 0 and stride 3: the diagonal, and every third block back.
  EXPECT_EQ(live(build(18, 18, {4, 4, true, 0, 3})), (S{{0, 0}, {1, 1}, {2, 2}, {3, 0}, {3, 3}, {4, 1}, {4, 4}}));
  // Causal alone: the lower triangle of blocks.
  EXPECT_EQ(live(build(8, 8, {4, 4, true, -1, 0})), (S{{0, 0}, {1, 0}, {1, 1}}));
  // Neither: dense.
  EXPECT_EQ(live(build(8, 5, {4, 4, false, -1, 0})), (S{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  // seq_k > seq_q: the diagonal moves right by 8 keys (two blocks), as flash_attention's.
  EXPECT_EQ(live(build(8, 16, {4, 4, true, 0, 0})), (S{{0, 2}, {1, 3}}));
  // seq_q > seq_k: query block 0 lies wholly before the first key, so it has no block.
  EXPECT_EQ(live(build(8, 4, {4, 4, true, -1, 0})), (S{{1, 0}}));
  // Query blocks of 2 over key blocks of 4: diag of query block bi is (2 bi + 1) / 4.
  EXPECT_EQ(live(build(8, 8, {2, 4, true, 0, 0})), (S{{0, 0}, {1, 0}, {2, 1}, {3, 1}}));
  // A mask intersected with a pattern, per head.
  const Shape ms{1, 2, 2, 2};
  const std::vector<std::int64_t> m{1, 1, 0, 1, 0, 0, 1, 1};
  const auto l = bsa::build_layout(3, 2, 8, 8, {4, 4, true, -1, 0}, &ms, m);
  EXPECT_EQ(l.lb, 1);
  EXPECT_EQ(l.lh, 2);
  EXPECT_EQ(live(l, 0), (S{{0, 0}, {1, 1}}));
  EXPECT_EQ(live(l, 1), (S{{1, 0}, {1, 1}}));
  // Useful pairs: head 0 has two diagonal blocks (10 pairs each under the causal mask), head 1
  // a full block (16) and a diagonal one, times batch 3.
  EXPECT_DOUBLE_EQ(l.pairs, 3 * (10 + 10 + 16 + 10));
}

struct Case {
  std::int64_t batch = 2, seq_q = 37, seq_k = 37, heads = 4, kv_heads = 2, dim = 16;
  BlockSparseLayoutOptions layout{.block_q = 8, .block_k = 8, .causal = true, .local_blocks = 1, .stride = 3};
  double cap = 0;
  bool segments = false;
};

struct Inputs {
  Tensor q, k, v, dout, qs, ks;
  BlockSparseLayout layout;
};

Inputs make(const Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  auto u = [&](Shape s) { return ctx.from(s, t, test::uniform_values(rng, numel(s), -1, 1)); };
  in.q = u({c.batch, c.seq_q, c.heads, c.dim});
  // Keys scaled up so that logits spread over a few units (softmax rows far from uniform).
  std::vector<double> kv = test::uniform_values(rng, c.batch * c.seq_k * c.kv_heads * c.dim, -3, 3);
  in.k = ctx.from({c.batch, c.seq_k, c.kv_heads, c.dim}, t, kv);
  in.v = u({c.batch, c.seq_k, c.kv_heads, c.dim});
  in.dout = u({c.batch, c.seq_q, c.heads, c.dim});
  if (c.segments) {
    // Runs of 13 queries and 11 keys: some rows see no key of their segment.
    std::vector<double> qs, ks;
    for (std::int64_t b = 0; b < c.batch; ++b) {
      for (std::int64_t i = 0; i < c.seq_q; ++i) qs.push_back(static_cast<double>(i / 13));
      for (std::int64_t j = 0; j < c.seq_k; ++j) ks.push_back(static_cast<double>(j / 11));
    }
    in.qs = ctx.from({c.batch, c.seq_q}, DType::i32, qs);
    in.ks = ctx.from({c.batch, c.seq_k}, DType::i32, ks);
  }
  in.layout = block_sparse_layout(ctx, c.batch, c.heads, c.seq_q, c.seq_k, c.layout);
  return in;
}

struct Outcome {
  std::vector<double> out, lse, dq, dk, dv;
};

TensorSpec spec_or_absent(const Tensor& t) { return t.defined() ? t.spec() : bsa::absent(); }
std::vector<double> read_or_empty(const Tensor& t) { return t.defined() ? t.read() : std::vector<double>{}; }

// Runs forward and backward on ctx and checks both against the double reference; returns the
// results for comparisons between configs.
Outcome check(const Context& ctx, const Case& c, const Inputs& in, const std::string& what,
              const std::optional<Config>& fwd_config = {}, const std::optional<Config>& bwd_config = {}) {
  SCOPED_TRACE(what);
  BlockSparseAttentionOptions o{.softmax_scale = {}, .logits_soft_cap = c.cap, .q_segment_ids = in.qs,
                                .kv_segment_ids = in.ks, .config = fwd_config};
  const auto [out, lse] = block_sparse_attention(ctx, in.q, in.k, in.v, in.layout, o);
  o.config = bwd_config;
  const auto g = block_sparse_attention_bwd(ctx, in.q, in.k, in.v, out, in.dout, lse, in.layout, o);

  const BlockSparseLayout& l = in.layout;
  bsa::Options ko{.block_q = c.layout.block_q, .block_k = c.layout.block_k, .causal = c.layout.causal,
                  .logits_soft_cap = c.cap, .local_blocks = c.layout.local_blocks, .stride = c.layout.stride,
                  .mask = l.mask, .softmax_scale = 0.0, .density = l.density};
  const HostArrays lists{l.kv_block_counts.read(), l.kv_block_indices.read(), l.q_block_counts.read(),
                         l.q_block_indices.read()};
  Outcome r{out.read(), lse.read(), g.dq.read(), g.dk.read(), g.dv.read()};

  const TensorSpec fspecs[] = {in.q.spec(), in.k.spec(), in.v.spec(), l.kv_block_counts.spec(), l.kv_block_indices.spec(),
                               spec_or_absent(in.qs), spec_or_absent(in.ks), out.spec(), lse.spec()};
  const Invocation finv = bsa::forward_invocation(fspecs, ko);
  const bsa::BlockSparseAttentionKernel fk;
  const HostArrays fargs{in.q.read(), in.k.read(), in.v.read(), lists[0], lists[1], read_or_empty(in.qs),
                         read_or_empty(in.ks), r.out, r.lse};
  const auto fwant = fk.reference(finv, fargs);
  EXPECT_LE(test::relative_error(r.out, fwant[0]), fk.tolerance(finv)) << "out";
  EXPECT_LE(test::relative_error(r.lse, fwant[1]), fk.tolerance(finv)) << "lse";
  // Rows with no allowed key: out exactly 0, lse -inf, and the reference agrees on which rows.
  for (std::size_t i = 0; i < r.lse.size(); ++i) {
    EXPECT_EQ(std::isinf(r.lse[i]), std::isinf(fwant[1][i])) << "lse row " << i;
    EXPECT_FALSE(std::isnan(r.lse[i]));
  }

  const TensorSpec bspecs[] = {in.q.spec(), in.k.spec(), in.v.spec(), out.spec(), in.dout.spec(), lse.spec(),
                               l.kv_block_counts.spec(), l.kv_block_indices.spec(), l.q_block_counts.spec(),
                               l.q_block_indices.spec(), spec_or_absent(in.qs), spec_or_absent(in.ks), g.dq.spec(),
                               g.dk.spec(), g.dv.spec()};
  const Invocation binv = bsa::backward_invocation(bspecs, ko);
  const bsa::BlockSparseAttentionBwdKernel bk;
  const HostArrays bargs{in.q.read(),  in.k.read(), in.v.read(), r.out,    in.dout.read(), r.lse,
                         lists[0],     lists[1],    lists[2],    lists[3], read_or_empty(in.qs), read_or_empty(in.ks),
                         r.dq,         r.dk,        r.dv};
  const auto bwant = bk.reference(binv, bargs);
  EXPECT_LE(test::relative_error(r.dq, bwant[0]), bk.tolerance(binv)) << "dq";
  EXPECT_LE(test::relative_error(r.dk, bwant[1]), bk.tolerance(binv)) << "dk";
  EXPECT_LE(test::relative_error(r.dv, bwant[2]), bk.tolerance(binv)) << "dv";
  return r;
}

class BlockSparseAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockSparseAttention, LocalStridedCausalGqaInEveryDtype) {
  Context ctx(GetParam());
  const Case c;  // 37 tokens in blocks of 8, heads 4 over 2 kv heads
  for (DType t : {DType::f32, DType::f16, DType::bf16}) check(ctx, c, make(ctx, c, t, 3), std::string(to_string(t)));
}

TEST_P(BlockSparseAttention, EachPatternAlone) {
  Context ctx(GetParam());
  Case c;
  c.layout = {.block_q = 8, .block_k = 8, .causal = false, .local_blocks = 1};
  check(ctx, c, make(ctx, c, DType::f32, 4), "local, not causal");
  c.layout = {.block_q = 8, .block_k = 8, .causal = false, .local_blocks = -1, .stride = 2};
  check(ctx, c, make(ctx, c, DType::f32, 5), "strided");
  c.layout = {.block_q = 8, .block_k = 8, .causal = true};
  check(ctx, c, make(ctx, c, DType::f32, 6), "causal");
  c.layout = {.block_q = 8, .block_k = 8, .causal = false};
  check(ctx, c, make(ctx, c, DType::f32, 7), "dense");
  // Query and key blocks of different sizes, more keys than queries.
  c.seq_q = 21;
  c.seq_k = 45;
  c.layout = {.block_q = 4, .block_k = 8, .causal = true, .local_blocks = 1, .stride = 2};
  check(ctx, c, make(ctx, c, DType::f32, 8), "block_q 4, block_k 8, seq_q 21, seq_k 45");
}

TEST_P(BlockSparseAttention, WideHeadsAndMultiQuery) {
  Context ctx(GetParam());
  Case c;
  c.batch = 1;
  c.seq_q = c.seq_k = 40;
  c.heads = 3;
  c.kv_heads = 1;
  c.dim = 128;
  c.layout = {.block_q = 16, .block_k = 16, .causal = true, .local_blocks = 0, .stride = 2};
  check(ctx, c, make(ctx, c, DType::f16, 16), "head_dim 128, one kv head for 3 heads, f16");
}

TEST_P(BlockSparseAttention, SoftCapAndSegmentIds) {
  Context ctx(GetParam());
  Case c;
  c.cap = 2.5;
  check(ctx, c, make(ctx, c, DType::f32, 9), "soft cap");
  c.cap = 0;
  c.segments = true;
  check(ctx, c, make(ctx, c, DType::f32, 10), "segment ids");
  c.cap = 4;
  check(ctx, c, make(ctx, c, DType::f16, 11), "both, f16");
}

TEST_P(BlockSparseAttention, RandomMasksWithEmptyRows) {
  Context ctx(GetParam());
  Case c;
  c.seq_q = 29;
  c.seq_k = 43;
  const std::int64_t nbq = 4, nbk = 6;
  std::mt19937_64 rng(12);
  // Per head, broadcast over batch; query block 2 of head 1 has no live block.
  std::vector<double> m(static_cast<std::size_t>(c.heads * nbq * nbk));
  for (auto& x : m) x = static_cast<double>(rng() % 2);
  for (std::int64_t bj = 0; bj < nbk; ++bj) m[static_cast<std::size_t>((1 * nbq + 2) * nbk + bj)] = 0;
  c.layout = {.block_q = 8, .block_k = 8, .causal = false, .block_mask = ctx.from({1, c.heads, nbq, nbk}, DType::i32, m)};
  Inputs in = make(ctx, c, DType::f32, 13);
  const Outcome r = check(ctx, c, in, "i32 mask [1, heads, ...]");
  for (std::int64_t b = 0; b < c.batch; ++b)
    for (std::int64_t i = 16; i < 24; ++i) {
      EXPECT_EQ(r.lse[static_cast<std::size_t>((b * c.heads + 1) * c.seq_q + i)], -std::numeric_limits<double>::infinity());
      for (std::int64_t d = 0; d < c.dim; ++d) {
        const auto at = static_cast<std::size_t>(((b * c.seq_q + i) * c.heads + 1) * c.dim + d);
        EXPECT_EQ(r.out[at], 0.0);
        EXPECT_EQ(r.dq[at], 0.0);
      }
    }
  // A u8 mask on the host, per batch and broadcast over heads, with the causal pattern.
  std::vector<std::uint8_t> u8(static_cast<std::size_t>(c.batch * nbq * nbk));
  for (auto& x : u8) x = static_cast<std::uint8_t>(rng() % 3 != 0);
  c.layout = {.block_q = 8, .block_k = 8, .causal = true, .block_mask_u8 = u8, .block_mask_shape = {c.batch, 1, nbq, nbk}};
  check(ctx, c, make(ctx, c, DType::bf16, 14), "u8 mask [batch, 1, ...], causal, bf16");
}

TEST_P(BlockSparseAttention, EveryConfigOfASmallSpaceAgrees) {
  Context ctx(GetParam());
  Case c;
  c.batch = 1;
  c.seq_q = c.seq_k = 19;
  c.layout = {.block_q = 4, .block_k = 4, .causal = true, .local_blocks = 1, .stride = 2};
  c.cap = 3;
  const Inputs in = make(ctx, c, DType::f32, 15);
  const auto& dev = ctx.device().info();
  const auto probe = check(ctx, c, in, "heuristic");
  // The spaces of this problem, from the kernels' own invocations.
  const bsa::Options ko{.block_q = 4, .block_k = 4, .causal = true, .logits_soft_cap = 3, .local_blocks = 1, .stride = 2};
  const TensorSpec out = in.q.spec(), lse{{1, c.heads, c.seq_q}, DType::f32};
  const TensorSpec fspecs[] = {in.q.spec(), in.k.spec(), in.v.spec(), in.layout.kv_block_counts.spec(),
                               in.layout.kv_block_indices.spec(), bsa::absent(), bsa::absent(), out, lse};
  const TensorSpec bspecs[] = {in.q.spec(), in.k.spec(), in.v.spec(), out, out, lse,
                               in.layout.kv_block_counts.spec(), in.layout.kv_block_indices.spec(),
                               in.layout.q_block_counts.spec(), in.layout.q_block_indices.spec(), bsa::absent(),
                               bsa::absent(), out, in.k.spec(), in.v.spec()};
  const Invocation finv = bsa::forward_invocation(fspecs, ko), binv = bsa::backward_invocation(bspecs, ko);
  const auto fconfigs = Registry::global().implementation(finv, dev).space(finv, dev).enumerate();
  const auto bconfigs = Registry::global().implementation(binv, dev).space(binv, dev).enumerate();
  ASSERT_EQ(fconfigs.size(), 9u);   // block_m, block_n in 1, 2, 4
  ASSERT_EQ(bconfigs.size(), 81u);  // and dq_block_m, dq_block_n
  for (const Config& config : fconfigs) {
    const Outcome r = check(ctx, c, in, "forward " + config.canonical(), config, {});
    EXPECT_LE(test::relative_error(r.out, probe.out), 1e-5) << config.canonical();
    EXPECT_LE(test::relative_error(r.lse, probe.lse), 1e-5) << config.canonical();
  }
  for (const Config& config : bconfigs) {
    const Outcome r = check(ctx, c, in, "backward " + config.canonical(), {}, config);
    EXPECT_LE(test::relative_error(r.dq, probe.dq), 1e-4) << config.canonical();
    EXPECT_LE(test::relative_error(r.dk, probe.dk), 1e-4) << config.canonical();
    EXPECT_LE(test::relative_error(r.dv, probe.dv), 1e-4) << config.canonical();
  }
}

TEST_P(BlockSparseAttention, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  const auto& dev = ctx.device().info();
  for (bool backward : {false, true})
    for (auto [bq, bk] : {std::pair{64, 64}, {128, 64}, {16, 32}, {3, 5}}) {
      const bsa::BlockSparseAttentionKernel f;
      const bsa::BlockSparseAttentionBwdKernel b;
      const Kernel& k = backward ? static_cast<const Kernel&>(b) : f;
      const Invocation inv = k.from_sizes({{"seq", 512}, {"heads", 4}, {"head_dim", 64}}, DType::f16,
                                          {{"block_q", bq}, {"block_k", bk}, {"causal", true}, {"local_blocks", 2}});
      const auto& impl = Registry::global().implementation(inv, dev);
      const Config h = impl.heuristic(inv, dev);
      EXPECT_EQ(impl.space(inv, dev).mismatch(h), "") << h.canonical();
    }
}

// On OpenCL and Vulkan, flash attention's passes walking the layout (flash_passes.hpp): the
// heuristic takes them where their tiles divide the layout's blocks, and they match the reference
// with several tiles to a block, blocks of different sizes for queries and keys, lists per batch
// and per head, rows with no live block, and every option.
TEST_P(BlockSparseAttention, FlashPassesWalkTheLayout) {
  Context ctx(GetParam());
  const auto& dev = ctx.device().info();
  if (dev.backend == Backend::cpu) GTEST_SKIP() << "the native CPU runs its own tiles";
  for (bool backward : {false, true}) {
    const bsa::BlockSparseAttentionKernel f;
    const bsa::BlockSparseAttentionBwdKernel b;
    const Kernel& k = backward ? static_cast<const Kernel&>(b) : f;
    const Invocation inv = k.from_sizes({{"seq", 512}, {"heads", 4}, {"head_dim", 64}}, DType::f16,
                                        {{"block_q", 64}, {"block_k", 64}, {"causal", true}, {"local_blocks", 2}});
    const auto& impl = Registry::global().implementation(inv, dev);
    EXPECT_NE(impl.heuristic(inv, dev).text("variant"), "tiles") << inv.signature();
  }
  // 8 x 8 tiles: two to a query block of 16 and four to a key block of 32.
  const Config scalar{{"variant", std::string("scalar")}, {"tile_q", 8}, {"tile_k", 8}, {"threads_x", 8}, {"threads_y", 4}};
  Case c;
  c.seq_q = 45;
  c.seq_k = 70;
  c.layout = {.block_q = 16, .block_k = 32, .causal = true, .local_blocks = 1, .stride = 2};
  check(ctx, c, make(ctx, c, DType::f32, 21), "blocks 16 x 32, f32", scalar, scalar);
  c.cap = 5;
  c.segments = true;
  check(ctx, c, make(ctx, c, DType::f16, 22), "blocks 16 x 32, cap and segment ids, f16", scalar, scalar);
  c.cap = 0;
  c.segments = false;
  // A random mask per batch and head, query block 1 of (batch 1, head 2) empty, not causal.
  c.seq_q = c.seq_k = 40;
  const std::int64_t nbq = 3, nbk = 3;
  std::mt19937_64 rng(23);
  std::vector<double> m(static_cast<std::size_t>(c.batch * c.heads * nbq * nbk));
  for (auto& x : m) x = static_cast<double>(rng() % 2);
  for (std::int64_t bj = 0; bj < nbk; ++bj) m[static_cast<std::size_t>(((1 * c.heads + 2) * nbq + 1) * nbk + bj)] = 0;
  c.layout = {.block_q = 16, .block_k = 16, .causal = false, .block_mask = ctx.from({c.batch, c.heads, nbq, nbk}, DType::i32, m)};
  const Outcome r = check(ctx, c, make(ctx, c, DType::bf16, 24), "mask [batch, heads, ...], bf16", scalar, scalar);
  for (std::int64_t i = 16; i < 32; ++i)
    EXPECT_EQ(r.lse[static_cast<std::size_t>((1 * c.heads + 2) * c.seq_q + i)], -std::numeric_limits<double>::infinity());
  // Blocks of 64 under the heuristic's configs: the tensor-core passes (OpenCL mma, the Vulkan
  // cooperative-matrix forward) where the device offers them, the scalar ones elsewhere.
  Case w;
  w.seq_q = w.seq_k = 150;
  w.dim = 64;
  w.layout = {.block_q = 64, .block_k = 64, .causal = true, .local_blocks = 0, .stride = 2};
  check(ctx, w, make(ctx, w, DType::f16, 25), "blocks of 64, heuristic configs, f16");
  w.cap = 20;
  w.segments = true;
  check(ctx, w, make(ctx, w, DType::bf16, 26), "blocks of 64, cap and segment ids, bf16");
}

TEST(BlockSparseLayout, HostLayoutsAreBounded) {
  // 2^20 tokens in blocks of 64 are 2^28 block pairs: refused before any list is built.
  for (const bool backward : {false, true}) {
    const std::map<std::string, std::int64_t> sizes{{"seq", std::int64_t{1} << 20}, {"heads", 1}, {"head_dim", 64}};
    try {
      (void)bsa::recipe_invocation(backward, sizes, DType::f16, nlohmann::json::object());
      ADD_FAILURE() << "a 2^28-block layout was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("16384 x 16384 block pairs"), std::string::npos) << e.what();
    }
  }
  // At the bound itself (2^18 tokens: 4096 x 4096 pairs) the workload is made.
  const std::map<std::string, std::int64_t> edge{{"seq", std::int64_t{1} << 18}, {"heads", 1}, {"head_dim", 64}};
  EXPECT_NO_THROW((void)bsa::recipe_invocation(false, edge, DType::f16, {{"causal", true}, {"local_blocks", 2}}));
}

TEST_P(BlockSparseAttention, WorkloadsFromRecipeSizes) {
  Context ctx(GetParam());
  // Local window + strided at seq 4096 in blocks of 64: the density the flops count uses.
  const bsa::BlockSparseAttentionKernel k;
  const Invocation inv = k.from_sizes({{"seq", 4096}, {"heads", 2}, {"head_dim", 64}}, DType::f32,
                                      {{"causal", true}, {"local_blocks", 3}, {"stride", 8}});
  const double density = inv.scalars.at("density").get<double>();
  EXPECT_GT(density, 0.05);
  EXPECT_LT(density, 0.2);
  EXPECT_NEAR(k.flops(inv), 4.0 * 2 * 4096.0 * 4096.0 * 64 * density, 1.0);
  // The workload's inputs run and check on this device (mask option included).
  const Invocation small = bsa::BlockSparseAttentionBwdKernel().from_sizes(
      {{"seq", 40}, {"heads", 2}, {"head_dim", 16}, {"batch", 2}}, DType::f32,
      {{"block_q", 8}, {"block_k", 8}, {"mask", true}, {"segments", true}});
  const bsa::BlockSparseAttentionBwdKernel bk;
  const HostArrays a = bk.inputs(small, 1);
  std::vector<Tensor> t;
  for (std::size_t i = 0; i < small.args.size(); ++i) {
    t.push_back(ctx.empty(small.args[i].shape, small.args[i].dtype));
    if (!a[i].empty()) t.back().write(a[i]);
  }
  const auto& impl = Registry::global().implementation(small, ctx.device().info());
  impl.run(small, impl.heuristic(small, ctx.device().info()), t, ctx.device());
  HostArrays got;
  for (const auto& x : t) got.push_back(x.read());
  const auto want = bk.reference(small, got);
  EXPECT_LE(test::relative_error(got[bsa::bwd::dq], want[0]), bk.tolerance(small));
  EXPECT_LE(test::relative_error(got[bsa::bwd::dv], want[2]), bk.tolerance(small));
}

TEST_P(BlockSparseAttention, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Case c;
  const Inputs in = make(ctx, c, DType::f32, 1);
  expect_error([&] { (void)block_sparse_layout(ctx, 2, 4, 37, 37, {.block_q = 0, .block_k = 8}); },
               "block_q 0 and block_k 8 must be positive");
  expect_error([&] { (void)block_sparse_layout(ctx, 2, 4, 37, 37, {.block_q = 8, .block_k = -8}); },
               "block_q 8 and block_k -8 must be positive");
  expect_error(
      [&] {
        (void)block_sparse_layout(ctx, 2, 4, 37, 37,
                                  {.block_q = 8, .block_k = 8, .block_mask = ctx.from({2, 4, 5, 4}, DType::i32, std::vector<double>(160, 1.0))});
      },
      "block_mask [2, 4, 5, 4] must be [batch 2 or 1, heads 4 or 1, ceil(seq_q / block_q) = 5, ceil(seq_k / block_k) = 5]");
  expect_error(
      [&] {
        (void)block_sparse_layout(ctx, 2, 4, 37, 37,
                                  {.block_q = 8, .block_k = 8, .block_mask = ctx.from({3, 1, 5, 5}, DType::i32, std::vector<double>(75, 1.0))});
      },
      "block_mask [3, 1, 5, 5] must be [batch 2 or 1");
  expect_error(
      [&] {
        (void)block_sparse_layout(ctx, 2, 4, 37, 37,
                                  {.block_q = 8, .block_k = 8, .block_mask = ctx.from({1, 1, 5, 5}, DType::f32, std::vector<double>(25, 1.0))});
      },
      "block_mask [1, 1, 5, 5] f32 must be i32");
  expect_error([&] { (void)block_sparse_layout(ctx, 2, 4, 37, 37, {.block_q = 8, .block_k = 8, .local_blocks = -2}); },
               "local_blocks -2");
  // Heads not a multiple of kv_heads.
  const Tensor k3 = ctx.random({2, 37, 3, 16}, DType::f32, 1);
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, k3, k3, in.layout); },
               "heads 4 (q [2, 37, 4, 16]) must be a positive multiple of kv_heads 3");
  const Tensor k16 = ctx.random({2, 37, 2, 16}, DType::f16, 1);
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, k16, k16, in.layout); }, "k [2, 37, 2, 16] f16 must be f32");
  const Tensor v8 = ctx.random({2, 37, 2, 8}, DType::f32, 1);
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, v8, in.layout); }, "v [2, 37, 2, 8] f32 must be f32 [2, 37, 2, 16]");
  // A layout of other sizes.
  const auto other = block_sparse_layout(ctx, 2, 4, 40, 40, {.block_q = 8, .block_k = 8});
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, in.v, other); },
               "the layout was built for batch 2, heads 4, seq_q 40, seq_k 40");
  // Segment ids: one without the other, and the wrong shape.
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, in.v, in.layout, {.q_segment_ids = ctx.from({2, 37}, DType::i32, std::vector<double>(74, 0.0))}); },
               "kv_segment_ids [0] f32 must be i32 [2, 37]");
  expect_error(
      [&] {
        (void)block_sparse_attention(ctx, in.q, in.k, in.v, in.layout,
                                     {.q_segment_ids = ctx.from({2, 36}, DType::i32, std::vector<double>(72, 0.0)),
                                      .kv_segment_ids = ctx.from({2, 37}, DType::i32, std::vector<double>(74, 0.0))});
      },
      "q_segment_ids [2, 36] i32 must be i32 [2, 37]");
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, in.v, in.layout, {.logits_soft_cap = -1}); },
               "logits_soft_cap -1");
  expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, in.v, in.layout, {.softmax_scale = 0.0}); },
               "softmax_scale 0");
  // The kernel's own checks of the lists (invocations built by hand).
  const TensorSpec bad[] = {in.q.spec(), in.k.spec(), in.v.spec(), {{1, 1, 4}, DType::i32}, {{1, 1, 4, 5}, DType::i32},
                            bsa::absent(), bsa::absent(), in.q.spec(), {{2, 4, 37}, DType::f32}};
  expect_error([&] { bsa::BlockSparseAttentionKernel().validate(bsa::forward_invocation(bad, {.block_q = 8, .block_k = 8})); },
               "kv_block_counts [1, 1, 4] i32 must be i32 [batch 2 or 1, heads 4 or 1, ceil(seq_q / block_q) = 5]");
  // Out-of-range list entries are refused before anything is read (the CPU checks each run).
  if (ctx.device().info().backend == Backend::cpu) {
    std::vector<double> idx = in.layout.kv_block_indices.read();
    idx[0] = 9;
    BlockSparseLayout broken = in.layout;
    broken.kv_block_indices = ctx.from(in.layout.kv_block_indices.shape(), DType::i32, idx);
    expect_error([&] { (void)block_sparse_attention(ctx, in.q, in.k, in.v, broken); }, "kv_block_indices entry 0 = 9 is not a block");
  }
}

INSTANTIATE_TEST_SUITE_P(All, BlockSparseAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
