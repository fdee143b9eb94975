// The OpenCL backend: device description, errors, program cache, event timing, and the
// matmul's GPU-family configurations run on whatever OpenCL device is present.
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <set>

#include "support.hpp"

#ifdef EJK_HAVE_OPENCL
#include "backends/opencl/opencl_device.hpp"
#include "matmul/matmul.hpp"
#include "matmul/opencl.hpp"

namespace ejk {
namespace {

Invocation mm(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, DType t,
              double alpha = 1, double beta = 0) {
  auto shape = [&](std::int64_t r, std::int64_t c) { return batch > 1 ? Shape{batch, r, c} : Shape{r, c}; };
  return kernels::matmul::invocation({ta ? shape(k, m) : shape(m, k), t}, {tb ? shape(n, k) : shape(k, n), t},
                                     {shape(m, n), t}, ta, tb, alpha, beta);
}

TEST(OpenCLErrors, CodesMapToExceptionTypesNamingTheCall) {
  for (cl_int code : {CL_OUT_OF_RESOURCES, CL_INVALID_WORK_GROUP_SIZE, CL_MEM_OBJECT_ALLOCATION_FAILURE,
                      CL_OUT_OF_HOST_MEMORY}) {
    try {
      opencl::fail(code, "clEnqueueNDRangeKernel(xgemm)");
      FAIL();
    } catch (const ResourceError& e) {
      EXPECT_NE(std::string(e.what()).find("clEnqueueNDRangeKernel(xgemm)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(opencl::error_name(code)), std::string::npos) << e.what();
    }
  }
  try {
    opencl::check(CL_INVALID_MEM_OBJECT, "clSetKernelArg");
    FAIL();
  } catch (const ResourceError&) {
    FAIL() << "not a resource problem";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("CL_INVALID_MEM_OBJECT"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(opencl::check(CL_SUCCESS, "anything"));
}

class OpenCL : public ::testing::TestWithParam<std::string> {
 protected:
  opencl::OpenCLDevice& dev() { return opencl::opencl_device(*open_device(GetParam())); }
};

TEST_P(OpenCL, DeviceInfoIsFilledIn) {
  const DeviceInfo& d = dev().info();
  EXPECT_EQ(d.backend, Backend::opencl);
  EXPECT_FALSE(d.vendor.empty());
  EXPECT_FALSE(d.driver.empty());
  EXPECT_EQ(d.api_version.rfind("OpenCL ", 0), 0u) << d.api_version;
  EXPECT_FALSE(d.architecture.empty());
  EXPECT_GT(d.global_mem, 0u);
  EXPECT_GT(d.max_buffer, 0u);
  EXPECT_LE(d.max_buffer, d.global_mem);
  EXPECT_GT(d.local_mem, 0u);
  for (auto dim : d.max_workgroup_dims) EXPECT_GT(dim, 0u);
  if (d.subgroup_size > 0) {
    EXPECT_TRUE(d.subgroups) << "a subgroup size without subgroups";
  }
  if (d.vendor.find("NVIDIA") != std::string::npos) {
    EXPECT_EQ(d.architecture.rfind("sm_", 0), 0u) << d.architecture;
  }
}

// A released scratch buffer answers the next request it holds without wasting more than half
// (the queue runs kernels in submission order, so the next run may reuse it); buffers held at
// once are distinct, and a request it cannot hold gets another.
TEST_P(OpenCL, ScratchBuffersAreReusedOnceReleased) {
  auto& d = dev();
  cl_mem first = nullptr;
  {
    auto a = d.scratch(1 << 20);
    auto b = d.scratch(1 << 20);
    EXPECT_NE(opencl::mem_of(*a), opencl::mem_of(*b));
    EXPECT_GE(a->bytes(), std::size_t{1} << 20);
    first = opencl::mem_of(*a);
  }
  auto again = d.scratch((1 << 20) - 100);
  auto other = d.scratch((1 << 20) - 100);
  const std::set<cl_mem> reused{opencl::mem_of(*again), opencl::mem_of(*other)};
  EXPECT_EQ(reused.count(first), 1u);
  auto larger = d.scratch(3 << 20);
  EXPECT_EQ(reused.count(opencl::mem_of(*larger)), 0u);
  EXPECT_GE(larger->bytes(), std::size_t{3} << 20);
  // Too large for a 1 MiB request: more than half of it would be wasted.
  larger.reset();
  auto small = d.scratch(1 << 10);
  EXPECT_LT(small->bytes(), std::size_t{1} << 20);
}

// Program binaries kept in the cache folder answer another process's build (a second device
// object stands in for it); a damaged file is a miss, never an error.
TEST_P(OpenCL, ProgramBinariesAreKeptAcrossProcesses) {
  test::TempDir dir;
  setenv("EJK_CACHE_DIR", dir.path.c_str(), 1);
  setenv("EJK_PROGRAM_CACHE", "1", 1);
  auto fresh = [&] { return std::make_unique<opencl::OpenCLDevice>(dev().platform(), dev().id(), dev().info()); };
  auto first = fresh(), second = fresh(), third = fresh();
  unsetenv("EJK_PROGRAM_CACHE");
  unsetenv("EJK_CACHE_DIR");
  const std::string src =
      "__kernel void twice(__global float* x) { x[get_global_id(0)] = 2.0f * x[get_global_id(0)] + OFFSET; }";
  auto run = [&](opencl::OpenCLDevice& d) {
    auto k = d.kernel_from_source(src, "-DOFFSET=1.0f", "twice");
    std::shared_ptr<Device> owner(std::shared_ptr<Device>(), &d);
    Tensor x(owner, {16}, DType::f32);
    x.write(std::vector<float>(16, 3.0f));
    d.launch(*k, opencl::Range(16), opencl::Range(16), x);
    for (float v : x.read<float>()) EXPECT_EQ(v, 7.0f);
  };
  run(*first);
  EXPECT_EQ(first->program_cache_stats().builds, 1u);
  EXPECT_EQ(first->program_cache_stats().loaded, 0u);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path))
    if (e.is_regular_file()) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].extension(), ".bin");
  run(*second);
  EXPECT_EQ(second->program_cache_stats().builds, 0u);
  EXPECT_EQ(second->program_cache_stats().loaded, 1u);
  {
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  run(*third);
  EXPECT_EQ(third->program_cache_stats().builds, 1u);
  EXPECT_EQ(third->program_cache_stats().loaded, 0u);
}

TEST_P(OpenCL, BuildFailureIsCompileErrorWithTheLog) {
  try {
    dev().kernel_from_source("__kernel void broken(__global float* x) { x[0] = no_such_variable; }", "", "broken");
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("clBuildProgram"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_variable"), std::string::npos) << "the build log is missing: " << what;
  }
  // A definition the matmul source cannot build with (there is no float3 accumulator layout).
  const char* options = "-DDTYPE=0 -DTRANS_A=0 -DTRANS_B=0 -DMDIMC=1 -DNDIMC=1 -DMWI=3 -DNWI=3 -DKWG=3 -DKWI=1 "
                        "-DSA=0 -DSB=0 -DVWM=1 -DVWN=3 -DSTRM=0 -DSTRN=0 -DALIGN_A=0 -DALIGN_B=0 -DALIGN_C=0 "
                        "-DIDX=int -DFMA=0";
  EXPECT_THROW(dev().kernel("matmul/matmul.cl", options, "xgemm"), CompileError);
  // The failure is remembered: asking again does not rebuild.
  auto before = dev().program_cache_stats();
  EXPECT_THROW(dev().kernel("matmul/matmul.cl", options, "xgemm"), CompileError);
  EXPECT_EQ(dev().program_cache_stats().builds, before.builds);
}

TEST_P(OpenCL, ProgramsAreCachedPerSourceAndOptions) {
  const char* src = "__kernel void fill(__global float* x, const float v) { x[get_global_id(0)] = v * SCALE; }";
  auto before = dev().program_cache_stats();
  auto k1 = dev().kernel_from_source(src, "-DSCALE=2", "fill");
  auto k2 = dev().kernel_from_source(src, "-DSCALE=2", "fill");
  EXPECT_EQ(k1.get(), k2.get());
  auto after = dev().program_cache_stats();
  EXPECT_EQ(after.builds, before.builds + 1);
  EXPECT_GE(after.hits, before.hits + 1);
  auto k3 = dev().kernel_from_source(src, "-DSCALE=3", "fill");
  EXPECT_NE(k1.get(), k3.get());
  EXPECT_EQ(dev().program_cache_stats().builds, before.builds + 2);

  // The same matmul config twice compiles once.
  Context ctx(GetParam());
  Tensor a = ctx.random({33, 20}, DType::f32), b = ctx.random({20, 9}, DType::f32);
  (void)matmul(ctx, a, b);
  auto mid = dev().program_cache_stats();
  Tensor c = matmul(ctx, a, b);
  EXPECT_EQ(dev().program_cache_stats().builds, mid.builds);

  // Typed arguments: the launch writes what it was given.
  Tensor x = ctx.empty({64}, DType::f32);
  dev().launch(*k3, opencl::Range(64), opencl::Range(8), x, 0.5f);
  for (double v : x.read()) EXPECT_EQ(v, 1.5);
  EXPECT_THROW(dev().launch(*k3, opencl::Range(64), opencl::Range(8), x), InvalidArgument);
  EXPECT_THROW(dev().launch(*k3, opencl::Range(64), opencl::Range(8), x, 0.5), DeviceError)
      << "a double where the kernel takes a float";
}

TEST_P(OpenCL, ImpossibleWorkgroupIsResourceErrorOrOutsideTheSpace) {
  auto k = dev().kernel_from_source("__kernel void one(__global float* x) { x[get_global_id(0)] = 1.0f; }", "", "one");
  Context ctx(GetParam());
  Tensor x = ctx.empty({1 << 16}, DType::f32);
  const std::size_t too_big = std::max<std::size_t>(dev().info().max_workgroup_size, k->max_workgroup_size()) * 2;
  EXPECT_THROW(dev().launch(*k, opencl::Range(too_big), opencl::Range(too_big), x), ResourceError);

  // The space never offers more than the device has.
  Invocation inv = mm(1, 512, 512, 512, false, false, DType::f32);
  for (auto [local_mem, max_wg] : {std::pair<std::uint64_t, std::uint32_t>{48 * 1024, 1024}, {16 * 1024, 256}, {4096, 64}}) {
    DeviceInfo gpu = test::nvidia_opencl_like(local_mem, max_wg);
    ParamSpace space = kernels::matmul::opencl_space(inv, gpu, false);
    auto configs = space.enumerate();
    ASSERT_FALSE(configs.empty());
    for (const auto& c : configs) {
      ASSERT_LE(c.get("mdimc") * c.get("ndimc"), max_wg) << c.canonical();
      std::int64_t local = (c.get("sa") * c.get("mdimc") * c.get("mwi") + c.get("sb") * c.get("ndimc") * c.get("nwi")) *
                           c.get("kwg") * 4;
      ASSERT_LE(local, static_cast<std::int64_t>(local_mem)) << c.canonical();
    }
    Config big{{"mdimc", 32}, {"ndimc", 32}, {"mwi", 8}, {"nwi", 8}, {"kwg", 32}, {"kwi", 8},
               {"sa", 1},     {"sb", 1},     {"pf", 1},  {"vwm", 4}, {"vwn", 4},  {"strn", 1}};
    if (max_wg < 1024 || local_mem < 64 * 1024) {
      EXPECT_NE(space.mismatch(big), "");
    }
    EXPECT_EQ(space.mismatch(kernels::matmul::opencl_heuristic(inv, gpu, false)), "");
  }
}

TEST_P(OpenCL, HeuristicsOfBothFamiliesAreInTheirSpaces) {
  for (bool cpu : {true, false})
    for (auto [m, n, k] : {std::tuple{1, 4096, 4096}, {4096, 4096, 4096}, {17, 3, 1000}, {1000, 1000, 1000}})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (DType t : {DType::f32, DType::f16, DType::bf16}) {
            Invocation inv = mm(1, m, n, k, ta, tb, t);
            DeviceInfo d = cpu ? dev().info() : test::nvidia_opencl_like();
            auto space = kernels::matmul::opencl_space(inv, d, cpu);
            Config h = kernels::matmul::opencl_heuristic(inv, d, cpu);
            EXPECT_EQ(space.mismatch(h), "") << (cpu ? "cpu " : "gpu ") << h.canonical();
          }
}

TEST_P(OpenCL, TimingComesFromEventsAndScalesWithWork) {
  Context ctx(GetParam());
  auto& d = ctx.device();
  EXPECT_EQ(d.time_ns([] {}), 0.0) << "nothing submitted";
  Tensor a = ctx.random({128, 128}, DType::f32);
  Tensor b = ctx.random({1024, 1024}, DType::f32);
  (void)matmul(ctx, a, a);
  (void)matmul(ctx, b, b);
  double one = 1e300, four = 1e300, large = 1e300;
  for (int r = 0; r < 3; ++r) {
    one = std::min(one, d.time_ns([&] { (void)matmul(ctx, a, a); }));
    four = std::min(four, d.time_ns([&] {
      for (int i = 0; i < 4; ++i) (void)matmul(ctx, a, a);
    }));
    large = std::min(large, d.time_ns([&] { (void)matmul(ctx, b, b); }));
  }
  EXPECT_GT(one, 0.0);
  EXPECT_GT(four, 2.0 * one) << "four launches timed as one span";
  // 512x the work; a GPU runs the small product at its launch latency, so only a few
  // times longer is certain.
  EXPECT_GT(large, 3.0 * one) << "512x the work";
  // Nested timings both see the inner launch.
  double inner = 0;
  double outer = d.time_ns([&] { inner = d.time_ns([&] { (void)matmul(ctx, a, a); }); });
  EXPECT_GT(inner, 0.0);
  EXPECT_GE(outer, inner);
}

TEST_P(OpenCL, BetaZeroOverwritesNaN) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Tensor a = ctx.random({37, 19}, t), b = ctx.random({19, 45}, t);
    std::vector<double> nan(37 * 45, std::numeric_limits<double>::quiet_NaN());
    Tensor c = ctx.from({37, 45}, t, nan);
    matmul(ctx, a, b, c, {.alpha = 1.0, .beta = 0.0, .config = {}});
    Invocation inv = mm(1, 37, 45, 19, false, false, t);
    auto want = kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), std::vector<double>(37 * 45, 0.0)})[0];
    EXPECT_LE(test::relative_error(c.read(), want), kernels::matmul::MatmulKernel().tolerance(inv)) << to_string(t);
  }
}

TEST_P(OpenCL, EmptyInnerDimensionScalesC) {
  Context ctx(GetParam());
  Tensor a = ctx.empty({5, 0}, DType::f32), b = ctx.empty({0, 7}, DType::f32);
  Tensor c = ctx.random({5, 7}, DType::f32);
  auto before = c.read();
  matmul(ctx, a, b, c, {.alpha = 1.0, .beta = 0.5, .config = {}});
  auto after = c.read();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(static_cast<float>(after[i]), static_cast<float>(before[i] * 0.5));
}

// The configurations GPUs use (many work-items, tiles staged in local memory) run on this
// device too, so their results are checked here even without a GPU.
TEST_P(OpenCL, GpuFamilyConfigsComputeTheProduct) {
  Context ctx(GetParam());
  const auto& impl = Registry::global().implementation(mm(1, 8, 8, 8, false, false, DType::f32), dev().info());
  std::mt19937 rng(7);
  struct Case {
    std::int64_t batch, m, n, k;
    bool ta, tb;
  };
  const Case cases[] = {{2, 67, 45, 83, false, true}, {1, 130, 17, 64, true, false}, {1, 33, 129, 40, true, true}};
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const auto& cs : cases) {
      Invocation inv = mm(cs.batch, cs.m, cs.n, cs.k, cs.ta, cs.tb, t, 0.5, 0.25);
      DeviceInfo gpu = test::nvidia_opencl_like(std::min<std::uint64_t>(48 * 1024, dev().info().local_mem),
                                std::min<std::uint32_t>(1024, dev().info().max_workgroup_size));
      auto configs = kernels::matmul::opencl_space(inv, gpu, false).enumerate();
      ASSERT_FALSE(configs.empty());
      std::shuffle(configs.begin(), configs.end(), rng);
      configs.resize(1);
      configs.push_back(kernels::matmul::opencl_heuristic(inv, gpu, false));
      for (const auto& cfg : configs) {
        Tensor a = ctx.random(inv.args[0].shape, t), b = ctx.random(inv.args[1].shape, t);
        Tensor c = ctx.random(inv.args[2].shape, t);
        auto want = kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), c.read()})[0];
        const Tensor args[] = {a, b, c};
        impl.run(inv, cfg, args, ctx.device());
        EXPECT_LE(test::relative_error(c.read(), want), kernels::matmul::MatmulKernel().tolerance(inv))
            << to_string(t) << " " << cfg.canonical();
      }
    }
}

// Variants of the CPU family the heuristic does not pick on small shapes: column-major
// workgroup order, two work-items a group with strided vectors, staged transposed B.
TEST_P(OpenCL, CpuFamilyVariantsComputeTheProduct) {
  Context ctx(GetParam());
  const auto& impl = Registry::global().implementation(mm(1, 8, 8, 8, false, false, DType::f32), dev().info());
  const Config base{{"mdimc", 1}, {"ndimc", 1}, {"mwi", 8}, {"nwi", 16}, {"kwg", 16}, {"kwi", 4}, {"vwn", 8}};
  struct Variant {
    bool ta, tb;
    Config cfg;
  };
  std::vector<Variant> variants;
  variants.push_back({false, false, Config(base).set("order", 1)});
  variants.push_back({true, false, Config(base).set("mdimc", 2).set("strm", 1).set("vwm", 4).set("order", 0)});
  variants.push_back({false, true, Config(base).set("ndimc", 1).set("sb", 1).set("order", 1)});
  variants.push_back({false, false, Config(base).set("ndimc", 2).set("strn", 1).set("order", 0)});
  for (DType t : {DType::f32, DType::f16})
    for (const auto& v : variants) {
      Invocation inv = mm(2, 45, 70, 37, v.ta, v.tb, t, 1.5, 0.5);
      ASSERT_EQ(kernels::matmul::opencl_space(inv, dev().info(), true).mismatch(v.cfg), "") << v.cfg.canonical();
      Tensor a = ctx.random(inv.args[0].shape, t), b = ctx.random(inv.args[1].shape, t);
      Tensor c = ctx.random(inv.args[2].shape, t);
      auto want = kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), c.read()})[0];
      const Tensor args[] = {a, b, c};
      impl.run(inv, v.cfg, args, ctx.device());
      EXPECT_LE(test::relative_error(c.read(), want), kernels::matmul::MatmulKernel().tolerance(inv))
          << to_string(t) << " " << v.cfg.canonical();
    }
}

INSTANTIATE_TEST_SUITE_P(All, OpenCL, ::testing::ValuesIn(test::devices(Backend::opencl)),
                         [](const auto& p) { return test::test_name(p.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OpenCL);

}  // namespace
}  // namespace ejk
#endif
