#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "common/philox.h"

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

// Typed transfers: floats, int32 and 16-bit storage words in and out without doubles, slices
// that touch only their elements, and refusals naming the tensor.
TEST_P(DeviceBuffers, TypedTransfersAndSlices) {
  Context ctx(GetParam());
  const std::vector<float> f{1.5f, -2.25f, 3.0f, 65504.0f, 0.1f, -0.0f};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    Tensor x = ctx.from({2, 3}, t, std::span<const float>(f));
    const std::vector<double> d = x.read();
    const std::vector<float> back = x.read<float>();
    ASSERT_EQ(back.size(), f.size());
    for (std::size_t i = 0; i < f.size(); ++i) {
      EXPECT_EQ(static_cast<double>(back[i]), round_to(t, f[i])) << to_string(t) << " " << i;
      EXPECT_EQ(d[i], round_to(t, f[i])) << to_string(t) << " " << i;
    }
    // A slice: only elements 2 and 3 are written, and read back alone.
    const std::vector<float> two{7.0f, -8.0f};
    x.write(std::span<const float>(two), 2);
    EXPECT_EQ(x.read<float>(2, 2), two) << to_string(t);
    EXPECT_EQ(x.read<float>(0, 2), (std::vector<float>(back.begin(), back.begin() + 2))) << to_string(t);
    EXPECT_EQ(x.read<float>(4), (std::vector<float>(back.begin() + 4, back.end()))) << to_string(t);
    EXPECT_TRUE(x.read<float>(6).empty());
  }
  // 16-bit words are the storage as it is: f16's 0x3c00 is 1.0, bf16's 0x3f80 is 1.0.
  const std::vector<std::uint16_t> one_h{0x3c00, 0xbc00}, one_b{0x3f80, 0xbf80};
  Tensor h = ctx.from({2}, DType::f16, std::span<const std::uint16_t>(one_h));
  Tensor b = ctx.from({2}, DType::bf16, std::span<const std::uint16_t>(one_b));
  EXPECT_EQ(h.read(), (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(b.read(), (std::vector<double>{1.0, -1.0}));
  EXPECT_EQ(h.read<std::uint16_t>(), one_h);
  EXPECT_EQ(b.read<std::uint16_t>(1, 1), std::vector<std::uint16_t>{0xbf80});
  // int32 as it is; into a float tensor it converts.
  const std::vector<std::int32_t> ints{-7, 0, 2147483647};
  Tensor i = ctx.from({3}, DType::i32, std::span<const std::int32_t>(ints));
  EXPECT_EQ(i.read<std::int32_t>(), ints);
  EXPECT_EQ(i.read<double>(2), std::vector<double>{2147483647.0});
  Tensor fi = ctx.from({3}, DType::f32, std::span<const std::int32_t>(ints));
  EXPECT_EQ(fi.read<float>(0, 2), (std::vector<float>{-7.0f, 0.0f}));
  // Doubles past int32's range saturate rather than wrap.
  Tensor sat = ctx.from({2}, DType::i32, std::vector<double>{1e12, -1e12});
  EXPECT_EQ(sat.read<std::int32_t>(), (std::vector<std::int32_t>{2147483647, -2147483647 - 1}));

  const std::vector<std::uint16_t> words(6);
  Tensor f32 = ctx.empty({2, 3}, DType::f32);
  test::expect_error([&] { f32.write(std::span<const std::uint16_t>(words)); }, "not of a f32 tensor of shape [2, 3]");
  test::expect_error([&] { (void)f32.read<std::uint16_t>(); }, "16-bit words are the storage of f16 and bf16");
  test::expect_error([&] { f32.write(std::span<const float>(f.data(), 4), 3); },
                     "writing elements [3, 7) of a f32 tensor of shape [2, 3] (6 elements)");
  test::expect_error([&] { (void)f32.read<float>(5, 2); }, "reading elements [5, 7) of a f32 tensor");
  test::expect_error([&] { (void)f32.read<float>(-1, 1); }, "reading elements [-1, 0)");
  test::expect_error([&] { (void)f32.read<float>(7); }, "reading elements [7, end)");
  test::expect_error([&] { f32.write(std::span<const float>(f.data(), 5)); },
                     "writing 5 float values into a f32 tensor of shape [2, 3] (6 elements)");
}

// Without a seed, a context makes the same sequence of tensors on every run; each call differs.
TEST_P(DeviceBuffers, RandomIsDeterministicPerContext) {
  Context a(GetParam()), b(GetParam());
  const auto a1 = a.random({64}, DType::f32).read<float>(), a2 = a.random({64}, DType::f32).read<float>();
  const auto b1 = b.random({64}, DType::f32).read<float>();
  EXPECT_EQ(a1, b1);
  EXPECT_NE(a1, a2);
  a.seed(1);
  EXPECT_EQ(a.random({64}, DType::f32).read<float>(), a1);
  EXPECT_EQ(a.random({64}, DType::f32, 42).read<float>(), b.random({64}, DType::f32, 42).read<float>());
  for (float x : a1) {
    EXPECT_GE(x, -1.0f);
    EXPECT_LT(x, 1.0f);
  }
}

// fill_uniform: the same bytes on every device as on the CPU, across the slices it is made in,
// and each element what the stated formula gives.
TEST_P(DeviceBuffers, FillUniformIsTheSameOnEveryDeviceAndFollowsItsFormula) {
  Context ctx(GetParam()), cpu("cpu");
  const std::int64_t n = (std::int64_t{1} << 22) + 7;  // past the first slice, not a multiple of 4
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    const float lo = t == DType::i32 ? -100.0f : -0.5f, hi = t == DType::i32 ? 100.0f : 2.0f;
    Tensor here = ctx.empty({n}, t), there = cpu.empty({n}, t);
    fill_uniform(here, 0x123456789abcdefull, lo, hi);
    fill_uniform(there, 0x123456789abcdefull, lo, hi);
    const auto got = here.read<double>();
    EXPECT_TRUE(here.read_bytes() == there.read_bytes()) << to_string(t);
    for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{3}, std::int64_t{4}, std::int64_t{5},
                           (std::int64_t{1} << 22) - 1, std::int64_t{1} << 22, n - 1}) {
      const auto block = static_cast<std::uint64_t>(i) / 4;
      const ejk_u32x4 r = ejk_philox4x32_10(ejk_make4(static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                                                      0x66696c6cu, 0),
                                            0x89abcdefu, 0x01234567u);
      const std::uint32_t words[4] = {r.x, r.y, r.z, r.w};
      volatile float scaled = (hi - lo) * (static_cast<float>(words[i % 4] >> 8) * 0x1p-24f);  // not fused with the add
      const float x = scaled + lo;
      const double want = t == DType::i32 ? std::floor(static_cast<double>(x)) : round_to(t, x);
      EXPECT_EQ(got[static_cast<std::size_t>(i)], want) << to_string(t) << " element " << i;
    }
    double sum = 0;
    for (double v : got) {
      ASSERT_GE(v, lo) << to_string(t);
      ASSERT_LE(v, hi) << to_string(t);  // f16/bf16 rounding may reach hi itself
      sum += v;
    }
    EXPECT_NEAR(sum / static_cast<double>(n), (lo + hi) / 2 - (t == DType::i32 ? 0.5 : 0.0), 0.01) << to_string(t);
  }
  test::expect_error([&] { fill_uniform(ctx.empty({4}, DType::f32), 1, 1.0f, -1.0f); }, "fill_uniform of a tensor of shape [4]");
}

// A backend's own fill (kernels/common/fill.cl, fill.comp) against the host's at the edges of
// each format: f16 subnormals and overflow to infinity, bf16 at the top of its range, i32
// saturation; ranges that start and end inside a block of four, with the bytes around them
// left as they were.
TEST_P(DeviceBuffers, DeviceFillWritesTheHostsBytesAtTheEdgesOfEachFormat) {
  Context ctx(GetParam()), cpu("cpu");
  struct Case {
    DType t;
    float lo, hi;
  };
  const Case cases[] = {{DType::f16, -2e-4f, 2e-4f},     {DType::f16, -7e4f, 7e4f}, {DType::f16, -1.0f, 1.0f},
                        {DType::bf16, -1.5e38f, 1.5e38f}, {DType::bf16, 0.0f, 1e-3f}, {DType::i32, -3e9f, 3e9f},
                        {DType::i32, -5.0f, 5.0f},        {DType::f32, -1e3f, 1e-3f}};
  const std::int64_t n = 4099;
  const std::pair<std::int64_t, std::int64_t> ranges[] = {{0, n}, {1, n - 1}, {3, 2}, {5, 4000}, {2, 1}, {4, 8}};
  for (const Case& c : cases)
    for (const auto& [first, count] : ranges) {
      Tensor here = ctx.empty({n}, c.t), there = cpu.empty({n}, c.t);
      const std::vector<std::byte> before(here.bytes(), std::byte{0x5a});
      here.write_bytes(before);
      there.write_bytes(before);
      here.device().fill_uniform(here.buffer(), c.t, first, count, 0xfeedf00d12345ull, c.lo, c.hi);
      there.device().fill_uniform(there.buffer(), c.t, first, count, 0xfeedf00d12345ull, c.lo, c.hi);
      const auto got = here.read_bytes(), want = there.read_bytes();
      EXPECT_TRUE(got == want) << to_string(c.t) << " [" << c.lo << ", " << c.hi << ") elements " << first << " + " << count;
      const auto size = static_cast<std::int64_t>(dtype_size(c.t));
      for (std::int64_t b = 0; b < static_cast<std::int64_t>(got.size()); ++b) {
        if (b < first * size || b >= (first + count) * size) {
          ASSERT_EQ(got[static_cast<std::size_t>(b)], std::byte{0x5a}) << b;
        }
      }
    }
}

// Device::difference reduced on the device (kernels/common/difference.cl, .comp) against the
// host's: the largest error and magnitude, and the first bad element (NaN, infinity, a wrong
// infinity), in every dtype, with and without an expected array.
TEST_P(DeviceBuffers, DeviceDifferenceAgreesWithTheHost) {
  Context ctx(GetParam()), cpu("cpu");
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::int64_t n = 1001;  // odd: the last 16-bit element is half a word
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    std::vector<double> want(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] = static_cast<double>((i * 37) % 201) - 100.0;
    struct Case {
      std::string name;
      std::vector<std::pair<std::int64_t, double>> got_at, want_at;
      bool with_want = true;
    };
    std::vector<Case> cases = {{"equal", {}, {}},
                               {"one off", {{n - 1, 777.0}}, {}},
                               {"off at both ends", {{0, -300.0}, {n - 2, 250.0}}, {}}};
    if (t != DType::i32) {
      cases.push_back({"nan late and early", {{900, nan}, {123, nan}}, {}});
      cases.push_back({"inf where finite", {{5, inf}}, {}});
      cases.push_back({"same infinity", {{9, -inf}}, {{9, -inf}}});
      cases.push_back({"other infinity", {{9, inf}}, {{9, -inf}}});
      cases.push_back({"finite where infinite", {}, {{400, inf}}});
      cases.push_back({"alone, finite", {}, {}, false});
      cases.push_back({"alone, inf", {{999, -inf}}, {}, false});
    }
    for (const Case& c : cases) {
      std::vector<double> g = want, w = want;
      for (auto [i, v] : c.got_at) g[static_cast<std::size_t>(i)] = v;
      for (auto [i, v] : c.want_at) w[static_cast<std::size_t>(i)] = v;
      const Tensor gd = ctx.from({n}, t, g), wd = ctx.from({n}, t, w), gh = cpu.from({n}, t, g), wh = cpu.from({n}, t, w);
      const Difference got = ctx.device().difference(gd.buffer(), c.with_want ? &wd.buffer() : nullptr, t, n);
      const Difference host = cpu.device().difference(gh.buffer(), c.with_want ? &wh.buffer() : nullptr, t, n);
      EXPECT_EQ(got.bad, host.bad) << to_string(t) << " " << c.name;
      EXPECT_NEAR(got.err, host.err, 1e-6 * std::max(1.0, host.err)) << to_string(t) << " " << c.name;
      EXPECT_NEAR(got.scale, host.scale, 1e-6 * std::max(1.0, host.scale)) << to_string(t) << " " << c.name;
    }
    // The host's own figures, so the comparison above cannot pass by both being wrong.
    std::vector<double> g = want;
    g[17] += 3;
    const Difference d = cpu.device().difference(cpu.from({n}, t, g).buffer(), &cpu.from({n}, t, want).buffer(), t, n);
    EXPECT_EQ(d.bad, -1);
    EXPECT_EQ(d.err, 3.0) << to_string(t);
    EXPECT_EQ(d.scale, 100.0) << to_string(t);
  }
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

TEST_P(DeviceBuffers, LargeUnalignedAndOddCopiesAreByteExact) {
  Context ctx(GetParam());
  Device& dev = ctx.device();
  test::expect_copies_byte_exact(
      dev, [&](const Buffer& s, std::size_t so, Buffer& d, std::size_t dof, std::size_t n) { dev.copy(s, so, d, dof, n); },
      GetParam());
}

// Copies on the transfer queue keep the order their fences give: an upload after a compute
// mark lands after the kernels before it read the old bytes, compute ordered after the upload
// sees the new ones, a download after a mark sees what the compute wrote. The buffers are large
// enough that a missing order shows.
TEST_P(DeviceBuffers, TransfersBesideTheComputeKeepTheirFencesOrder) {
  Context ctx(GetParam());
  Device& dev = ctx.device();
  const Backend backend = dev.info().backend;
  EXPECT_EQ(dev.has_transfer_queue(), backend != Backend::cpu);
  constexpr std::int64_t n = std::int64_t{1} << 21;  // f32 elements: 8 MiB
  constexpr std::size_t bytes = n * 4;
  const auto up = dev.allocate_host(bytes), down = dev.allocate_host(bytes);
  ASSERT_EQ(up->bytes(), bytes);
  EXPECT_EQ(up->pinned(), dev.has_transfer_queue());
  for (std::size_t i = 0; i < bytes; ++i) up->data()[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
  const std::vector<std::byte> sent(up->data(), up->data() + bytes);
  std::fill(down->data(), down->data() + bytes, std::byte{0});

  Tensor a = ctx.random({n}, DType::f32), b = ctx.empty({n}, DType::f32), c = ctx.empty({n}, DType::f32);
  const std::vector<std::byte> old = a.read_bytes();
  dev.copy(a.buffer(), b.buffer(), bytes);
  const FencePtr upload = dev.upload(*up, 0, a.buffer(), 0, bytes, dev.mark());
  dev.order_after(upload);
  dev.copy(a.buffer(), c.buffer(), bytes);
  const FencePtr download = dev.download(c.buffer(), 0, *down, 0, bytes, dev.mark());
  if (download) {
    download->wait();
    EXPECT_TRUE(download->reached());
  }
  EXPECT_TRUE(std::equal(sent.begin(), sent.end(), down->data())) << "the download, or the compute before it, ran early";
  EXPECT_EQ(b.read_bytes(), old) << "the upload overwrote what the compute before its fence read";
  EXPECT_EQ(c.read_bytes(), sent) << "the compute ordered after the upload ran before it";

  // Offsets on both sides; the transfer queue runs its copies in the order they were queued.
  std::fill(down->data(), down->data() + 256, std::byte{0});
  dev.download(c.buffer(), 12, *down, 100, 64);
  const FencePtr last = dev.download(c.buffer(), 200, *down, 164, 20);
  if (last) last->wait();
  EXPECT_TRUE(std::equal(sent.begin() + 12, sent.begin() + 76, down->data() + 100));
  EXPECT_TRUE(std::equal(sent.begin() + 200, sent.begin() + 220, down->data() + 164));
  EXPECT_EQ(down->data()[99], std::byte{0});
  dev.synchronize();

  EXPECT_THROW(dev.upload(*up, bytes - 4, a.buffer(), 0, 8), InvalidArgument);
  EXPECT_THROW(dev.download(a.buffer(), bytes - 4, *down, 0, 8), InvalidArgument);
  EXPECT_THROW(dev.download(a.buffer(), 0, *down, bytes, 1), InvalidArgument);
}

TEST_P(DeviceBuffers, TimingIsPositive) {
  Context ctx(GetParam());
  Tensor a = ctx.random({256, 256}, DType::f32);
  double ns = ctx.device().time_ns([&] { matmul(ctx, a, a); });
  EXPECT_GT(ns, 0.0);
}

TEST_P(DeviceBuffers, PassesAreTimedLaunchByLaunch) {
  Context ctx(GetParam());
  Tensor a = ctx.random({256, 256}, DType::f32);
  matmul(ctx, a, a);  // selection and compilation before the timing
  const auto passes = ctx.device().time_passes([&] {
    matmul(ctx, a, a);
    matmul(ctx, a, a);
  });
  const Backend b = ctx.device().info().backend;
  if (b != Backend::opencl && b != Backend::vulkan) {
    ASSERT_EQ(passes.size(), 1u);
    EXPECT_EQ(passes[0].name, "(all)");
    EXPECT_GT(passes[0].ns, 0.0);
    return;
  }
  // The same launches for each of the two products, named after their kernels (OpenCL's
  // matmul: xgemm; Vulkan's: its module).
  ASSERT_GE(passes.size(), 2u);
  ASSERT_EQ(passes.size() % 2, 0u);
  double total = 0;
  for (std::size_t i = 0; i < passes.size(); ++i) {
    EXPECT_FALSE(passes[i].name.empty());
    EXPECT_NE(passes[i].name, "(all)");
    EXPECT_EQ(passes[i].name, passes[(i + passes.size() / 2) % passes.size()].name);
    EXPECT_GE(passes[i].ns, 0.0);
    total += passes[i].ns;
  }
  EXPECT_GT(total, 0.0);
}

INSTANTIATE_TEST_SUITE_P(All, DeviceBuffers, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
