#include <set>

#include "support.hpp"

namespace ejk {
namespace {

TEST(Devices, EveryBackendPresentInCi) {
  std::set<Backend> present;
  for (const auto& d : list_devices()) present.insert(d.backend);
  EXPECT_TRUE(present.count(Backend::cpu));
  if (!test::in_ci()) GTEST_SKIP() << "outside CI a missing backend is allowed";
#ifdef EJK_HAVE_OPENCL
  EXPECT_TRUE(present.count(Backend::opencl)) << "no OpenCL device: is pocl-opencl-icd installed?";
#else
  ADD_FAILURE() << "built without OpenCL";
#endif
#ifdef EJK_HAVE_VULKAN
  EXPECT_TRUE(present.count(Backend::vulkan)) << "no Vulkan device: is mesa-vulkan-drivers installed?";
#else
  ADD_FAILURE() << "built without Vulkan";
#endif
}

TEST(Devices, InfoAndFingerprintAreStable) {
  for (const auto& d : list_devices()) {
    EXPECT_FALSE(d.name.empty()) << d.id();
    EXPECT_GT(d.compute_units, 0u) << d.id();
    EXPECT_GT(d.max_workgroup_size, 0u) << d.id();
    EXPECT_EQ(d.fingerprint(), open_device(d.id())->info().fingerprint());
    EXPECT_EQ(open_device(d.id()).get(), open_device(d.id()).get()) << "devices are shared";
  }
}

TEST(Devices, UnknownNameIsRejectedWithTheName) {
  try {
    open_device("metal:3");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("metal:3"), std::string::npos) << e.what();
  }
}

TEST(Devices, AutoOpensSomething) { EXPECT_NE(open_device("auto"), nullptr); }

class DeviceBuffers : public ::testing::TestWithParam<std::string> {};

TEST_P(DeviceBuffers, RoundTripAndCopy) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    Tensor a = ctx.random({3, 37}, t);
    Tensor b = ctx.empty({3, 37}, t);
    ctx.device().copy(a.buffer(), b.buffer(), a.bytes());
    EXPECT_EQ(a.read(), b.read()) << to_string(t);
  }
  std::vector<double> v{1.5, -2.25, 3.0, 65504.0};
  Tensor h = ctx.from({4}, DType::f16, v);
  EXPECT_EQ(h.read(), v);
}

TEST_P(DeviceBuffers, CopiesBetweenOffsetsAndRejectsRangesPastTheEnd) {
  Context ctx(GetParam());
  std::vector<double> v(40), zeros(40, 0.0);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) + 1.0;
  Tensor a = ctx.from({40}, DType::f32, v);
  Tensor b = ctx.from({40}, DType::f32, zeros);
  ctx.device().copy(a.buffer(), 4 * 10, b.buffer(), 4 * 3, 4 * 7);  // a[10..17) -> b[3..10)
  std::vector<double> want = zeros;
  for (int i = 0; i < 7; ++i) want[static_cast<std::size_t>(3 + i)] = v[static_cast<std::size_t>(10 + i)];
  EXPECT_EQ(b.read(), want);
  // Within one buffer too (rows of a batch moved on the device).
  ctx.device().copy(a.buffer(), 0, a.buffer(), 4 * 30, 4 * 10);
  EXPECT_EQ(a.read()[35], 6.0);
  try {
    ctx.device().copy(a.buffer(), 4 * 35, b.buffer(), 0, 4 * 6);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("past the end"), std::string::npos) << e.what();
  }
  EXPECT_EQ(b.read(), want);
}

TEST_P(DeviceBuffers, TimingIsPositive) {
  Context ctx(GetParam());
  Tensor a = ctx.random({256, 256}, DType::f32);
  double ns = ctx.device().time_ns([&] { matmul(ctx, a, a); });
  EXPECT_GT(ns, 0.0);
}

INSTANTIATE_TEST_SUITE_P(All, DeviceBuffers, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
