// attention_merge against its double-precision reference on random inputs (rows whose lse,
// part_lse or both are -inf among them, out NaN wherever lse is -inf to show it is never read),
// for every pair of out and part dtypes, padded and packed, every config of the space, the
// conversion of an f32 accumulator into a fresh 16-bit out, two halves of flash attention merged
// into the whole, and errors naming the argument, on every device.
#include <cmath>
#include <limits>
#include <random>

#include "attention_merge/attention_merge.hpp"
#include "decode_support.hpp"
#include "support.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

namespace am = kernels::attention_merge;
constexpr double ninf = -std::numeric_limits<double>::infinity();
constexpr DType dtypes[] = {DType::f32, DType::f16, DType::bf16};

Shape lse_shape(const Shape& x) { return x.size() == 3 ? Shape{x[1], x[0]} : Shape{x[0], x[2], x[1]}; }

struct Merged {
  std::vector<double> out, lse;
};

// Merges the kernel's random inputs for shape x (out NaN in every row whose lse is -inf) on the
// device and checks out and lse against the reference, and the rows the semantics fix exactly:
// untouched (part_lse -inf), zero (both -inf), part itself (lse -inf).
Merged check(const Context& ctx, const Shape& x, DType out_t, DType part_t, std::uint64_t seed, const std::string& what,
             const std::optional<Config>& config = {}) {
  const Shape ls = lse_shape(x);
  const Invocation inv = am::invocation({x, out_t}, {ls, DType::f32}, {x, part_t}, {ls, DType::f32});
  const am::AttentionMergeKernel k;
  HostArrays host = k.inputs(inv, seed);
  const am::Problem p = am::Problem::of(inv);
  const auto D = static_cast<std::size_t>(p.head_dim);
  for (std::int64_t r = 0; r < p.rows(); ++r)
    if (host[am::arg::lse][static_cast<std::size_t>(p.lse_index(r))] == ninf)
      std::fill_n(host[am::arg::out].begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * D), D, NAN);
  Tensor out = ctx.from(x, out_t, host[am::arg::out]), lse = ctx.from(ls, DType::f32, host[am::arg::lse]);
  Tensor part = ctx.from(x, part_t, host[am::arg::part]), part_lse = ctx.from(ls, DType::f32, host[am::arg::part_lse]);
  attention_merge(ctx, out, lse, part, part_lse, config);
  const auto want = k.reference(inv, host);
  Merged got{out.read(), lse.read()};
  EXPECT_LE(test::relative_error(got.out, want[0]), k.tolerance(inv)) << what;
  EXPECT_LE(test::relative_error(got.lse, want[1]), 1e-5) << what;
  int checked = 0;
  for (std::int64_t r = 0; r < p.rows(); ++r) {
    const auto li = static_cast<std::size_t>(p.lse_index(r));
    const double a = host[am::arg::lse][li], c = host[am::arg::part_lse][li];
    if (a != ninf && c != ninf) continue;
    EXPECT_EQ(got.lse[li], c == ninf ? a : c) << what << " row " << r;
    for (std::size_t i = 0; i < D; ++i) {
      const std::size_t e = static_cast<std::size_t>(r) * D + i;
      const double expected = c == ninf ? (a == ninf ? 0.0 : host[am::arg::out][e]) : round_to(out_t, host[am::arg::part][e]);
      EXPECT_EQ(got.out[e], expected) << what << " row " << r << " element " << i;
      if (got.out[e] != expected) return got;  // one report per case is enough
    }
    ++checked;
  }
  EXPECT_GT(checked, 0) << what << ": no row with a -inf log-sum-exp drawn";
  return got;
}

class AttentionMerge : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionMerge, MatchesReferenceForEveryDtypePair) {
  Context ctx(GetParam());
  for (DType o : dtypes)
    for (DType q : dtypes) {
      const std::string pair = std::string(to_string(o)) + " out, " + std::string(to_string(q)) + " part";
      check(ctx, {2, 6, 3, 64}, o, q, 1, pair);
      check(ctx, {13, 2, 20}, o, q, 2, pair + ", packed");
    }
  // Odd head_dim (scalar accesses only), one row per group and rows spanning several loop steps.
  check(ctx, {1, 9, 2, 7}, DType::f32, DType::f32, 3, "head_dim 7");
  check(ctx, {1, 3, 2, 1200}, DType::bf16, DType::f16, 4, "head_dim 1200");
  check(ctx, {2, 40, 4, 2}, DType::f16, DType::f32, 5, "head_dim 2");
  // Rows without elements still merge their log-sum-exps.
  check(ctx, {2, 9, 3, 0}, DType::f32, DType::f16, 6, "head_dim 0");
}

TEST_P(AttentionMerge, EveryConfigOfTheSpaceAgrees) {
  Context ctx(GetParam());
  for (const Shape& x : {Shape{2, 5, 3, 64}, Shape{3, 4, 2, 6}})
    for (auto [o, q] : {std::pair{DType::f32, DType::f32}, std::pair{DType::f16, DType::f32}, std::pair{DType::bf16, DType::f16}}) {
      const std::string what = to_string(x) + " " + std::string(to_string(o)) + " out";
      const Invocation inv = am::invocation({x, o}, {lse_shape(x), DType::f32}, {x, q}, {lse_shape(x), DType::f32});
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const auto configs = impl.space(inv, ctx.device().info()).enumerate();
      ASSERT_GE(configs.size(), 3u) << what;
      Merged first;
      for (const Config& c : configs) {
        const Merged got = check(ctx, x, o, q, 6, what + " " + c.canonical(), c);
        if (first.out.empty()) first = got;
        else {
          EXPECT_LE(test::relative_error(got.out, first.out), default_tolerance(o)) << what << " " << c.canonical();
          EXPECT_LE(test::relative_error(got.lse, first.lse), 1e-6) << what << " " << c.canonical();
        }
      }
    }
}

// An f32 (acc, acc_lse) merged into a fresh 16-bit out whose lse is all -inf: acc rounded, the
// same lse; rows of acc_lse -inf become 0. out starts as NaN everywhere: none of it is read.
TEST_P(AttentionMerge, ConvertsAnAccumulatorIntoAFreshOut) {
  Context ctx(GetParam());
  const Shape x{2, 7, 3, 32}, ls{2, 3, 7};
  std::mt19937_64 rng(7);
  const auto acc_v = test::uniform_values(rng, numel(x), -3, 3);
  auto acc_lse_v = test::uniform_values(rng, numel(ls), -5, 5);
  for (std::size_t i = 0; i < acc_lse_v.size(); i += 5) acc_lse_v[i] = ninf;
  for (auto& v : acc_lse_v) v = round_to(DType::f32, v);
  Tensor acc = ctx.from(x, DType::f32, acc_v), acc_lse = ctx.from(ls, DType::f32, acc_lse_v);
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor out = ctx.from(x, t, std::vector<double>(static_cast<std::size_t>(numel(x)), NAN));
    Tensor lse = ctx.from(ls, DType::f32, std::vector<double>(static_cast<std::size_t>(numel(ls)), ninf));
    attention_merge(ctx, out, lse, acc, acc_lse);
    EXPECT_EQ(lse.read(), acc_lse_v) << to_string(t);
    const auto got = out.read();
    const am::Problem p = am::Problem::of(am::invocation(out.spec(), lse.spec(), acc.spec(), acc_lse.spec()));
    for (std::int64_t r = 0; r < p.rows(); ++r) {
      const bool empty = acc_lse_v[static_cast<std::size_t>(p.lse_index(r))] == ninf;
      for (std::int64_t i = 0; i < 32; ++i) {
        const auto e = static_cast<std::size_t>(r * 32 + i);
        ASSERT_EQ(got[e], empty ? 0.0 : round_to(t, acc_v[e])) << to_string(t) << " row " << r << " element " << i;
      }
    }
  }
}

// Attention over all keys equals the merge of attention over each half of them (flash_attention's
// out and lse as they come), accumulated in f32 and converted into f16 at the end.
TEST_P(AttentionMerge, MergedHalvesOfFlashAttentionAreTheWhole) {
  Context ctx(GetParam());
  const std::int64_t B = 2, S = 6, H = 2, D = 16, K = 10;
  std::mt19937_64 rng(8);
  const auto qv = test::uniform_values(rng, B * S * H * D, -1, 1), kv = test::uniform_values(rng, B * K * H * D, -1, 1),
             vv = test::uniform_values(rng, B * K * H * D, -1, 1);
  // Keys [from, to) of every batch.
  auto keys = [&](const std::vector<double>& all, std::int64_t from, std::int64_t to) {
    std::vector<double> v;
    for (std::int64_t b = 0; b < B; ++b)
      v.insert(v.end(), all.begin() + (b * K + from) * H * D, all.begin() + (b * K + to) * H * D);
    return ctx.from({B, to - from, H, D}, DType::f32, v);
  };
  const Tensor q = ctx.from({B, S, H, D}, DType::f32, qv);
  const auto whole = flash_attention(ctx, q, keys(kv, 0, K), keys(vv, 0, K));
  const auto first = flash_attention(ctx, q, keys(kv, 0, 4), keys(vv, 0, 4));
  const auto second = flash_attention(ctx, q, keys(kv, 4, K), keys(vv, 4, K));
  attention_merge(ctx, first.out, first.lse, second.out, second.lse);
  EXPECT_LE(test::relative_error(first.out.read(), whole.out.read()), 1e-5);
  EXPECT_LE(test::relative_error(first.lse.read(), whole.lse.read()), 1e-5);
  Tensor out16 = ctx.empty({B, S, H, D}, DType::f16);
  Tensor lse16 = ctx.from({B, H, S}, DType::f32, std::vector<double>(static_cast<std::size_t>(B * H * S), ninf));
  attention_merge(ctx, out16, lse16, first.out, first.lse);
  EXPECT_LE(test::relative_error(out16.read(), whole.out.read()), default_tolerance(DType::f16));
}

TEST_P(AttentionMerge, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  const Kernel& k = Registry::global().kernel("attention_merge");
  for (auto [b, s, h, d] : {std::tuple{1, 1, 1, 1}, {4, 4096, 32, 128}, {1, 3, 5, 7}, {2, 100, 8, 576}, {64, 1, 32, 64},
                            {1, 10, 2, 1200}, {3, 5, 2, 2}})
    for (bool packed : {false, true}) {
      const Invocation inv = k.from_sizes({{"batch", b}, {"seq", s}, {"heads", h}, {"head_dim", d}}, DType::bf16,
                                          {{"packed", packed}, {"part_dtype", "f32"}});
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const Config c = impl.heuristic(inv, ctx.device().info());
      EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(c), "") << inv.signature() << " " << c.canonical();
    }
}

TEST_P(AttentionMerge, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Tensor x = ctx.empty({2, 3, 4, 8}, DType::f32), l = ctx.empty({2, 4, 3}, DType::f32);
  expect_error([&] { attention_merge(ctx, x, l, ctx.empty({2, 3, 4, 6}, DType::f16), l); },
               "part [2, 3, 4, 6] f16 must have out's shape [2, 3, 4, 8]");
  expect_error([&] { attention_merge(ctx, x, ctx.empty({2, 3, 4}, DType::f32), x, l); },
               "lse [2, 3, 4] f32 must be f32 [2, 4, 3] ([batch, heads, seq] for out [2, 3, 4, 8] f32)");
  expect_error([&] { attention_merge(ctx, x, l, x, ctx.empty({2, 4, 3}, DType::f16)); }, "part_lse [2, 4, 3] f16 must be f32 [2, 4, 3]");
  expect_error([&] { attention_merge(ctx, ctx.empty({3, 4, 8}, DType::f32), l, ctx.empty({3, 4, 8}, DType::f32), l); },
               "lse [2, 4, 3] f32 must be f32 [4, 3] ([heads, total] for out [3, 4, 8] f32)");
  expect_error([&] { attention_merge(ctx, ctx.empty({24, 8}, DType::f32), l, ctx.empty({24, 8}, DType::f32), l); },
               "out [24, 8] f32 must be [batch, seq, heads, head_dim] (or packed [total, heads, head_dim])");
  expect_error([&] { attention_merge(ctx, ctx.empty({2, 3, 4, 8}, DType::i32), l, x, l); }, "out [2, 3, 4, 8] i32 must be f32, f16 or bf16");
  expect_error([&] { attention_merge(ctx, x, l, ctx.empty({2, 3, 4, 8}, DType::i32), l); }, "part [2, 3, 4, 8] i32 must be f32, f16 or bf16");
  expect_error([&] { attention_merge(ctx, x, l, x, l, Config{{"threads", 64}, {"vec", 3}}); }, "vec");
}

// The tuner checks every candidate against the reference (-inf rows included), on every device.
TEST_P(AttentionMerge, TunerChecksEveryCandidateAgainstTheReference) {
  auto dev = open_device(GetParam());
  const Kernel& k = Registry::global().kernel("attention_merge");
  test::expect_tune_checks_every_candidate(
      k.from_sizes({{"batch", 2}, {"seq", 9}, {"heads", 3}, {"head_dim", 32}}, DType::f16, {{"part_dtype", "f32"}}), *dev);
}

INSTANTIATE_TEST_SUITE_P(All, AttentionMerge, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(AttentionMergeWorkloads, RecipeSizesAndValidInputs) {
  const Kernel& k = Registry::global().kernel("attention_merge");
  const Invocation inv = k.from_sizes({{"seq", 5}, {"heads", 3}, {"head_dim", 8}}, DType::f16, {{"part_dtype", "f32"}});
  EXPECT_EQ(inv.args[am::arg::out].shape, (Shape{1, 5, 3, 8}));
  EXPECT_EQ(inv.args[am::arg::part].dtype, DType::f32);
  EXPECT_EQ(inv.args[am::arg::lse].shape, (Shape{1, 3, 5}));
  const Invocation packed = k.from_sizes({{"batch", 2}, {"seq", 5}, {"heads", 3}, {"head_dim", 8}}, DType::bf16, {{"packed", true}});
  EXPECT_EQ(packed.args[am::arg::out].shape, (Shape{10, 3, 8}));
  EXPECT_EQ(packed.args[am::arg::part_lse].shape, (Shape{3, 10}));
  const HostArrays a = k.inputs(inv, 3);
  EXPECT_NO_THROW((void)k.reference(inv, a));
  EXPECT_EQ(k.bytes(inv), 15 * 8 * (2 + 2 + 4) + 15 * 12.0);
  test::expect_error([&] { (void)k.from_sizes({{"seq", 2}, {"head_dim", 4}}, DType::f16, nlohmann::json::object()); },
                     "needs size 'heads'");
  test::expect_error([&] { (void)k.from_sizes({{"seq", 2}, {"heads", 2}, {"head_dim", 4}}, DType::f16, {{"causal", true}}); },
                     "has no option 'causal'");
}

}  // namespace
}  // namespace ejk
