// grouped_matmul and grouped_matmul_tgmm against their double-precision references on random
// inputs (empty groups, groups that are not a multiple of any tile, odd k and n, trans_rhs, every
// storage dtype, every config of a small space), the gradients of grouped_matmul (d lhs through
// grouped_matmul with the transposed rhs, d rhs through tgmm) checked against finite differences
// of the reference forward, and errors naming the argument, on every device.
#include <cmath>
#include <random>

#include "decode_support.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "support.hpp"
#include "tune_support.hpp"

namespace ejk {
namespace {

namespace gm = kernels::grouped_matmul;
using test::uniform_values;

struct Case {
  Tensor lhs, rhs, sizes;
  bool trans = false;
};

// m = sum of sizes; groups of 0 and of sizes that are not multiples of 16.
Case make(const Context& ctx, const std::vector<double>& sizes, std::int64_t k, std::int64_t n, bool trans, DType t,
          std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::int64_t m = 0;
  for (double s : sizes) m += static_cast<std::int64_t>(s);
  const auto g = static_cast<std::int64_t>(sizes.size());
  return {ctx.from({m, k}, t, uniform_values(rng, m * k, -1, 1)),
          ctx.from(trans ? Shape{g, n, k} : Shape{g, k, n}, t, uniform_values(rng, g * k * n, -1, 1)),
          ctx.from({g}, DType::i32, sizes), trans};
}

std::vector<double> check_gmm(const Context& ctx, const Case& c, const std::string& what,
                              const std::optional<Config>& config = {}) {
  Tensor out = grouped_matmul(ctx, c.lhs, c.rhs, c.sizes, {.trans_rhs = c.trans, .check_group_sizes = true, .config = config});
  const Invocation inv = gm::invocation(gm::Mode::gmm, c.lhs.spec(), c.rhs.spec(), c.sizes.spec(), out.spec(), c.trans);
  const gm::GroupedMatmulKernel k;
  const auto got = out.read();
  const auto want = k.reference(inv, {c.lhs.read(), c.rhs.read(), c.sizes.read(), got})[0];
  EXPECT_LE(test::relative_error(got, want), k.tolerance(inv)) << what;
  return got;
}

std::vector<double> check_tgmm(const Context& ctx, const Tensor& lhs, const Tensor& grad, const Tensor& sizes,
                               const std::string& what, const std::optional<Config>& config = {}) {
  Tensor out = grouped_matmul_tgmm(ctx, lhs, grad, sizes, {.trans_rhs = false, .check_group_sizes = true, .config = config});
  const Invocation inv = gm::invocation(gm::Mode::tgmm, lhs.spec(), grad.spec(), sizes.spec(), out.spec());
  const gm::GroupedMatmulKernel k(gm::Mode::tgmm);
  const auto got = out.read();
  const auto want = k.reference(inv, {lhs.read(), grad.read(), sizes.read(), got})[0];
  EXPECT_LE(test::relative_error(got, want), k.tolerance(inv)) << what;
  return got;
}

const std::vector<double> uneven{13, 0, 40, 1, 0, 23};  // m = 77

class GroupedMatmul : public ::testing::TestWithParam<std::string> {};

TEST_P(GroupedMatmul, ForwardMatchesReferenceInEveryDtype) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (bool trans : {false, true}) {
      const std::string what = std::string(to_string(t)) + (trans ? " trans_rhs" : "");
      check_gmm(ctx, make(ctx, uneven, 37, 45, trans, t, 1), what);
    }
  check_gmm(ctx, make(ctx, {64, 64}, 64, 64, false, DType::f32, 2), "whole tiles");
  check_gmm(ctx, make(ctx, {0, 5, 0}, 3, 1, false, DType::f32, 3), "n 1");
  // No rows at all: nothing to compute.
  EXPECT_EQ(grouped_matmul(ctx, ctx.empty({0, 4}, DType::f32), ctx.random({2, 4, 3}, DType::f32, 1),
                           ctx.from({2}, DType::i32, std::vector<double>{0, 0}))
                .shape(),
            (Shape{0, 3}));
}

TEST_P(GroupedMatmul, TgmmMatchesReferenceInEveryDtype) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    std::mt19937_64 rng(4);
    const Case c = make(ctx, uneven, 37, 45, false, t, 4);
    Tensor grad = ctx.from({77, 45}, t, uniform_values(rng, 77 * 45, -1, 1));
    const auto got = check_tgmm(ctx, c.lhs, grad, c.sizes, std::string(to_string(t)));
    // Empty groups (1 and 4) give exactly 0.
    for (std::size_t i = 0; i < 37 * 45; ++i) {
      EXPECT_EQ(got[37 * 45 + i], 0.0);
      EXPECT_EQ(got[4 * 37 * 45 + i], 0.0);
    }
  }
}

// <d_out, (f(x + h v) - f(x - h v)) / 2h> = <d_x, v> for random directions v of lhs and rhs,
// f the double reference forward: the kernels' gradients against the reference's derivative.
TEST_P(GroupedMatmul, GradientsMatchFiniteDifferences) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (bool trans : {false, true}) {
      const std::string what = std::string(to_string(t)) + (trans ? " trans_rhs" : "");
      const Case c = make(ctx, uneven, 19, 21, trans, t, 5);
      std::mt19937_64 rng(6);
      Tensor dout = ctx.from({77, 21}, t, uniform_values(rng, 77 * 21, -1, 1));
      // d lhs: grouped_matmul of d_out with rhs, trans_rhs flipped.
      const auto dlhs = grouped_matmul(ctx, dout, c.rhs, c.sizes, {.trans_rhs = !trans}).read();
      // d rhs: tgmm(lhs, d_out) is [groups, k, n]; with trans_rhs, tgmm(d_out, lhs) is [groups, n, k].
      const auto drhs = (trans ? grouped_matmul_tgmm(ctx, dout, c.lhs, c.sizes) : grouped_matmul_tgmm(ctx, c.lhs, dout, c.sizes)).read();
      const Invocation inv = gm::invocation(gm::Mode::gmm, c.lhs.spec(), c.rhs.spec(), c.sizes.spec(), {{77, 21}, t}, trans);
      const gm::GroupedMatmulKernel k;
      const auto x = c.lhs.read(), w = c.rhs.read(), s = c.sizes.read(), g = dout.read();
      const double h = 1e-3;
      auto directional = [&](bool of_lhs, const std::vector<double>& grad) {
        const auto& base = of_lhs ? x : w;
        const auto v = uniform_values(rng, static_cast<std::int64_t>(base.size()), -1, 1);
        std::vector<double> p(base), m(base);
        for (std::size_t i = 0; i < base.size(); ++i) p[i] += h * v[i], m[i] -= h * v[i];
        const std::vector<double> zero(g.size());
        const auto fp = k.reference(inv, {of_lhs ? p : x, of_lhs ? w : p, s, zero})[0];
        const auto fm = k.reference(inv, {of_lhs ? m : x, of_lhs ? w : m, s, zero})[0];
        double numeric = 0, analytic = 0, scale = 0;
        for (std::size_t i = 0; i < g.size(); ++i) numeric += g[i] * (fp[i] - fm[i]) / (2 * h);
        for (std::size_t i = 0; i < v.size(); ++i) analytic += grad[i] * v[i], scale += std::abs(grad[i] * v[i]);
        EXPECT_LE(std::abs(numeric - analytic), 4 * default_tolerance(t) * scale) << what << (of_lhs ? " d lhs" : " d rhs");
      };
      directional(true, dlhs);
      directional(false, drhs);
    }
}

TEST_P(GroupedMatmul, EveryConfigOfASmallSpaceAgrees) {
  Context ctx(GetParam());
  // Sizes under 16 (one tile_m and tile_n) and without trans_rhs (tested above), so that both kernels
  // have the same small space and share their OpenCL programs.
  const Case c = make(ctx, {0, 13, 20, 7}, 12, 12, false, DType::f32, 7);
  std::mt19937_64 rng(8);
  Tensor grad = ctx.from({40, 12}, DType::f32, uniform_values(rng, 40 * 12, -1, 1));
  for (gm::Mode mode : {gm::Mode::gmm, gm::Mode::tgmm}) {
    const bool gmm = mode == gm::Mode::gmm;
    const Invocation inv = gmm ? gm::invocation(mode, c.lhs.spec(), c.rhs.spec(), c.sizes.spec(), {{40, 12}, DType::f32}, false)
                               : gm::invocation(mode, c.lhs.spec(), grad.spec(), c.sizes.spec(), {{4, 12, 12}, DType::f32});
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    const auto configs = impl.space(inv, ctx.device().info()).enumerate();
    ASSERT_GE(configs.size(), 4u);
    std::vector<double> first;
    for (const Config& config : configs) {
      const std::string label = std::string(gmm ? "gmm " : "tgmm ") + config.canonical();
      const auto got = gmm ? check_gmm(ctx, c, label, config) : check_tgmm(ctx, c.lhs, grad, c.sizes, label, config);
      if (first.empty()) first = got;
      else EXPECT_LE(test::relative_error(got, first), 1e-5) << label;
    }
  }
}

// The OpenCL tensor-core programs (grouped_matmul_mma.cl, on devices listing m16n8k16 fragments:
// NVIDIA from sm_80) against the double reference: both kernels, f16 and bf16, trans_rhs, empty
// groups and groups off every tile size, under the heuristic's config and configs spread over
// the space. Selection takes them for such operands (k and n multiples of 8).
TEST_P(GroupedMatmul, OpenCLTensorCoreConfigsMatchTheReference) {
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  std::size_t runs = 0;
  for (const std::vector<double>& sizes : {uneven, std::vector<double>{200, 0, 136, 72}})
    for (DType t : {DType::f16, DType::bf16})
      for (int variant = 0; variant < 3; ++variant) {
        const gm::Mode mode = variant < 2 ? gm::Mode::gmm : gm::Mode::tgmm;
        const bool trans = variant == 1;
        const std::int64_t k = sizes.size() == 6 ? 40 : 64, n = sizes.size() == 6 ? 48 : 136;
        const Case c = make(ctx, sizes, k, n, trans, t, 9);
        const std::int64_t m = c.lhs.shape()[0];
        std::mt19937_64 rng(10);
        Tensor grad = ctx.from({m, n}, t, uniform_values(rng, m * n, -1, 1));
        const std::int64_t g = static_cast<std::int64_t>(sizes.size());
        const Invocation inv = mode == gm::Mode::gmm
                                   ? gm::invocation(mode, c.lhs.spec(), c.rhs.spec(), c.sizes.spec(), {{m, n}, t}, trans)
                                   : gm::invocation(mode, c.lhs.spec(), grad.spec(), c.sizes.spec(), {{g, k, n}, t});
        const Implementation* mma = nullptr;
        for (const Implementation* impl : Registry::global().implementations(inv.kernel))
          if (impl->backend() == info.backend && !impl->sources().empty() &&
              impl->sources().front() == "grouped_matmul/grouped_matmul_mma.cl")
            mma = impl;
        if (!mma || !mma->supports(inv, info)) GTEST_SKIP() << GetParam() << " has no OpenCL tensor-core grouped matmul";
        EXPECT_EQ(&Registry::global().implementation(inv, info), mma) << inv.signature();
        std::vector<Config> configs{mma->heuristic(inv, info)};
        const auto all = mma->space(inv, info).enumerate();
        for (std::size_t i = 0; i < 3 && !all.empty(); ++i) configs.push_back(all[(i * 7919 + runs) % all.size()]);
        for (const Config& config : configs) {
          const std::string label = inv.signature() + " " + config.canonical();
          if (mode == gm::Mode::gmm) check_gmm(ctx, c, label, config);
          else check_tgmm(ctx, c.lhs, grad, c.sizes, label, config);
          ++runs;
        }
      }
  EXPECT_GE(runs, 48u);
}

// Where the driver gives fixed-size local arrays 99 KiB or more (NVIDIA's OpenCL from sm_86), the
// tensor-core heuristic leads with 256 x 128 tiles, which ran faster than 128 x 256 on grouped
// rows (docs/kernels/grouped_matmul.md); a device of 48 KiB keeps 128 x 128 in two stages.
TEST(GroupedMatmulOpenCL, TensorCoreHeuristicTakesTallTilesWhereTheyFit) {
  DeviceInfo gpu = test::nvidia_opencl_like();
  for (DType t : {DType::f16, DType::bf16}) gpu.coopmat.push_back({16, 8, 16, t, DType::f32});
  for (gm::Mode mode : {gm::Mode::gmm, gm::Mode::tgmm}) {
    const std::int64_t m = 8192, k = 2048, n = 1408, g = 8;
    const Invocation inv = mode == gm::Mode::gmm
                               ? gm::invocation(mode, {{m, k}, DType::bf16}, {{g, k, n}, DType::bf16}, {{g}, DType::i32},
                                                {{m, n}, DType::bf16}, false)
                               : gm::invocation(mode, {{m, k}, DType::bf16}, {{m, n}, DType::bf16}, {{g}, DType::i32},
                                                {{g, k, n}, DType::bf16});
    const Implementation* mma = nullptr;
    for (const Implementation* impl : Registry::global().implementations(inv.kernel))
      if (impl->backend() == Backend::opencl && !impl->sources().empty() &&
          impl->sources().front() == "grouped_matmul/grouped_matmul_mma.cl")
        mma = impl;
    if (!mma) GTEST_SKIP() << "built without OpenCL";
    ASSERT_TRUE(mma->supports(inv, gpu)) << inv.signature();
    for (std::uint64_t local : {48 * 1024, 99 * 1024, 227 * 1024}) {
      gpu.static_local_mem = local;
      const Config h = mma->heuristic(inv, gpu);
      EXPECT_EQ(mma->space(inv, gpu).mismatch(h), "") << h.canonical();
      EXPECT_EQ(h.get("bm"), local > 48 * 1024 ? 256 : 128) << local << " " << h.canonical();
      EXPECT_EQ(h.get("bn"), 128) << local << " " << h.canonical();
    }
  }
}

TEST_P(GroupedMatmul, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  for (const char* kernel : {"grouped_matmul", "grouped_matmul_tgmm"})
    for (auto [m, k, n, g] : {std::tuple{8192, 2048, 1408, 8}, {64, 4096, 14336, 8}, {7, 3, 5, 4}, {65536, 7168, 2048, 32}}) {
      const Kernel& kern = Registry::global().kernel(kernel);
      const Invocation inv = kern.from_sizes({{"m", m}, {"k", k}, {"n", n}, {"groups", g}}, DType::bf16, nlohmann::json::object());
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const Config h = impl.heuristic(inv, ctx.device().info());
      EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << kernel << " " << h.canonical();
    }
}

TEST_P(GroupedMatmul, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Case c = make(ctx, {3, 0, 5}, 4, 6, false, DType::f32, 9);
  auto sizes = [&](std::vector<double> v) { return ctx.from({static_cast<std::int64_t>(v.size())}, DType::i32, v); };
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, c.rhs, sizes({3, 1, 5})); },
               "group_sizes sum to 9, not to the rows of lhs (m = 8)");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, c.rhs, sizes({3, -1, 6})); }, "group_sizes[1] = -1 is negative");
  expect_error([&] { (void)grouped_matmul_tgmm(ctx, c.lhs, ctx.random({8, 6}, DType::f32, 1), sizes({8, 1, 0})); },
               "group_sizes sum to 9");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, c.rhs, sizes({3, 5})); },
               "rhs [3, 4, 6] f32 must be f32 [2, 4, 6]");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, ctx.random({3, 5, 6}, DType::f32, 1), c.sizes); },
               "rhs [3, 5, 6] f32 must be f32 [3, 4, 6]");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, c.rhs, c.sizes, {.trans_rhs = true}); },
               "rhs [3, 4, 6] f32 must be f32 [3, 4, 4] ([groups, n, k]");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, ctx.random({3, 4, 6}, DType::f16, 1), c.sizes); },
               "rhs [3, 4, 6] f16 must be f32 [3, 4, 6]");
  expect_error([&] { (void)grouped_matmul(ctx, c.lhs, c.rhs, ctx.from({3}, DType::f32, std::vector<double>{3, 0, 5})); },
               "group_sizes [3] f32 must be i32 [groups]");
  expect_error([&] { grouped_matmul(ctx, c.lhs, c.rhs, c.sizes, ctx.empty({8, 5}, DType::f32)); },
               "out [8, 5] f32 must be f32 [8, 6]");
  expect_error([&] { (void)grouped_matmul_tgmm(ctx, c.lhs, ctx.random({7, 6}, DType::f32, 1), c.sizes); },
               "grad [7, 6] f32 must be f32 [8, n]");
  expect_error([&] { grouped_matmul_tgmm(ctx, c.lhs, ctx.random({8, 6}, DType::f32, 1), c.sizes, ctx.empty({3, 6, 4}, DType::f32)); },
               "out [3, 6, 4] f32 must be f32 [3, 4, 6]");
  expect_error([&] { (void)grouped_matmul_tgmm(ctx, c.lhs, ctx.random({8, 6}, DType::f32, 1), c.sizes, {.trans_rhs = true}); },
               "trans_rhs is an option of grouped_matmul only");
}

// The tuner checks every candidate of both kernels against the reference, on every device.
TEST_P(GroupedMatmul, TunerChecksEveryCandidateAgainstTheReference) {
  auto dev = open_device(GetParam());
  for (const char* name : {"grouped_matmul", "grouped_matmul_tgmm"}) {
    const Kernel& k = Registry::global().kernel(name);
    test::expect_tune_checks_every_candidate(
        k.from_sizes({{"m", 40}, {"k", 12}, {"n", 12}, {"groups", 4}}, DType::f32, nlohmann::json::object()), *dev);
  }
}

INSTANTIATE_TEST_SUITE_P(All, GroupedMatmul, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(GroupedMatmulWorkloads, RecipeSizesAndValidInputs) {
  for (const char* kernel : {"grouped_matmul", "grouped_matmul_tgmm"}) {
    const Kernel& k = Registry::global().kernel(kernel);
    const Invocation inv = k.from_sizes({{"m", 50}, {"k", 8}, {"n", 6}, {"groups", 7}}, DType::f16, nlohmann::json::object());
    const HostArrays a = k.inputs(inv, 3);
    double sum = 0;
    for (double s : a[gm::arg::group_sizes]) sum += s;
    EXPECT_EQ(sum, 50.0);
    EXPECT_NO_THROW((void)k.reference(inv, a));
    test::expect_error([&] { (void)k.from_sizes({{"m", 2}, {"k", 4}, {"n", 4}}, DType::f16, nlohmann::json::object()); },
                       "needs size 'groups'");
  }
  const Kernel& k = Registry::global().kernel("grouped_matmul");
  const Invocation t = k.from_sizes({{"m", 4}, {"k", 8}, {"n", 6}, {"groups", 2}}, DType::f32, {{"trans_rhs", true}});
  EXPECT_EQ(t.args[gm::arg::rhs].shape, (Shape{2, 6, 8}));
  test::expect_error([&] { (void)Registry::global().kernel("grouped_matmul_tgmm").from_sizes(
                         {{"m", 4}, {"k", 8}, {"n", 6}, {"groups", 2}}, DType::f32, {{"trans_rhs", true}}); },
                     "has no option 'trans_rhs'");
}

}  // namespace
}  // namespace ejk
