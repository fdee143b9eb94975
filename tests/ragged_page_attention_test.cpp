// ragged_page_attention against its double-precision reference on random inputs, on every
// device: mixed prefill and decode sequences (causal, bottom-right aligned), sequences with no
// query tokens or no keys, contexts ending mid-page, shuffled tables, num_seqs below the arrays'
// capacity (tokens past it untouched), dtypes, GQA/MQA, sliding window, soft cap, sinks, every
// config of a small space, and bad input naming the argument.
#include <cmath>
#include <random>
#include <set>

#include "decode_support.hpp"
#include "ragged_page_attention/ragged_page_attention.hpp"

namespace ejk {
namespace {

namespace rp = kernels::ragged_page_attention;

struct Case {
  std::string name;
  std::int64_t heads = 4, kv_heads = 2, dim = 64, block_size = 16;
  // (q_len, kv_len) per sequence: prefill chunks, decodes, a sequence with no query tokens, an
  // empty one.
  std::vector<std::pair<std::int64_t, std::int64_t>> seqs{{5, 37}, {1, 90}, {0, 20}, {17, 17}, {0, 0}, {1, 1}};
  std::int64_t num_seqs = -1, extra_tokens = 0;
  std::int64_t window = 0;
  double softcap = 0, scale = 0;
  bool sinks = false;
};

struct Built {
  Tensor q, kc, vc, lens, tables, loc, sinks, out;
  std::vector<double> initial;
  RaggedPageAttentionOptions opts;
  Invocation inv;
  std::vector<Tensor> args() const { return {q, kc, vc, lens, tables, loc, sinks, out}; }
};

Built build(Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto n = static_cast<std::int64_t>(c.seqs.size());
  std::int64_t tokens = c.extra_tokens, longest = 1;
  std::vector<double> lens, loc{0};
  for (auto [ql, kl] : c.seqs) {
    tokens += ql;
    longest = std::max(longest, kl);
    lens.push_back(static_cast<double>(kl));
    loc.push_back(loc.back() + static_cast<double>(ql));
  }
  const std::int64_t mb = (longest + c.block_size - 1) / c.block_size, nb = n * mb;
  Built b;
  const Shape qs{tokens, c.heads, c.dim}, cs{nb, c.kv_heads, c.block_size, c.dim};
  b.q = ctx.from(qs, t, test::uniform_values(rng, numel(qs), -3, 3));
  b.kc = ctx.from(cs, t, test::uniform_values(rng, numel(cs), -1, 1));
  b.vc = ctx.from(cs, t, test::uniform_values(rng, numel(cs), -1, 1));
  b.lens = ctx.from({n}, DType::i32, lens);
  b.tables = ctx.from({n, mb}, DType::i32, test::shuffled_pages(rng, n, mb, nb));
  b.loc = ctx.from({n + 1}, DType::i32, loc);
  if (c.sinks) b.opts.softmax_aux = ctx.from({c.heads}, DType::f32, test::uniform_values(rng, c.heads, -1, 3));
  b.sinks = c.sinks ? b.opts.softmax_aux : ctx.empty({0}, DType::f32);
  b.initial.assign(static_cast<std::size_t>(numel(qs)), 7.0);
  b.out = ctx.from(qs, t, b.initial);
  if (c.scale != 0) b.opts.softmax_scale = c.scale;
  b.opts.logits_soft_cap = c.softcap;
  b.opts.sliding_window = c.window;
  b.opts.num_seqs = c.num_seqs;
  std::vector<TensorSpec> specs;
  for (const auto& x : b.args()) specs.push_back(x.spec());
  b.inv = rp::invocation(specs, {c.window, c.softcap, c.scale, c.num_seqs, 0});
  return b;
}

test::Compared run(Context& ctx, const Case& c, DType t, std::optional<Config> config = {}, std::uint64_t seed = 5) {
  Built b = build(ctx, c, t, seed);
  b.opts.config = std::move(config);
  ragged_page_attention(ctx, b.q, b.kc, b.vc, b.lens, b.tables, b.loc, b.out, b.opts);
  const auto args = b.args();
  return test::compare(rp::RaggedPageAttentionKernel(), b.inv, args, rp::arg::out, b.initial);
}

class RaggedPageAttention : public ::testing::TestWithParam<std::string> {
 protected:
  Context ctx{GetParam()};
};

TEST_P(RaggedPageAttention, MatchesReferenceInEveryDtype) {
  const Case c{"mixed"};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const auto r = run(ctx, c, t);
    EXPECT_LE(r.error, r.tolerance) << to_string(t) << ": " << test::head(r.got);
  }
}

TEST_P(RaggedPageAttention, HeadLayoutsAndOptions) {
  std::vector<Case> cases;
  cases.push_back({.name = "mqa", .heads = 8, .kv_heads = 1, .dim = 40, .block_size = 8});
  cases.push_back({.name = "window", .window = 6});
  cases.push_back({.name = "window and sinks", .window = 20, .sinks = true});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  // Only the first 3 sequences, and 4 tokens beyond every sequence: those keep their contents.
  cases.push_back({.name = "num_seqs and spare tokens", .num_seqs = 3, .extra_tokens = 4});
  cases.push_back({.name = "long contexts, many splits", .heads = 2, .kv_heads = 1, .dim = 16, .block_size = 32,
                   .seqs = {{3, 1000}, {1, 777}, {40, 600}}});
  for (const auto& c : cases) {
    const auto r = run(ctx, c, DType::f32);
    EXPECT_LE(r.error, r.tolerance) << c.name << ": " << test::head(r.got);
  }
}

// The tensor-core pass (stream 2: Vulkan devices with 16x16x16 f16 cooperative matrices), every
// config of it, f16: prefill chunks and decodes in one batch (query blocks of several tokens,
// causal within them), sequences without queries or keys, windows, sinks, 16 rows a workgroup.
// The heuristic takes it there.
TEST_P(RaggedPageAttention, CooperativeMatrixPassMatchesReference) {
  std::vector<Case> cases;
  cases.push_back({"mixed"});
  cases.push_back({.name = "window and sinks", .window = 9, .sinks = true});
  cases.push_back({.name = "16 rows, head_dim 128, pages of 32", .heads = 8, .kv_heads = 1, .dim = 128, .block_size = 32,
                   .seqs = {{2, 200}, {1, 77}, {3, 3}}});
  const bool offered = test::cooperative_pass_matches(
      ctx, cases, [&](const Case& c) { return build(ctx, c, DType::f16, 3).inv; },
      [&](const Case& c, const Config& cfg) { return run(ctx, c, DType::f16, cfg); });
  if (!offered) GTEST_SKIP() << ctx.device().info().id() << " has no cooperative-matrix pass";
}

TEST_P(RaggedPageAttention, EveryConfigOfASmallSpaceAgrees) {
  const Case c{.name = "space", .heads = 2, .kv_heads = 1, .dim = 32, .block_size = 8,
               .seqs = {{9, 150}, {1, 3}, {12, 64}}, .window = 100, .sinks = true};
  Built b = build(ctx, c, DType::f16, 9);
  const auto& impl = Registry::global().implementation(b.inv, ctx.device().info());
  ParamSpace space = impl.space(b.inv, ctx.device().info());
  // Narrowed as a recipe's constraints would, so that PoCL compiles 8 programs, not 36: every
  // block_q with two tile sizes and one workgroup size.
  space.constraint("block_k <= 32");
  for (const auto& p : space.params())
    if (p.name == "threads") space.constraint("threads == 64");
  auto configs = space.enumerate();
  ASSERT_GE(configs.size(), 8u);
  EXPECT_TRUE(configs.front().has("block_q")) << configs.front().canonical();
  std::vector<double> first;
  for (const auto& cfg : configs) {
    const auto r = run(ctx, c, DType::f16, cfg, 9);
    EXPECT_LE(r.error, r.tolerance) << cfg.canonical();
    if (first.empty()) first = r.got;
    EXPECT_LE(test::relative_error(r.got, first), 2 * r.tolerance) << cfg.canonical();
  }
}

TEST_P(RaggedPageAttention, BadInputNamesTheArgument) {
  const Case c{"bad"};
  Built b = build(ctx, c, DType::f32, 1);
  auto call = [&](const Tensor& lens, const Tensor& tables, const Tensor& loc, const RaggedPageAttentionOptions& o = {}) {
    (void)ragged_page_attention(ctx, b.q, b.kc, b.vc, lens, tables, loc, o);
  };
  auto i32 = [&](const Shape& s, std::vector<double> v) { return ctx.from(s, DType::i32, v); };
  // seqs (5,37) (1,90) (0,20) (17,17) (0,0) (1,1): 24 tokens, 6 sequences.
  test::expect_error([&] { call(b.lens, b.tables, i32({7}, {0, 5, 6, 4, 23, 23, 24})); },
                     "query_start_loc [0, 5, 6, 4, 23, 23, 24] decreases at index 3");
  test::expect_error([&] { call(b.lens, b.tables, i32({7}, {1, 5, 6, 6, 23, 23, 24})); }, "must start at 0");
  test::expect_error([&] { call(b.lens, b.tables, i32({7}, {0, 5, 6, 6, 23, 23, 25})); },
                     "ends at 25 for 6 sequences, beyond the 24 query tokens of queries");
  test::expect_error([&] { call(i32({6}, {37, 90, 20, 16, 0, 1}), b.tables, b.loc); },
                     "sequence 3 has 17 query tokens (query_start_loc) but only 16 keys (kv_lens)");
  test::expect_error([&] { call(i32({6}, {37, 90, 20, 17, 0, 97}), b.tables, b.loc); },
                     "kv_lens[5] = 97 is longer than the 96 keys block_tables covers (6 blocks of 16)");
  std::vector<double> t = b.tables.read();
  t[6 * 1 + 5] = 1000;  // sequence 1, block 5: reached by its 90 keys
  test::expect_error([&] { call(b.lens, i32(b.tables.shape(), t), b.loc); },
                     "block_tables[1, 5] = 1000 is not a block of key_cache");
  test::expect_error([&] { call(b.lens, b.tables, i32({6}, {0, 5, 6, 6, 23, 23})); },
                     "query_start_loc [6] i32 must be i32 [7]");
  test::expect_error([&] { call(b.lens, b.tables, b.loc, {.sliding_window = -1}); }, "sliding_window = -1 is negative");
  test::expect_error([&] { call(b.lens, b.tables, b.loc, {.num_seqs = 7}); }, "num_seqs = 7 is outside [0, 6]");
  test::expect_error([&] { call(b.lens, b.tables, b.loc, {.max_q_len = 4}); }, "sequence 0 has 5 query tokens, more than max_q_len 4");
  const Tensor k3 = ctx.random({b.kc.dim(0), 3, 16, 64}, DType::f32, 1);
  test::expect_error([&] { (void)ragged_page_attention(ctx, b.q, k3, k3, b.lens, b.tables, b.loc); },
                     "kv_heads 3 of key_cache");
  const Tensor kd = ctx.random({b.kc.dim(0), 2, 16, 32}, DType::f32, 1);
  test::expect_error([&] { (void)ragged_page_attention(ctx, b.q, kd, kd, b.lens, b.tables, b.loc); },
                     "head_dim differs: queries [24, 4, 64] f32, key_cache");
}

INSTANTIATE_TEST_SUITE_P(Devices, RaggedPageAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(RaggedPageAttentionWorkloads, RecipeSizesGiveValidInputs) {
  const rp::RaggedPageAttentionKernel k;
  const Invocation inv = k.from_sizes(
      {{"num_seqs", 3}, {"q_len", 4}, {"context", 40}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}}, DType::f16,
      {{"sliding_window", 8}, {"sinks", true}});
  EXPECT_EQ(inv.args[rp::arg::queries].shape, (Shape{12, 4, 16}));
  const HostArrays a = k.inputs(inv, 3);
  EXPECT_EQ(a[rp::arg::query_start_loc], (std::vector<double>{0, 4, 8, 12}));
  EXPECT_EQ(a[rp::arg::kv_lens], (std::vector<double>{48, 48, 48}));
  EXPECT_EQ(k.reference(inv, a)[0].size(), 12u * 4 * 16);
  test::expect_error([&] { (void)k.from_sizes({{"num_seqs", 1}, {"q_len", 8}, {"context", 4}, {"heads", 4}, {"head_dim", 16}},
                                              DType::f16, {}); },
                     "context >= q_len");
}

}  // namespace
}  // namespace ejk
