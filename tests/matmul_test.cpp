// matmul against a double-precision reference on random inputs, on every device.
#include <algorithm>
#include <functional>
#include <random>
#include <set>

#include "ejk/ops.hpp"
#include "ejk/registry.hpp"
#include "common/gemm_mma.hpp"
#include "matmul/matmul.hpp"
#include "support.hpp"

namespace ejk {
namespace {

struct Case {
  std::int64_t batch, m, n, k;
  bool ta, tb;
  double alpha, beta;
};

// Runs one case with `config` (or the selector's choice) and returns the relative error.
double run_case(Context& ctx, DType t, const Case& c, const std::optional<Config>& config = {}, bool tf32 = false) {
  auto shape = [&](std::int64_t r, std::int64_t col) {
    return c.batch > 1 ? Shape{c.batch, r, col} : Shape{r, col};
  };
  Tensor a = ctx.random(c.ta ? shape(c.k, c.m) : shape(c.m, c.k), t);
  Tensor b = ctx.random(c.tb ? shape(c.n, c.k) : shape(c.k, c.n), t);
  Tensor out = ctx.random(shape(c.m, c.n), t);
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), out.spec(), c.ta, c.tb, c.alpha, c.beta, tf32);
  auto want = kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), out.read()})[0];
  matmul(ctx, a, b, out,
         {.trans_a = c.ta, .trans_b = c.tb, .tf32 = tf32, .alpha = c.alpha, .beta = c.beta, .config = config});
  return test::relative_error(out.read(), want);
}

double tolerance(DType t, const Case& c, bool tf32 = false) {
  Invocation inv = kernels::matmul::invocation({{c.m, c.k}, t}, {{c.k, c.n}, t}, {{c.m, c.n}, t}, false, false, 1, 0, tf32);
  return kernels::matmul::MatmulKernel().tolerance(inv);
}

// The OpenCL tensor-core matmul (matmul_mma.cl) registered on `backend`, if any.
const Implementation* tensor_core_matmul(Backend backend) {
  for (const Implementation* impl : Registry::global().implementations("matmul"))
    if (impl->backend() == backend && !impl->sources().empty() && impl->sources().front() == "matmul/matmul_mma.cl")
      return impl;
  return nullptr;
}

class Matmul : public ::testing::TestWithParam<std::string> {};

// The sampled reference is the full reference at the elements it samples: 8 rows (first and
// last among them) by 8 columns, reading only inside each argument, for every layout.
TEST(MatmulSampledReference, IsTheFullReferenceAtItsElements) {
  const kernels::matmul::MatmulKernel mk;
  const DType t = DType::f32;
  std::vector<Invocation> invs;
  for (const Case& c : {Case{1, 37, 53, 29, false, false, 1, 0}, Case{3, 40, 9, 17, true, false, 0.5, 0},
                        Case{2, 5, 70, 33, false, true, 1, 0.75}, Case{4, 11, 13, 7, true, true, -2, 1.5}}) {
    auto shape = [&](std::int64_t r, std::int64_t col) { return c.batch > 1 ? Shape{c.batch, r, col} : Shape{r, col}; };
    invs.push_back(kernels::matmul::invocation({c.ta ? shape(c.k, c.m) : shape(c.m, c.k), t},
                                               {c.tb ? shape(c.n, c.k) : shape(c.k, c.n), t}, {shape(c.m, c.n), t}, c.ta,
                                               c.tb, c.alpha, c.beta));
  }
  // b shared by every batch entry.
  invs.push_back(kernels::matmul::invocation({{4, 9, 7}, t}, {{7, 5}, t}, {{4, 9, 5}, t}, false, false, 1, 0));
  for (const Invocation& inv : invs) {
    const kernels::matmul::Problem p = kernels::matmul::Problem::of(inv);
    const HostArrays in = mk.inputs(inv, 3);
    const HostArrays want = mk.reference(inv, in);
    const ArgReader read = test::host_reader(in, mk.args(), "matmul");
    const std::vector<SampledOutput> got = mk.sampled_reference(inv, read);
    ASSERT_EQ(got.size(), 1u);
    const SampledOutput& s = got[0];
    EXPECT_EQ(s.arg, 2u);
    EXPECT_EQ(s.index.size(), static_cast<std::size_t>(std::min<std::int64_t>(8, p.batch * p.m) * std::min<std::int64_t>(8, p.n)));
    EXPECT_EQ(s.index.front(), 0);
    EXPECT_EQ(s.index.back(), p.batch * p.m * p.n - 1);
    EXPECT_TRUE(std::is_sorted(s.index.begin(), s.index.end()));
    for (std::size_t j = 0; j < s.index.size(); ++j)
      EXPECT_NEAR(s.value[j], want[0][static_cast<std::size_t>(s.index[j])], 1e-12) << s.index[j];
  }
}

// A caller builds an invocation from its own tensors and options, and runs or sweeps it: the
// same invocation the convenience call makes, checked by the kernel.
TEST(MatmulInvocation, MadeFromTensorsAndOptions) {
  Context ctx("cpu");
  const Tensor a = ctx.random({24, 40}, DType::f32), b = ctx.random({32, 40}, DType::f32);
  const Tensor c = ctx.empty({24, 32}, DType::f32);
  const Tensor args[] = {a, b, c};
  const Invocation inv = Invocation::of("matmul", args, {{"trans_a", false}, {"trans_b", true}}, {{"alpha", 1.0}, {"beta", 0.0}});
  EXPECT_EQ(inv.signature(), kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, true, 1, 0).signature());
  ctx.executor().run(inv, args);
  const Tensor d = ejk::matmul(ctx, a, b, MatmulOptions{.trans_b = true});
  EXPECT_EQ(c.read<float>(), d.read<float>());
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  EXPECT_FALSE(impl.space(inv, ctx.device().info()).enumerate().empty());

  EXPECT_THROW(Invocation::of("matmul", std::span<const Tensor>(args, 2)), InvalidArgument);
  EXPECT_THROW(Invocation::of("no_such_kernel", args), NotFound);
  const Tensor holes[] = {a, Tensor{}, c};
  try {
    (void)Invocation::of("matmul", holes);
    ADD_FAILURE() << "an undefined tensor was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("argument 1 (b) is an undefined tensor"), std::string::npos) << e.what();
  }
  // Shapes that do not multiply: the kernel's own check names them.
  EXPECT_THROW(Invocation::of("matmul", args, {{"trans_a", false}, {"trans_b", false}}), InvalidArgument);
}

TEST(SamplePositions, SpreadDistinctAndAlwaysTheEnds) {
  EXPECT_EQ(sample_positions(5, 8), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(sample_positions(0, 8), (std::vector<std::int64_t>{}));
  EXPECT_EQ(sample_positions(100, 1), (std::vector<std::int64_t>{0}));
  EXPECT_EQ(sample_positions(100, 2), (std::vector<std::int64_t>{0, 99}));
  for (std::int64_t n : {9, 64, 1000, 4096 * 16 * 4}) {
    const auto p = sample_positions(n, 8);
    ASSERT_EQ(p.size(), 8u) << n;
    EXPECT_EQ(p.front(), 0);
    EXPECT_EQ(p.back(), n - 1);
    EXPECT_TRUE(std::adjacent_find(p.begin(), p.end(), std::greater_equal<>()) == p.end()) << n;  // strictly ascending
    // One in each sixth of the inside.
    for (std::size_t s = 1; s + 1 < p.size(); ++s) {
      EXPECT_GE(p[s], 1 + static_cast<std::int64_t>(s - 1) * (n - 2) / 6) << n;
      EXPECT_LT(p[s], 1 + static_cast<std::int64_t>(s) * (n - 2) / 6) << n;
    }
  }
  // Not all at the same offset within their stretch: positions over flattened heads vary.
  const auto p = sample_positions(6 * 1000 + 2, 8);
  std::set<std::int64_t> offsets;
  for (std::size_t s = 1; s + 1 < p.size(); ++s) offsets.insert((p[s] - 1) % 1000);
  EXPECT_GT(offsets.size(), 3u);
}

TEST_P(Matmul, DtypesTransposesOddShapes) {
  Context ctx(GetParam());
  const Case cases[] = {
      {1, 1, 1, 1, false, false, 1, 0},      {1, 17, 129, 33, false, false, 1, 0},
      {1, 129, 17, 1000, true, false, 1, 0}, {1, 64, 65, 66, false, true, 0.5, 0},
      {1, 33, 31, 129, true, true, 1, 0.75}, {3, 17, 40, 19, false, false, 1, 1},
      {2, 1, 1000, 17, true, true, -1, 0.5}, {1, 130, 1, 64, false, false, 2, 0},
  };
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const auto& c : cases) {
      double err = run_case(ctx, t, c);
      EXPECT_LE(err, tolerance(t, c)) << GetParam() << " " << to_string(t) << " batch " << c.batch << " m " << c.m
                                      << " n " << c.n << " k " << c.k << " ta " << c.ta << " tb " << c.tb;
    }
}

// tf32 lets f32 operands be rounded to TF32 (CUDA's tensor cores do; other devices compute in
// full f32, which the contract allows): within the widened tolerance on every device, whatever the
// layout, edges, batch and scalars. Other dtypes refuse it.
TEST_P(Matmul, Tf32WithinItsToleranceAndF32Only) {
  Context ctx(GetParam());
  const Case cases[] = {
      {1, 64, 64, 64, false, false, 1, 0},    {2, 36, 52, 100, true, false, 0.5, 0.75},
      {1, 17, 33, 1000, false, true, 1, 0},   {1, 128, 96, 40, true, true, -1, 1},
      {3, 200, 136, 72, false, false, 1, 0.5}, {1, 5, 7, 9, true, false, 1, 0},
  };
  for (const auto& c : cases) {
    const double tol = tolerance(DType::f32, c, true);
    EXPECT_GT(tol, tolerance(DType::f32, c));
    EXPECT_LE(run_case(ctx, DType::f32, c, {}, true), tol)
        << GetParam() << " batch " << c.batch << " m " << c.m << " n " << c.n << " k " << c.k << " ta " << c.ta
        << " tb " << c.tb;
  }
  for (DType t : {DType::f16, DType::bf16}) {
    Tensor a = ctx.random({8, 4}, t), b = ctx.random({4, 8}, t), out = ctx.random({8, 8}, t);
    const auto before = out.read();
    test::expect_error([&] { matmul(ctx, a, b, out, {.tf32 = true}); },
                       "matmul option 'tf32' takes f32 operands, not " + std::string(to_string(t)));
    EXPECT_EQ(out.read(), before);
  }
}

TEST_P(Matmul, LargeSquare) {
  Context ctx(GetParam());
  Case c{1, 1000, 1000, 1000, false, false, 1, 0};
  EXPECT_LE(run_case(ctx, DType::f32, c), tolerance(DType::f32, c));
}

TEST_P(Matmul, SharedOperandBroadcastsOverBatch) {
  Context ctx(GetParam());
  Tensor a = ctx.random({4, 9, 7}, DType::f32);
  Tensor b = ctx.random({7, 5}, DType::f32);
  Tensor c = matmul(ctx, a, b);
  ASSERT_EQ(c.shape(), (Shape{4, 9, 5}));
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 0);
  auto want = kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), std::vector<double>(180, 0.0)})[0];
  EXPECT_LE(test::relative_error(c.read(), want), 1e-5);
}

// Every config of a sampled slice of the space computes the same product.
TEST_P(Matmul, SampledConfigsOfTheSpace) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16}) {
    Case c{2, 67, 45, 83, false, true, 1, 0.5};
    Invocation inv = kernels::matmul::invocation({{2, 67, 83}, t}, {{2, 45, 83}, t}, {{2, 67, 45}, t}, false, true, 1, 0.5);
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    auto configs = impl.space(inv, ctx.device().info()).enumerate();
    ASSERT_FALSE(configs.empty());
    std::mt19937 rng(42);
    std::shuffle(configs.begin(), configs.end(), rng);
    configs.resize(std::min<std::size_t>(configs.size(), 8));
    configs.push_back(impl.heuristic(inv, ctx.device().info()));
    for (const auto& cfg : configs) {
      double err = run_case(ctx, t, c, cfg);
      EXPECT_LE(err, tolerance(t, c)) << GetParam() << " " << to_string(t) << " " << cfg.canonical();
    }
  }
}

// The OpenCL tensor-core matmul (matmul_mma.cl, on devices listing m16n8k16 fragments: NVIDIA
// from sm_80) against the double reference: every transpose, both dtypes, edges of every tile
// size, k short of a slice and not a multiple of one, a batch, alpha and beta, under the
// heuristic's config and configs spread over its space. Selection takes it for such operands.
TEST_P(Matmul, OpenCLTensorCoreConfigsMatchTheReference) {
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  const Implementation* mma = tensor_core_matmul(info.backend);
  const Invocation probe = kernels::matmul::invocation({{64, 64}, DType::f16}, {{64, 64}, DType::f16},
                                                       {{64, 64}, DType::f16}, false, false, 1, 0);
  if (!mma || !mma->supports(probe, info)) GTEST_SKIP() << GetParam() << " has no OpenCL tensor-core matmul";
  const Case cases[] = {
      {1, 64, 64, 64, false, false, 1, 0},  {2, 200, 136, 72, false, false, 0.5, 0.75},
      {1, 8, 264, 1000, false, false, 1, 0}, {1, 520, 24, 8, false, false, -1, 1},
      {1, 264, 200, 40, false, false, 1, 0},
  };
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (Case c : cases) {
          c.ta = ta;
          c.tb = tb;
          auto spec = [&](std::int64_t r, std::int64_t col) {
            return c.batch > 1 ? TensorSpec{{c.batch, r, col}, t} : TensorSpec{{r, col}, t};
          };
          const Invocation inv = kernels::matmul::invocation(ta ? spec(c.k, c.m) : spec(c.m, c.k),
                                                             tb ? spec(c.n, c.k) : spec(c.k, c.n), spec(c.m, c.n), ta,
                                                             tb, c.alpha, c.beta);
          ASSERT_TRUE(mma->supports(inv, info)) << inv.signature();
          EXPECT_EQ(&Registry::global().implementation(inv, info), mma) << inv.signature();
          std::vector<Config> configs{mma->heuristic(inv, info)};
          const auto all = mma->space(inv, info).enumerate();
          for (std::size_t i = 0; i < 3 && !all.empty(); ++i) configs.push_back(all[(i * 7919 + runs) % all.size()]);
          for (const Config& cfg : configs) {
            EXPECT_LE(run_case(ctx, t, c, cfg), tolerance(t, c))
                << GetParam() << " " << inv.signature() << " " << cfg.canonical();
            ++runs;
          }
        }
  EXPECT_GT(runs, 100u);
}

// Where the OpenCL tensor-core matmul is offered, on any machine: an NVIDIA device as its OpenCL
// driver describes itself (m16n8k16 fragments, 48 KiB of local memory) takes it for 16-bit
// operands whose rows are 16-byte multiples, with a heuristic inside the space; f32, odd rows and
// a device without fragments keep the xgemm; a config past the local memory is refused by name.
TEST(MatmulOpenCL, TensorCoreTileWhereTheDeviceHasFragments) {
  DeviceInfo gpu = test::nvidia_opencl_like();
  for (DType t : {DType::f16, DType::bf16}) gpu.coopmat.push_back({16, 8, 16, t, DType::f32});
  const Implementation* mma = tensor_core_matmul(Backend::opencl);
  if (!mma) GTEST_SKIP() << "built without OpenCL";
  auto inv = [](std::int64_t m, std::int64_t n, std::int64_t k, DType t, bool ta = false, bool tb = false) {
    return kernels::matmul::invocation({ta ? Shape{k, m} : Shape{m, k}, t}, {tb ? Shape{n, k} : Shape{k, n}, t},
                                       {{m, n}, t}, ta, tb, 1, 0);
  };
  for (DType t : {DType::f16, DType::bf16})
    for (auto [m, n, k] : {std::tuple{4096, 4096, 4096}, {64, 64, 64}, {8, 264, 1000}, {4096, 14336, 4096}}) {
      const Invocation i = inv(m, n, k, t);
      ASSERT_TRUE(mma->supports(i, gpu)) << i.signature();
      EXPECT_EQ(&Registry::global().implementation(i, gpu), mma) << i.signature();
      const auto configs = mma->space(i, gpu).enumerate();
      ASSERT_FALSE(configs.empty()) << i.signature();
      const Config h = mma->heuristic(i, gpu);
      EXPECT_EQ(mma->space(i, gpu).mismatch(h), "") << h.canonical();
      for (const Config& c : configs)
        EXPECT_LE(kernels::MmaTiles::of(c).local_bytes(false, false), 48 * 1024) << c.canonical();
    }
  EXPECT_EQ(mma->heuristic(inv(4096, 4096, 4096, DType::f16), gpu).canonical(),
            R"({"bk":32,"bm":128,"bn":128,"group_m":8,"pipe":0,"stages":2,"swizzle":0,"wm":2,"wn":2})");
  // Where the driver gives fixed-size local arrays more (NVIDIA's OpenCL: 99 KiB on sm_86 and
  // sm_89, 227 KiB on sm_90), the tile grows to 128 x 256 in three stages (80 KiB), and the
  // space to rings of up to that size; at 1024^2 that tile leaves compute units idle.
  DeviceInfo hopper = gpu;
  hopper.static_local_mem = 227 * 1024;
  for (std::uint64_t local : {99 * 1024, 227 * 1024}) {
    hopper.static_local_mem = local;
    EXPECT_EQ(mma->heuristic(inv(4096, 4096, 4096, DType::f16), hopper).canonical(),
              R"({"bk":32,"bm":128,"bn":256,"group_m":8,"pipe":1,"stages":3,"swizzle":0,"wm":2,"wn":4})");
    EXPECT_EQ(kernels::MmaTiles::of(mma->heuristic(inv(4096, 4096, 4096, DType::f16), hopper)).local_bytes(false, false),
              3 * (128 * 40 + 32 * 264) * 2);
  }
  EXPECT_LT(mma->heuristic(inv(1024, 1024, 1024, DType::f16), hopper).get("bn"), 256);
  std::int64_t largest = 0;
  for (const Config& c : mma->space(inv(4096, 4096, 4096, DType::f16), hopper).enumerate())
    largest = std::max(largest, kernels::MmaTiles::of(c).local_bytes(false, false));
  EXPECT_GT(largest, 48 * 1024);
  EXPECT_LE(largest, 227 * 1024);
  EXPECT_FALSE(mma->supports(inv(64, 64, 64, DType::f32), gpu));
  EXPECT_FALSE(mma->supports(inv(64, 63, 64, DType::f16), gpu)) << "b's rows of 63 elements";
  DeviceInfo plain = gpu;
  plain.coopmat.clear();
  EXPECT_FALSE(mma->supports(inv(64, 64, 64, DType::f16, true, false), plain)) << "no fragments";
  const Config big{{"bm", 256}, {"bn", 256}, {"bk", 64}, {"wm", 2}, {"wn", 4}, {"stages", 4},
                   {"swizzle", 0}, {"pipe", 0}, {"group_m", 8}};
  EXPECT_NE(mma->space(inv(4096, 4096, 4096, DType::f16), gpu).mismatch(big), "");
  test::expect_error([&] { kernels::MmaTiles::of(big).check("matmul", big, false, false, gpu); }, "bytes of local memory");
}

TEST_P(Matmul, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  for (auto [m, n, k] : {std::tuple{1, 4096, 4096}, {2048, 4096, 4096}, {17, 3, 1000}, {1024, 1024, 1024}})
    for (auto [t, tf32] : {std::pair{DType::f32, false}, {DType::f32, true}, {DType::f16, false}}) {
      Invocation inv = kernels::matmul::invocation({{m, k}, t}, {{k, n}, t}, {{m, n}, t}, false, false, 1, 0, tf32);
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      auto space = impl.space(inv, ctx.device().info());
      Config h = impl.heuristic(inv, ctx.device().info());
      EXPECT_EQ(space.mismatch(h), "") << GetParam() << " " << h.canonical();
    }
}

TEST_P(Matmul, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  Tensor a = ctx.random({4, 5}, DType::f32);
  Tensor b = ctx.random({6, 7}, DType::f32);
  Tensor c = ctx.random({4, 7}, DType::f32);
  expect_error([&] { matmul(ctx, a, b, c); }, "b [6, 7]");
  Tensor bi = ctx.random({5, 7}, DType::i32);
  expect_error([&] { matmul(ctx, a, bi, c); }, "i32");
  Tensor bh = ctx.random({5, 7}, DType::f16);
  expect_error([&] { matmul(ctx, a, bh, c); }, "dtypes differ");
  Tensor b5 = ctx.random({5, 7}, DType::f32);
  Tensor cbad = ctx.random({4, 8}, DType::f32);
  expect_error([&] { matmul(ctx, a, b5, cbad); }, "c [4, 8]");
  // Nothing was written into c by the rejected calls.
  auto before = c.read();
  expect_error([&] { matmul(ctx, a, b, c); }, "inner dimensions");
  EXPECT_EQ(c.read(), before);
  expect_error([&] { matmul(ctx, a, b5, c, {.config = Config{{"nonsense", 3}}}); }, "nonsense");
}

INSTANTIATE_TEST_SUITE_P(All, Matmul, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
