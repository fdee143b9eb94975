// add (out = a + alpha * b) against its double-precision reference on random inputs, for every
// triple of a, b and out dtypes, in place (out is a, out is b), with alpha 0 never reading b (b
// all NaN), empty and odd sizes (the tail of a partial vector), every config of the space, 64M
// elements (indices far from 0), and errors naming the argument, on every device.
#include <cmath>
#include <random>

#include "add/add.hpp"
#include "decode_support.hpp"
#include "support.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

namespace ak = kernels::add;
constexpr DType dtypes[] = {DType::f32, DType::f16, DType::bf16};

std::string label(DType a, DType b, DType out, double alpha) {
  return std::string(to_string(a)) + " + " + std::to_string(alpha) + " * " + std::string(to_string(b)) + " -> " +
         std::string(to_string(out));
}

// Random a and b (values as their dtypes store them), out NaN (it is never read); runs add on
// the device and checks out against the reference. Returns out as read back.
std::vector<double> check(const Context& ctx, const Shape& x, DType a_t, DType b_t, DType out_t, double alpha,
                          std::uint64_t seed, const std::optional<Config>& config = {}) {
  const Invocation inv = ak::invocation({x, a_t}, {x, b_t}, {x, out_t}, alpha);
  const ak::AddKernel k;
  HostArrays host = k.inputs(inv, seed);
  const Tensor a = ctx.from(x, a_t, host[ak::arg::a]), b = ctx.from(x, b_t, host[ak::arg::b]);
  const Tensor out = ctx.from(x, out_t, std::vector<double>(static_cast<std::size_t>(numel(x)), NAN));
  add(ctx, a, b, out, alpha, config);
  const std::vector<double> got = out.read();
  EXPECT_LE(test::relative_error(got, k.reference(inv, host)[0]), k.tolerance(inv))
      << label(a_t, b_t, out_t, alpha) << " " << to_string(x) << (config ? " " + config->canonical() : "");
  return got;
}

class Add : public ::testing::TestWithParam<std::string> {};

TEST_P(Add, MatchesReferenceForEveryDtypeTriple) {
  Context ctx(GetParam());
  for (DType a : dtypes)
    for (DType b : dtypes)
      for (DType o : dtypes) check(ctx, {3, 5, 7}, a, b, o, -0.5, 1);
  for (double alpha : {1.0, 3.25, -1e-3}) check(ctx, {2, 64}, DType::f32, DType::bf16, DType::f32, alpha, 2);
}

// Rank 1 and 4, one element, a size that is no multiple of any vector width (1000003), and none.
TEST_P(Add, EmptyOneAndOddSizes) {
  Context ctx(GetParam());
  check(ctx, {1}, DType::f32, DType::f32, DType::f32, 1.0, 3);
  check(ctx, {1000003}, DType::f32, DType::f16, DType::bf16, -0.5, 4);
  check(ctx, {1000003}, DType::bf16, DType::bf16, DType::f32, 1.0, 5);
  check(ctx, {2, 3, 5, 7}, DType::f16, DType::f32, DType::f16, 2.0, 6);
  for (const Shape& empty : {Shape{0}, Shape{4, 0, 3}}) {
    const Tensor a = ctx.empty(empty, DType::f32), b = ctx.empty(empty, DType::bf16), out = ctx.empty(empty, DType::f16);
    EXPECT_NO_THROW(add(ctx, a, b, out));
    EXPECT_TRUE(out.read().empty());
  }
}

// alpha 0 (either sign) never reads b: b all NaN leaves out exactly a rounded to out's dtype,
// and add(a, a, out, 0) converts.
TEST_P(Add, AlphaZeroNeverReadsB) {
  Context ctx(GetParam());
  const Shape x{1001};
  std::mt19937_64 rng(7);
  const auto values = test::uniform_values(rng, numel(x), -3, 3);
  const std::vector<double> nan(values.size(), NAN);
  for (DType a_t : dtypes)
    for (DType b_t : dtypes)
      for (DType o : dtypes) {
        const Tensor a = ctx.from(x, a_t, values), b = ctx.from(x, b_t, nan), out = ctx.from(x, o, nan);
        add(ctx, a, b, out, a_t == b_t ? -0.0 : 0.0);
        const auto got = out.read();
        const auto in = a.read();
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], round_to(o, in[i])) << label(a_t, b_t, o, 0) << " element " << i;
      }
  for (DType o : dtypes) {
    const Tensor a = ctx.from(x, DType::f32, values), out = ctx.empty(x, o);
    add(ctx, a, a, out, 0.0);
    const auto got = out.read();
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], round_to(o, round_to(DType::f32, values[i]))) << "conversion to " << to_string(o) << " element " << i;
  }
}

// out the same tensor as a (acc += alpha * x) or as b, repeated: the sum of the parts.
TEST_P(Add, InPlaceIntoAOrB) {
  Context ctx(GetParam());
  const Shape x{5, 403};
  const ak::AddKernel k;
  for (DType acc_t : dtypes)
    for (DType part_t : {DType::f32, DType::bf16}) {
      const std::string what = std::string(to_string(acc_t)) + " accumulator, " + std::string(to_string(part_t)) + " parts";
      const Invocation inv = ak::invocation({x, acc_t}, {x, part_t}, {x, acc_t}, -0.5);
      HostArrays host = k.inputs(inv, 9);
      const Tensor acc = ctx.from(x, acc_t, host[ak::arg::a]), part = ctx.from(x, part_t, host[ak::arg::b]);
      add(ctx, acc, part, acc, -0.5);
      const auto once = k.reference(inv, host)[0];
      EXPECT_LE(test::relative_error(acc.read(), once), k.tolerance(inv)) << what << ", out is a";
      // Again into b: part = acc + 2 * part.
      const Invocation into_b = ak::invocation({x, acc_t}, {x, part_t}, {x, part_t}, 2.0);
      add(ctx, acc, part, part, 2.0);
      const auto twice = k.reference(into_b, {acc.read(), host[ak::arg::b], {}})[0];
      EXPECT_LE(test::relative_error(part.read(), twice), k.tolerance(into_b)) << what << ", out is b";
    }
}

TEST_P(Add, EveryConfigOfTheSpaceAgrees) {
  Context ctx(GetParam());
  for (const Shape& x : {Shape{1000003}, Shape{37}})
    for (auto [a, b, o] : {std::tuple{DType::f32, DType::f32, DType::f32}, {DType::bf16, DType::f16, DType::f16}}) {
      const Invocation inv = ak::invocation({x, a}, {x, b}, {x, o}, -0.5);
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const auto configs = impl.space(inv, ctx.device().info()).enumerate();
      ASSERT_GE(configs.size(), 1u);
      std::vector<double> first;
      for (const Config& c : configs) {
        const auto got = check(ctx, x, a, b, o, -0.5, 10, c);
        if (first.empty()) first = got;
        else EXPECT_LE(test::relative_error(got, first), default_tolerance(o)) << to_string(x) << " " << c.canonical();
      }
    }
}

// 64M elements, in place, made on the device: the first, the last and a middle stretch of
// elements against the reference. bf16, so that each array fits lavapipe's largest storage
// buffer (128 MiB). alpha 0.25 scales exactly, so the f32 sum and its rounding are the same
// everywhere: the check is exact.
TEST_P(Add, SixtyFourMillionElements) {
  Context ctx(GetParam());
  const std::int64_t n = std::int64_t{64} << 20;
  const Tensor acc = ctx.empty({n}, DType::bf16), part = ctx.empty({n}, DType::bf16);
  fill_uniform(acc, 1);
  fill_uniform(part, 2);
  const std::int64_t stretch = 4099;
  std::vector<std::pair<std::int64_t, std::vector<double>>> want;
  for (std::int64_t first : {std::int64_t{0}, n / 2 + 13, n - stretch}) {
    const auto a = acc.read(first, stretch), b = part.read(first, stretch);
    std::vector<double> w(a.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      w[i] = round_to(DType::bf16, static_cast<float>(a[i]) + 0.25f * static_cast<float>(b[i]));
    want.emplace_back(first, std::move(w));
  }
  add(ctx, acc, part, acc, 0.25);
  for (const auto& [first, w] : want) EXPECT_EQ(acc.read(first, stretch), w) << "from " << first;
}

TEST_P(Add, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  const Kernel& k = Registry::global().kernel("add");
  for (std::int64_t n : {0, 1, 7, 1000, 1000003, 64 << 20})
    for (DType t : dtypes) {
      const Invocation inv = k.from_sizes({{"n", n}}, t, {{"b_dtype", "f32"}});
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const Config c = impl.heuristic(inv, ctx.device().info());
      EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(c), "") << inv.signature() << " " << c.canonical();
    }
}

TEST_P(Add, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Tensor x = ctx.empty({2, 3, 4}, DType::f32);
  expect_error([&] { add(ctx, x, ctx.empty({2, 3, 5}, DType::f16), x); }, "add: b [2, 3, 5] f16 must have a's shape [2, 3, 4]");
  expect_error([&] { add(ctx, x, x, ctx.empty({24}, DType::bf16)); }, "add: out [24] bf16 must have a's shape [2, 3, 4]");
  expect_error([&] { add(ctx, ctx.empty({2, 3, 4}, DType::i32), x, x); }, "add: a [2, 3, 4] i32 must be f32, f16 or bf16");
  expect_error([&] { add(ctx, x, ctx.empty({2, 3, 4}, DType::i32), x); }, "add: b [2, 3, 4] i32 must be f32, f16 or bf16");
  expect_error([&] { add(ctx, x, x, ctx.empty({2, 3, 4}, DType::i32)); }, "add: out [2, 3, 4] i32 must be f32, f16 or bf16");
  expect_error([&] { add(ctx, x, x, x, NAN); }, "add: alpha nan must be finite in f32 (for a [2, 3, 4] f32)");
  expect_error([&] { add(ctx, x, x, x, -INFINITY); }, "add: alpha -inf must be finite");
  expect_error([&] { add(ctx, x, x, x, 1e300); }, "add: alpha 1e+300 must be finite in f32");
  const bool cpu = ctx.device().info().backend == Backend::cpu;
  expect_error([&] { add(ctx, x, x, x, 1.0, cpu ? Config{{"block", 3000}} : Config{{"threads", 64}, {"vec", 3}}); },
               cpu ? "block" : "vec");
}

// The tuner checks every candidate against the reference, on every device.
TEST_P(Add, TunerChecksEveryCandidateAgainstTheReference) {
  auto dev = open_device(GetParam());
  test::expect_tune_checks_every_candidate(
      Registry::global().kernel("add").from_sizes({{"n", 10007}}, DType::bf16, {{"a_dtype", "f32"}, {"b_dtype", "f16"}}), *dev);
}

INSTANTIATE_TEST_SUITE_P(All, Add, ::testing::ValuesIn(test::devices()), [](const auto& p) { return test::test_name(p.param); });

TEST(AddWorkloads, RecipeSizesScalarsAndCost) {
  const Kernel& k = Registry::global().kernel("add");
  const Invocation inv = k.from_sizes({{"n", 10}}, DType::bf16, {{"a_dtype", "f32"}, {"b_dtype", "f16"}});
  EXPECT_EQ(inv.args[ak::arg::a], (TensorSpec{{10}, DType::f32}));
  EXPECT_EQ(inv.args[ak::arg::b], (TensorSpec{{10}, DType::f16}));
  EXPECT_EQ(inv.args[ak::arg::out], (TensorSpec{{10}, DType::bf16}));
  EXPECT_EQ(k.bytes(inv), 10 * (4 + 2 + 2.0));
  EXPECT_EQ(k.flops(inv), 20.0);
  Invocation copy = inv;
  copy.scalars["alpha"] = 0.0;
  EXPECT_EQ(k.bytes(copy), 10 * (4 + 2.0));
  EXPECT_EQ(k.flops(copy), 0.0);
  copy.scalars["beta"] = 1.0;
  test::expect_error([&] { k.validate(copy); }, "add has no scalar 'beta' (scalars: alpha)");
  copy.scalars = {{"alpha", "two"}};
  test::expect_error([&] { k.validate(copy); }, "add: scalar 'alpha' must be a number, got \"two\"");
  test::expect_error([&] { (void)k.from_sizes({{"n", 4}}, DType::f16, {{"c_dtype", "f32"}}); }, "has no option 'c_dtype'");
  test::expect_error([&] { (void)k.from_sizes({}, DType::f16, nlohmann::json::object()); }, "needs size 'n'");
  test::expect_error([&] { (void)k.from_sizes({{"n", std::int64_t{1} << 31}}, DType::f16, nlohmann::json::object()); },
                     "outside 0 to 2^31-1");
  // 2^31 - 1 elements or more are refused: device kernels index with 32-bit integers.
  test::expect_error([&] { k.validate(ak::invocation({{1 << 16, 1 << 15}, DType::bf16}, {{1 << 16, 1 << 15}, DType::bf16},
                                                     {{1 << 16, 1 << 15}, DType::bf16}, 1.0)); },
                     "add: a [65536, 32768] bf16 holds 2^31 - 1 elements or more");
}

}  // namespace
}  // namespace ejk
