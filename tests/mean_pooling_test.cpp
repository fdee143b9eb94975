// mean_pooling and mean_pooling_bwd against their double-precision references on random inputs
// (padded and packed, odd sizes, empty sequences, every storage dtype, every config of a small
// space), the backward pass checked against finite differences of the reference forward, and
// errors naming the argument, on every device.
#include <cmath>
#include <random>

#include "decode_support.hpp"
#include "mean_pooling/mean_pooling.hpp"
#include "support.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

namespace mp = kernels::mean_pooling;
using test::uniform_values;

struct Case {
  Tensor x, cu;  // cu undefined: padded
  MeanPoolingOptions options(const std::optional<Config>& config = {}) const {
    return {.cu_seqlens = cu, .check_cu_seqlens = true, .config = config};
  }
  TensorSpec cu_spec() const { return cu.defined() ? cu.spec() : mp::absent(); }
  HostArrays host_cu() const { return {cu.defined() ? cu.read() : std::vector<double>{}}; }
};

Case padded(const Context& ctx, Shape shape, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {ctx.from(shape, t, uniform_values(rng, numel(shape), -1, 1)), {}};
}

Case packed(const Context& ctx, const std::vector<double>& cu, std::int64_t dim, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto tokens = static_cast<std::int64_t>(cu.back());
  return {ctx.from({tokens, dim}, t, uniform_values(rng, tokens * dim, -1, 1)),
          ctx.from({static_cast<std::int64_t>(cu.size())}, DType::i32, cu)};
}

// Runs the forward and compares it with the reference; returns the output.
std::vector<double> check_forward(const Context& ctx, const Case& c, const std::string& what,
                                  const std::optional<Config>& config = {}) {
  Tensor out = mean_pooling(ctx, c.x, c.options(config));
  const Invocation inv = mp::invocation(mp::Direction::forward, c.x.spec(), c.cu_spec(), out.spec());
  const mp::MeanPoolingKernel k;
  const auto want = k.reference(inv, {c.x.read(), c.host_cu()[0], out.read()});
  const auto got = out.read();
  EXPECT_LE(test::relative_error(got, want[0]), k.tolerance(inv)) << what;
  return got;
}

std::vector<double> check_backward(const Context& ctx, const Case& c, const Tensor& dout, const std::string& what,
                                   const std::optional<Config>& config = {}) {
  Tensor dx = mean_pooling_bwd(ctx, dout, c.x.shape(), c.options(config));
  const Invocation inv = mp::invocation(mp::Direction::backward, dout.spec(), c.cu_spec(), dx.spec());
  const mp::MeanPoolingKernel k(mp::Direction::backward);
  const auto want = k.reference(inv, {dout.read(), c.host_cu()[0], dx.read()});
  const auto got = dx.read();
  EXPECT_LE(test::relative_error(got, want[0]), k.tolerance(inv)) << what;
  return got;
}

class MeanPooling : public ::testing::TestWithParam<std::string> {};

TEST_P(MeanPooling, ForwardMatchesReferenceInEveryDtype) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::string name(to_string(t));
    check_forward(ctx, padded(ctx, {3, 37, 45}, t, 1), name + " padded");
    check_forward(ctx, padded(ctx, {2, 300, 7}, t, 2), name + " padded, long");
    // Sequences of 13, 0, 27, 1 and 0 tokens: empty ones give exactly 0.
    const auto got = check_forward(ctx, packed(ctx, {0, 13, 13, 40, 41, 41}, 45, t, 3), name + " packed");
    for (std::size_t c = 0; c < 45; ++c) {
      EXPECT_EQ(got[45 + c], 0.0) << name;
      EXPECT_EQ(got[4 * 45 + c], 0.0) << name;
    }
  }
  // Padded sequences of length 0: zeros, no NaN.
  const auto zero = check_forward(ctx, padded(ctx, {2, 0, 5}, DType::f32, 4), "seq 0");
  for (double v : zero) EXPECT_EQ(v, 0.0);
  // No sequences at all.
  EXPECT_EQ(mean_pooling(ctx, ctx.empty({0, 4}, DType::f32), {.cu_seqlens = ctx.from({1}, DType::i32, std::vector<double>{0})}).shape(),
            (Shape{0, 4}));
}

TEST_P(MeanPooling, BackwardMatchesReferenceAndFiniteDifferences) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::string name(to_string(t));
    for (const Case& c : {padded(ctx, {3, 37, 45}, t, 5), packed(ctx, {0, 13, 13, 40, 41, 41}, 45, t, 6)}) {
      const std::int64_t segs = c.cu.defined() ? c.cu.dim(0) - 1 : c.x.dim(0);
      std::mt19937_64 rng(7);
      Tensor dout = ctx.from({segs, 45}, t, uniform_values(rng, segs * 45, -1, 1));
      const auto dx = check_backward(ctx, c, dout, name);
      // <dout, (f(x + h v) - f(x - h v)) / 2h> = <dx, v> for a random direction v, f the double
      // reference forward (linear, so the difference quotient is exact up to rounding).
      const Invocation inv = mp::invocation(mp::Direction::forward, c.x.spec(), c.cu_spec(), {{segs, 45}, t});
      const mp::MeanPoolingKernel k;
      const auto x = c.x.read(), g = dout.read();
      const auto v = uniform_values(rng, c.x.numel(), -1, 1);
      const double h = 1e-3;
      std::vector<double> xp(x), xm(x);
      for (std::size_t i = 0; i < x.size(); ++i) xp[i] += h * v[i], xm[i] -= h * v[i];
      const auto fp = k.reference(inv, {xp, c.host_cu()[0], std::vector<double>(g.size())})[0];
      const auto fm = k.reference(inv, {xm, c.host_cu()[0], std::vector<double>(g.size())})[0];
      double numeric = 0, analytic = 0, scale = 0;
      for (std::size_t i = 0; i < g.size(); ++i) numeric += g[i] * (fp[i] - fm[i]) / (2 * h);
      for (std::size_t i = 0; i < v.size(); ++i) analytic += dx[i] * v[i], scale += std::abs(dx[i] * v[i]);
      EXPECT_LE(std::abs(numeric - analytic), 4 * default_tolerance(t) * scale) << name;
    }
  }
  // Sequences of length 0 have no tokens to receive a gradient; the others' are finite.
  const Case c = packed(ctx, {0, 0, 3, 3}, 4, DType::f32, 8);
  Tensor dout = ctx.random({3, 4}, DType::f32, 9);
  for (double v : check_backward(ctx, c, dout, "empty sequences")) EXPECT_TRUE(std::isfinite(v));
}

TEST_P(MeanPooling, EveryConfigOfASmallSpaceAgrees) {
  Context ctx(GetParam());
  const Case cases[] = {packed(ctx, {0, 9, 9, 40}, 17, DType::f32, 10), padded(ctx, {2, 40, 17}, DType::f16, 11)};
  for (const Case& c : cases) {
    const std::string what = c.cu.defined() ? "packed f32" : "padded f16";
    const DType t = c.x.dtype();
    const std::int64_t segs = c.cu.defined() ? c.cu.dim(0) - 1 : c.x.dim(0);
    Tensor dout = ctx.random({segs, 17}, t, 12);
    for (mp::Direction dir : {mp::Direction::forward, mp::Direction::backward}) {
      const bool fwd = dir == mp::Direction::forward;
      const Invocation inv = fwd ? mp::invocation(dir, c.x.spec(), c.cu_spec(), {{segs, 17}, t})
                                 : mp::invocation(dir, {{segs, 17}, t}, c.cu_spec(), c.x.spec());
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const auto configs = impl.space(inv, ctx.device().info()).enumerate();
      ASSERT_GE(configs.size(), 4u) << what;
      std::vector<double> first;
      for (const Config& config : configs) {
        const std::string label = what + (fwd ? " forward " : " backward ") + config.canonical();
        const auto got = fwd ? check_forward(ctx, c, label, config) : check_backward(ctx, c, dout, label, config);
        if (first.empty()) first = got;
        else EXPECT_LE(test::relative_error(got, first), default_tolerance(t)) << label;
      }
    }
  }
}

TEST_P(MeanPooling, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  for (const char* kernel : {"mean_pooling", "mean_pooling_bwd"})
    for (bool pk : {false, true})
      for (auto [batch, seq, dim] : {std::tuple{1, 1, 1}, {32, 512, 1024}, {4, 8192, 4096}, {3, 7, 45}, {256, 64, 768}}) {
        const Kernel& k = Registry::global().kernel(kernel);
        const Invocation inv = k.from_sizes({{"batch", batch}, {"seq", seq}, {"dim", dim}}, DType::bf16, {{"packed", pk}});
        const auto& impl = Registry::global().implementation(inv, ctx.device().info());
        const Config h = impl.heuristic(inv, ctx.device().info());
        EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << kernel << " " << h.canonical();
      }
}

TEST_P(MeanPooling, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Case c = packed(ctx, {0, 5, 9}, 4, DType::f32, 13);
  auto cu = [&](std::vector<double> v) { return ctx.from({static_cast<std::int64_t>(v.size())}, DType::i32, v); };
  expect_error([&] { (void)mean_pooling(ctx, c.x, {.cu_seqlens = cu({0, 5, 8})}); }, "ends at 8, not at the token count 9");
  expect_error([&] { (void)mean_pooling(ctx, c.x, {.cu_seqlens = cu({0, 6, 5, 9})}); }, "decreases at index 2");
  expect_error([&] { (void)mean_pooling(ctx, c.x, {.cu_seqlens = cu({1, 5, 9})}); }, "must start at 0");
  expect_error([&] { (void)mean_pooling_bwd(ctx, ctx.random({2, 4}, DType::f32, 1), Shape{9, 4}, {.cu_seqlens = cu({0, 5, 10})}); },
               "not at the token count 9");
  expect_error([&] { (void)mean_pooling(ctx, c.x, {.cu_seqlens = ctx.from({3}, DType::f32, std::vector<double>{0, 5, 9})}); },
               "cu_seqlens [3] f32 must be i32 [num_seqs + 1]");
  expect_error([&] { mean_pooling(ctx, c.x, ctx.empty({2, 5}, DType::f32), {.cu_seqlens = c.cu}); },
               "out [2, 5] f32 must be f32 [2, 4]");
  expect_error([&] { mean_pooling(ctx, ctx.random({2, 3, 4}, DType::f16, 1), ctx.empty({2, 4}, DType::f32)); },
               "out [2, 4] f32 must be f16 [2, 4]");
  expect_error([&] { (void)mean_pooling(ctx, ctx.random({2, 3, 4, 5}, DType::f32, 1)); }, "must be [batch, seq, dim]");
  expect_error([&] { mean_pooling_bwd(ctx, ctx.random({3, 4}, DType::f32, 1), ctx.empty({2, 3, 4}, DType::f32)); },
               "dout [3, 4] f32 must be f32 [2, 4]");
  expect_error([&] { mean_pooling(ctx, ctx.from({2, 2}, DType::i32, std::vector<double>{1, 2, 3, 4}), ctx.empty({1, 2}, DType::i32), {.cu_seqlens = cu({0, 2})}); },
               "x [2, 2] i32 must be f32, f16 or bf16");
}

// The tuner checks every candidate of both kernels against the reference, on every device.
TEST_P(MeanPooling, TunerChecksEveryCandidateAgainstTheReference) {
  auto dev = open_device(GetParam());
  for (const char* name : {"mean_pooling", "mean_pooling_bwd"}) {
    const Kernel& k = Registry::global().kernel(name);
    test::expect_tune_checks_every_candidate(k.from_sizes({{"batch", 3}, {"seq", 40}, {"dim", 24}}, DType::f32, {{"packed", true}}),
                                             *dev);
  }
}

INSTANTIATE_TEST_SUITE_P(All, MeanPooling, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(MeanPoolingWorkloads, RecipeSizesAndValidInputs) {
  for (const char* kernel : {"mean_pooling", "mean_pooling_bwd"}) {
    const Kernel& k = Registry::global().kernel(kernel);
    const Invocation inv = k.from_sizes({{"batch", 5}, {"seq", 3}, {"dim", 8}}, DType::f16, {{"packed", true}});
    const HostArrays a = k.inputs(inv, 3);
    EXPECT_EQ(a[mp::arg::cu_seqlens].size(), 6u);
    EXPECT_EQ(a[mp::arg::cu_seqlens].back(), 15.0);
    EXPECT_NO_THROW((void)k.reference(inv, a));
    test::expect_error([&] { (void)k.from_sizes({{"batch", 2}, {"dim", 4}}, DType::f16, nlohmann::json::object()); },
                       "needs size 'seq'");
    test::expect_error([&] { (void)k.from_sizes({{"batch", 2}, {"seq", 2}, {"dim", 4}}, DType::f16, {{"causal", true}}); },
                       "has no option 'causal'");
  }
}

}  // namespace
}  // namespace ejk
