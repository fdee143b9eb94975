// ragged_decode_attention against its double-precision reference on random inputs, on every
// device: dtypes, GQA/MQA, empty and one-key ranges, ranges starting mid-row, sliding window,
// soft cap, sinks, every config of a small space, and bad input naming the argument.
#include <cmath>
#include <random>
#include <set>

#include "decode_support.hpp"
#include "ragged_decode_attention/ragged_decode_attention.hpp"

namespace ejk {
namespace {

namespace rd = kernels::ragged_decode_attention;

struct Case {
  std::string name;
  std::int64_t heads = 4, kv_heads = 2, dim = 64, seq = 50;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges{{0, 50}, {10, 37}, {20, 20}, {0, 1}};
  std::int64_t window = 0;
  double softcap = 0, scale = 0;
  bool sinks = false;
  DType sinks_dtype = DType::f32;
};

struct Built {
  Tensor q, k, v, start, end, sinks, out;
  std::vector<double> initial;
  RaggedDecodeAttentionOptions opts;
  Invocation inv;
  std::vector<Tensor> args() const { return {q, k, v, start, end, sinks, out}; }
};

Built build(Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto batch = static_cast<std::int64_t>(c.ranges.size());
  Built b;
  const Shape qs{batch, c.heads, c.dim}, ks{batch, c.seq, c.kv_heads, c.dim};
  b.q = ctx.from(qs, t, test::uniform_values(rng, numel(qs), -3, 3));
  b.k = ctx.from(ks, t, test::uniform_values(rng, numel(ks), -1, 1));
  b.v = ctx.from(ks, t, test::uniform_values(rng, numel(ks), -1, 1));
  std::vector<double> s, e;
  for (auto [x, y] : c.ranges) s.push_back(static_cast<double>(x)), e.push_back(static_cast<double>(y));
  b.start = ctx.from({batch}, DType::i32, s);
  b.end = ctx.from({batch}, DType::i32, e);
  if (c.sinks) b.opts.softmax_aux = ctx.from({c.heads}, c.sinks_dtype, test::uniform_values(rng, c.heads, -1, 3));
  b.sinks = c.sinks ? b.opts.softmax_aux : ctx.empty({0}, DType::f32);
  b.initial.assign(static_cast<std::size_t>(numel(qs)), 7.0);
  b.out = ctx.from(qs, t, b.initial);
  if (c.scale != 0) b.opts.softmax_scale = c.scale;
  b.opts.logits_soft_cap = c.softcap;
  b.opts.sliding_window = c.window;
  std::vector<TensorSpec> specs;
  for (const auto& x : b.args()) specs.push_back(x.spec());
  b.inv = rd::invocation(specs, {c.window, c.softcap, c.scale});
  return b;
}

test::Compared run(Context& ctx, const Case& c, DType t, std::optional<Config> config = {}, std::uint64_t seed = 5) {
  Built b = build(ctx, c, t, seed);
  b.opts.config = std::move(config);
  ragged_decode_attention(ctx, b.q, b.k, b.v, b.start, b.end, b.out, b.opts);
  const auto args = b.args();
  return test::compare(rd::RaggedDecodeAttentionKernel(), b.inv, args, rd::arg::out, b.initial);
}

class RaggedDecodeAttention : public ::testing::TestWithParam<std::string> {
 protected:
  Context ctx{GetParam()};
};

TEST_P(RaggedDecodeAttention, MatchesReferenceInEveryDtype) {
  const Case c{.name = "gqa", .sinks = true};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const auto r = run(ctx, c, t);
    EXPECT_LE(r.error, r.tolerance) << to_string(t) << ": " << test::head(r.got);
    // The empty range (sequence 2) gives exactly 0, sink or not.
    for (std::int64_t i = 0; i < c.heads * c.dim; ++i)
      ASSERT_EQ(r.got[static_cast<std::size_t>(2 * c.heads * c.dim + i)], 0.0) << to_string(t);
  }
}

TEST_P(RaggedDecodeAttention, HeadLayoutsAndOptions) {
  std::vector<Case> cases;
  cases.push_back({.name = "mqa", .heads = 8, .kv_heads = 1, .dim = 40});
  cases.push_back({.name = "window", .window = 8});
  cases.push_back({.name = "window longer than ranges", .window = 30, .sinks = true});
  cases.push_back({.name = "window of 1", .heads = 2, .kv_heads = 2, .dim = 32, .window = 1});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  cases.push_back({.name = "odd head_dim", .heads = 2, .kv_heads = 1, .dim = 30});
  cases.push_back({.name = "bf16 sinks", .sinks = true, .sinks_dtype = DType::bf16});
  cases.push_back({.name = "long ranges, many splits", .heads = 2, .kv_heads = 1, .dim = 16, .seq = 1200,
                   .ranges = {{0, 1200}, {333, 1100}}});
  for (const auto& c : cases) {
    const auto r = run(ctx, c, DType::f32);
    EXPECT_LE(r.error, r.tolerance) << c.name << ": " << test::head(r.got);
  }
}

// The tensor-core pass (stream 2: Vulkan devices with 16x16x16 f16 cooperative matrices), every
// config of it, f16: ranges starting and ending mid-tile, the last tile of a sequence moved back
// (50 keys a row), empty and one-key ranges, windows, sinks, soft cap, 16 rows a workgroup. The
// heuristic takes it there.
TEST_P(RaggedDecodeAttention, CooperativeMatrixPassMatchesReference) {
  std::vector<Case> cases;
  cases.push_back({.name = "gqa", .sinks = true});
  cases.push_back({.name = "window", .window = 8});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  cases.push_back({.name = "16 rows, head_dim 128", .heads = 16, .kv_heads = 1, .dim = 128, .seq = 300,
                   .ranges = {{3, 300}, {100, 117}, {17, 18}}});
  cases.push_back({.name = "head_dim 32, 16 keys", .heads = 2, .kv_heads = 2, .dim = 32, .seq = 16,
                   .ranges = {{0, 16}, {5, 9}}, .window = 3});
  const bool offered = test::cooperative_pass_matches(
      ctx, cases, [&](const Case& c) { return build(ctx, c, DType::f16, 3).inv; },
      [&](const Case& c, const Config& cfg) { return run(ctx, c, DType::f16, cfg); });
  if (!offered) GTEST_SKIP() << ctx.device().info().id() << " has no cooperative-matrix pass";
}

TEST_P(RaggedDecodeAttention, EveryConfigOfASmallSpaceAgrees) {
  const Case c{.name = "space", .heads = 4, .kv_heads = 2, .dim = 32, .seq = 150,
               .ranges = {{0, 150}, {5, 6}, {40, 140}}, .window = 70, .sinks = true};
  Built b = build(ctx, c, DType::bf16, 9);
  const auto& impl = Registry::global().implementation(b.inv, ctx.device().info());
  const auto configs = impl.space(b.inv, ctx.device().info()).enumerate();
  ASSERT_GE(configs.size(), 8u);
  std::vector<double> first;
  for (const auto& cfg : configs) {
    const auto r = run(ctx, c, DType::bf16, cfg, 9);
    EXPECT_LE(r.error, r.tolerance) << cfg.canonical();
    if (first.empty()) first = r.got;
    EXPECT_LE(test::relative_error(r.got, first), 2 * r.tolerance) << cfg.canonical();
  }
}

TEST_P(RaggedDecodeAttention, BadInputNamesTheArgument) {
  const Case c{"bad"};
  Built b = build(ctx, c, DType::f32, 1);
  auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& s, const Tensor& e,
                  const RaggedDecodeAttentionOptions& o = {}) { (void)ragged_decode_attention(ctx, q, k, v, s, e, o); };
  auto i32 = [&](std::vector<double> v) { return ctx.from({static_cast<std::int64_t>(v.size())}, DType::i32, v); };
  test::expect_error([&] { call(b.q, b.k, b.v, i32({0, 10, 30, 0}), b.end); },
                     "sequence_start[2] = 30 is outside [0, sequence_end[2] = 20]");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, i32({51, 37, 20, 1})); },
                     "sequence_end[0] = 51 is longer than the 50 keys key holds per sequence");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, i32({50, 37, -3, 1})); }, "sequence_end[2] = -3 is negative");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, i32({50, 37, 20})); }, "sequence_end [3] i32 must be i32 [4]");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, b.end, {.sliding_window = -2}); },
                     "sliding_window = -2 is negative");
  const Tensor k3 = ctx.random({4, 50, 3, 64}, DType::f32, 1);
  test::expect_error([&] { call(b.q, k3, k3, b.start, b.end); }, "kv_heads 3 of key [4, 50, 3, 64] f32 does not divide heads 4");
  const Tensor kd = ctx.random({4, 50, 2, 32}, DType::f32, 1);
  test::expect_error([&] { call(b.q, kd, kd, b.start, b.end); }, "head_dim differs: query [4, 4, 64] f32, key [4, 50, 2, 32] f32");
  const Tensor kb = ctx.random({3, 50, 2, 64}, DType::f32, 1);
  test::expect_error([&] { call(b.q, kb, kb, b.start, b.end); }, "batch differs: query [4, 4, 64] f32, key [3, 50, 2, 64]");
  test::expect_error([&] { call(b.q, b.k, kd, b.start, b.end); }, "value [4, 50, 2, 32] f32 must have the shape of key");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, b.end, {.softmax_aux = ctx.random({3}, DType::f32, 1)}); },
                     "softmax_aux [3] f32 must be a float [4]");
  test::expect_error([&] { call(b.q, b.k, b.v, b.start, b.end, {.logits_soft_cap = -1}); }, "logits_soft_cap");
}

INSTANTIATE_TEST_SUITE_P(Devices, RaggedDecodeAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(RaggedDecodeAttentionWorkloads, RecipeSizesGiveValidInputs) {
  const rd::RaggedDecodeAttentionKernel k;
  const Invocation inv = k.from_sizes({{"batch", 2}, {"heads", 4}, {"kv_heads", 1}, {"head_dim", 16}, {"seq", 40}},
                                      DType::bf16, {{"sliding_window", 16}, {"sinks", true}});
  EXPECT_EQ(inv.args[rd::arg::softmax_aux].shape, (Shape{4}));
  const HostArrays a = k.inputs(inv, 3);
  EXPECT_EQ(a[rd::arg::sequence_end], (std::vector<double>{40, 40}));
  EXPECT_EQ(k.reference(inv, a)[0].size(), 2u * 4 * 16);
  // The window caps the keys counted: 16 per sequence.
  EXPECT_DOUBLE_EQ(k.bytes(inv), 2.0 * (2 * 2 * 16 * 1 * 16 + 2 * 2 * 4 * 16) + 8.0 * 2);
  test::expect_error([&] { (void)k.from_sizes({{"batch", 1}, {"heads", 4}, {"head_dim", 16}}, DType::f16, {}); },
                     "needs size 'seq'");
}

}  // namespace
}  // namespace ejk
