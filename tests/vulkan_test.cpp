// The Vulkan backend: device info, pipelines, timestamps, limits, transfer ordering, the
// validation layer (core and synchronization), and the cooperative-matrix matmul where a device
// offers it. A listener fails whichever test was running when the validation layer reported
// something, so every test in this program runs under validation (ctest sets
// EJK_VULKAN_VALIDATION=1).
#ifdef EJK_HAVE_VULKAN
#include <map>
#include <random>
#include <set>

#include "backends/vulkan/vk_util.hpp"
#include "backends/vulkan/vulkan_device.hpp"
#include "common/vulkan_fragment_rows.hpp"
#include "core/embedded.hpp"
#include "matmul/matmul.hpp"
#include "support.hpp"
#include "vulkan_validation.hpp"

namespace ejk {
namespace {

[[maybe_unused]] const bool listener_installed = [] {
  test::install_vulkan_validation_listener();
  return true;
}();

std::vector<double> reference(const Invocation& inv, const Tensor& a, const Tensor& b, const Tensor& c) {
  return kernels::matmul::MatmulKernel().reference(inv, {a.read(), b.read(), c.read()})[0];
}

double tolerance(const Invocation& inv) { return kernels::matmul::MatmulKernel().tolerance(inv); }

struct Case {
  std::int64_t batch, m, n, k;
  bool ta, tb;
  double alpha, beta;
};

Invocation invocation_of(const Case& c, DType t) {
  auto shape = [&](std::int64_t r, std::int64_t col) { return c.batch > 1 ? Shape{c.batch, r, col} : Shape{r, col}; };
  return kernels::matmul::invocation({c.ta ? shape(c.k, c.m) : shape(c.m, c.k), t}, {c.tb ? shape(c.n, c.k) : shape(c.k, c.n), t},
                                     {shape(c.m, c.n), t}, c.ta, c.tb, c.alpha, c.beta);
}

// Runs one case with `config` and returns the relative error against the reference.
double run_case(Context& ctx, DType t, const Case& c, const Config& config) {
  Invocation inv = invocation_of(c, t);
  Tensor a = ctx.random(inv.args[0].shape, t), b = ctx.random(inv.args[1].shape, t), out = ctx.random(inv.args[2].shape, t);
  auto want = reference(inv, a, b, out);
  matmul(ctx, a, b, out, {.trans_a = c.ta, .trans_b = c.tb, .alpha = c.alpha, .beta = c.beta, .config = config});
  return test::relative_error(out.read(), want);
}

const Config small_config{{"variant", std::string("scalar")}, {"tile_m", 32}, {"tile_n", 32}, {"tile_k", 8},
                          {"wpt_m", 2}, {"wpt_n", 2}, {"vec", 1}, {"prefetch", 1}};

class Vulkan : public ::testing::TestWithParam<std::string> {
 protected:
  vulkan::VulkanDevice& device() { return vulkan::vulkan_device(*open_device(GetParam())); }
  int index() { return device().info().index; }
};

TEST_P(Vulkan, InfoIsFilled) {
  const DeviceInfo& d = device().info();
  EXPECT_EQ(d.api_version.rfind("Vulkan 1.", 0), 0u) << d.api_version;
  EXPECT_FALSE(d.vendor.empty());
  EXPECT_FALSE(d.driver.empty());
  EXPECT_FALSE(d.architecture.empty());
  EXPECT_GT(d.compute_units, 0u);
  EXPECT_GE(d.local_mem, 16384u) << "Vulkan guarantees 16 KiB of shared memory";
  EXPECT_GE(d.max_workgroup_size, 128u);
  EXPECT_GE(d.max_buffer, 1u << 27);
  EXPECT_GT(d.subgroup_size, 0u);
  EXPECT_EQ(d.fp16, device().physical().float16 && device().physical().storage16);
  if (!d.coopmat.empty()) {
    EXPECT_TRUE(device().physical().coopmat_nv) << "shapes listed without the extension";
  }
  for (const auto& s : d.coopmat) EXPECT_TRUE(s.m && s.n && s.k) << d.id();
}

TEST_P(Vulkan, KernelVersionCoversItsShaders) {
  Invocation inv = invocation_of({1, 8, 8, 8, false, false, 1, 0}, DType::f32);
  const auto& impl = Registry::global().implementation(inv, device().info());
  EXPECT_EQ(impl.backend(), Backend::vulkan);
  ASSERT_FALSE(impl.sources().empty());
  for (const auto& key : impl.sources()) EXPECT_GT(detail::embedded(key).size, 0u) << key;
  EXPECT_EQ(Registry::global().version(impl).size(), 16u);
}

// A released scratch buffer answers the next request it holds without wasting more than half
// (dispatches run in submission order, each after a barrier on everything before it, so the next
// run may reuse it); buffers held at once are distinct, and a request it cannot hold gets another.
TEST_P(Vulkan, ScratchBuffersAreReusedOnceReleased) {
  auto& d = device();
  auto allocation = [](const Buffer& b) { return dynamic_cast<const vulkan::VulkanBuffer&>(b).allocation().get(); };
  const vulkan::Allocation* first = nullptr;
  {
    auto a = d.scratch(1 << 20);
    auto b = d.scratch(1 << 20);
    EXPECT_NE(allocation(*a), allocation(*b));
    EXPECT_GE(a->bytes(), std::size_t{1} << 20);
    first = allocation(*a);
  }
  auto again = d.scratch((1 << 20) - 100);
  auto other = d.scratch((1 << 20) - 100);
  const std::set<const vulkan::Allocation*> reused{allocation(*again), allocation(*other)};
  EXPECT_EQ(reused.count(first), 1u);
  auto larger = d.scratch(3 << 20);
  EXPECT_EQ(reused.count(allocation(*larger)), 0u);
  EXPECT_GE(larger->bytes(), std::size_t{3} << 20);
}

// The path discrete GPUs take: device-local tensors, uploads and downloads through staging
// buffers recorded in the stream.
TEST_P(Vulkan, StagingTransfersKeepTheirOrder) {
  auto dev = std::make_shared<vulkan::VulkanDevice>(index(), vulkan::DeviceOptions{.staging = true});
  Context ctx(dev);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32}) {
    Tensor a = ctx.random({3, 37}, t);
    Tensor b = ctx.empty({3, 37}, t);
    dev->copy(a.buffer(), b.buffer(), a.bytes());
    EXPECT_EQ(a.read(), b.read()) << to_string(t);
  }
  Tensor a = ctx.random({33, 20}, DType::f32), b = ctx.random({20, 17}, DType::f32);
  Tensor c1 = ctx.empty({33, 17}, DType::f32), c2 = ctx.empty({33, 17}, DType::f32);
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c1.spec(), false, false, 1, 0);
  auto want1 = reference(inv, a, b, c1);
  matmul(ctx, a, b, c1, {.config = small_config});
  std::vector<double> fresh(a.numel());
  std::mt19937 rng(5);
  for (auto& v : fresh) v = std::uniform_real_distribution<double>(-2, 2)(rng);
  a.write(fresh);  // queued behind the first product, ahead of the second
  auto want2 = reference(inv, a, b, c2);
  matmul(ctx, a, b, c2, {.config = small_config});
  EXPECT_LE(test::relative_error(c1.read(), want1), 1e-5);
  EXPECT_LE(test::relative_error(c2.read(), want2), 1e-5);
  const float patch[2] = {-1.f, -2.f};
  dev->write(c1.buffer(), 5 * sizeof(float), patch, sizeof patch);
  float back[3];
  dev->read(c1.buffer(), 4 * sizeof(float), back, sizeof back);
  EXPECT_EQ(back[0], static_cast<float>(c1.read()[4]));
  EXPECT_EQ(back[1], -1.f);
  EXPECT_EQ(back[2], -2.f);
  double ns = dev->time_ns([&] { matmul(ctx, a, b, c2, {.config = small_config}); });
  EXPECT_GT(ns, 0.0);
}

// Each copy path on its own, byte-exact; the shader path dispatches kernels/common/copy.comp
// (counted in the pipeline statistics) and the transfer path never does.
TEST_P(Vulkan, CopyPathsAreByteExact) {
  auto dev = std::make_shared<vulkan::VulkanDevice>(index());
  for (auto [path, name] : {std::pair{vulkan::CopyPath::transfer, "transfer"}, std::pair{vulkan::CopyPath::shader, "shader"},
                            std::pair{vulkan::CopyPath::automatic, "automatic"}}) {
    const vulkan::PipelineStats before = dev->pipeline_stats();
    test::expect_copies_byte_exact(
        *dev,
        [&, path = path](const Buffer& s, std::size_t so, Buffer& d, std::size_t dof, std::size_t n) {
          dev->copy_by(path, s, so, d, dof, n);
        },
        GetParam() + " " + name);
    const vulkan::PipelineStats after = dev->pipeline_stats();
    const std::uint64_t dispatched = after.created + after.hits - before.created - before.hits;
    if (path == vulkan::CopyPath::transfer) {
      EXPECT_EQ(dispatched, 0u);
    } else if (path == vulkan::CopyPath::shader) {
      // Seven of the cases have a 16-byte body (offsets congruent modulo 16, 16 bytes or more).
      EXPECT_GE(dispatched, 7u);
    }
  }
  // A device opened with the shader path takes it for copy() of any size with a vector body.
  auto shader = std::make_shared<vulkan::VulkanDevice>(index(), vulkan::DeviceOptions{.copy = vulkan::CopyPath::shader});
  auto a = shader->allocate(64), b = shader->allocate(64);
  const std::uint64_t before = shader->pipeline_stats().created;
  shader->copy(*a, *b, 64);
  EXPECT_EQ(shader->pipeline_stats().created, before + 1);
}

TEST(VulkanCopyPath, EnvironmentPicksThePathAndRejectsOthersByName) {
  const test::ScopedEnv restore("EJK_VULKAN_COPY");
  ::unsetenv("EJK_VULKAN_COPY");
  EXPECT_EQ(vulkan::copy_path_from_env(), vulkan::CopyPath::automatic);
  ::setenv("EJK_VULKAN_COPY", "transfer", 1);
  EXPECT_EQ(vulkan::copy_path_from_env(), vulkan::CopyPath::transfer);
  ::setenv("EJK_VULKAN_COPY", "shader", 1);
  EXPECT_EQ(vulkan::copy_path_from_env(), vulkan::CopyPath::shader);
  ::setenv("EJK_VULKAN_COPY", "auto", 1);
  EXPECT_EQ(vulkan::copy_path_from_env(), vulkan::CopyPath::automatic);
  ::setenv("EJK_VULKAN_COPY", "dma", 1);
  test::expect_error([] { vulkan::copy_path_from_env(); }, "EJK_VULKAN_COPY=dma");
}

TEST_P(Vulkan, PipelinesAreCachedPerShaderAndSpecialization) {
  Context ctx(std::make_shared<vulkan::VulkanDevice>(index()));
  auto& dev = vulkan::vulkan_device(ctx.device());
  EXPECT_EQ(dev.pipeline_stats().created, 0u);
  Tensor a = ctx.random({40, 24}, DType::f32), b = ctx.random({24, 56}, DType::f32);
  EXPECT_EQ(dev.pipeline_stats().created, 1u);  // the device's fill
  // Counted from here: matmul's pipelines.
  const vulkan::PipelineStats base = dev.pipeline_stats();
  auto stats = [&] {
    vulkan::PipelineStats s = dev.pipeline_stats();
    s.created -= base.created;
    s.hits -= base.hits;
    return s;
  };
  matmul(ctx, a, b, {.config = small_config});
  EXPECT_EQ(stats().created, 1u);
  EXPECT_EQ(stats().hits, 0u);
  matmul(ctx, a, b, {.alpha = 3.0, .config = small_config});  // push constants only: same pipeline
  EXPECT_EQ(stats().created, 1u);
  EXPECT_EQ(stats().hits, 1u);
  Config other = small_config;
  other.set("tile_k", 16);
  matmul(ctx, a, b, {.config = other});
  EXPECT_EQ(stats().created, 2u);
  matmul(ctx, a, b, {.trans_a = false, .config = other});
  EXPECT_EQ(stats().created, 2u);
  EXPECT_EQ(stats().hits, 2u);
  if (dev.physical().storage16) {
    Tensor ah = ctx.random({40, 24}, DType::f16), bh = ctx.random({24, 56}, DType::f16);  // the fill's pipeline again
    EXPECT_EQ(stats().created, 2u);
    matmul(ctx, ah, bh, {.config = other});  // another module
    EXPECT_EQ(stats().created, 3u);
  }
}

// Each pipeline's cache data, kept in the cache folder, seeds the same pipeline in another
// process (a second device object stands in for it); results are unchanged.
TEST_P(Vulkan, PipelineCacheDataIsKeptAcrossProcesses) {
  test::TempDir dir;
  setenv("EJK_CACHE_DIR", dir.path.c_str(), 1);
  setenv("EJK_PROGRAM_CACHE", "1", 1);
  Context first(std::make_shared<vulkan::VulkanDevice>(index())), second(std::make_shared<vulkan::VulkanDevice>(index()));
  unsetenv("EJK_PROGRAM_CACHE");
  unsetenv("EJK_CACHE_DIR");
  auto product = [&](Context& ctx) {
    Tensor a = ctx.from({40, 24}, DType::f32, std::vector<double>(40 * 24, 0.5));
    Tensor b = ctx.from({24, 56}, DType::f32, std::vector<double>(24 * 56, 0.25));
    return matmul(ctx, a, b, {.config = small_config}).read();
  };
  const auto want = product(first);
  auto& one = vulkan::vulkan_device(first.device());
  EXPECT_EQ(one.pipeline_stats().created, 1u);
  EXPECT_EQ(one.pipeline_stats().loaded, 0u);
  std::size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
  EXPECT_EQ(product(second), want);
  EXPECT_EQ(vulkan::vulkan_device(second.device()).pipeline_stats().loaded, 1u);
}

TEST_P(Vulkan, TimestampsArePositive) {
  auto& dev = device();
  Context ctx(open_device(GetParam()));
  Tensor a = ctx.random({128, 128}, DType::f32);
  Tensor c = ctx.empty({128, 128}, DType::f32);
  double ns = dev.time_ns([&] { matmul(ctx, a, a, c, {.config = small_config}); });
  EXPECT_GT(ns, 0.0);
  EXPECT_TRUE(std::isfinite(ns));
  EXPECT_THROW(dev.time_ns([&] { dev.time_ns([] {}); }), InvalidArgument);
  // The stream still works after the rejected nested call.
  double again = dev.time_ns([&] { matmul(ctx, a, a, c, {.config = small_config}); });
  EXPECT_GT(again, 0.0);
}

TEST_P(Vulkan, BufferOverTheLimitIsAResourceError) {
  auto& dev = device();
  const std::uint64_t too_big = dev.info().max_buffer + 1;
  try {
    dev.allocate(too_big);
    FAIL() << "expected ResourceError";
  } catch (const ResourceError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(too_big)), std::string::npos) << e.what();
  }
  EXPECT_NE(dev.allocate(dev.info().max_buffer / 4), nullptr);
}

TEST_P(Vulkan, LaunchesBeyondTheLimitsAreResourceErrors) {
  auto& dev = device();
  Context ctx(open_device(GetParam()));
  Tensor t = ctx.empty({64}, DType::f32);
  const auto& lim = dev.physical().limits;
  vulkan::Launch l;
  l.spirv = "matmul/matmul.spv";
  l.buffers = {&t.buffer(), &t.buffer(), &t.buffer()};
  l.local_size = {lim.maxComputeWorkGroupSize[0] + 1, 1, 1};
  EXPECT_THROW(dev.dispatch(l), ResourceError);
  l.local_size = {1, 1, 1};
  l.shared_bytes = lim.maxComputeSharedMemorySize + 4;
  EXPECT_THROW(dev.dispatch(l), ResourceError);
  l.shared_bytes = 0;
  l.groups = {1, 1, lim.maxComputeWorkGroupCount[2] + 1};
  EXPECT_THROW(dev.dispatch(l), ResourceError);
  l.groups = {1, 1, 1};
  std::vector<std::byte> push(lim.maxPushConstantsSize + 4);
  l.push = push;
  EXPECT_THROW(dev.dispatch(l), ResourceError);
}

TEST_P(Vulkan, WritesReadsAndDispatchesStayInOrder) {
  Context ctx(open_device(GetParam()));
  Tensor a = ctx.random({33, 20}, DType::f32), b = ctx.random({20, 17}, DType::f32);
  Tensor c1 = ctx.empty({33, 17}, DType::f32), c2 = ctx.empty({33, 17}, DType::f32);
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c1.spec(), false, false, 1, 0);
  auto want1 = reference(inv, a, b, c1);
  matmul(ctx, a, b, c1, {.config = small_config});
  // Overwrite a while the first product may still be queued; it must have seen the old values.
  std::vector<double> fresh(a.numel());
  std::mt19937 rng(3);
  for (auto& v : fresh) v = std::uniform_real_distribution<double>(-2, 2)(rng);
  a.write(fresh);
  auto want2 = reference(inv, a, b, c2);
  matmul(ctx, a, b, c2, {.config = small_config});
  EXPECT_LE(test::relative_error(c1.read(), want1), 1e-5);
  EXPECT_LE(test::relative_error(c2.read(), want2), 1e-5);

  // Partial writes and reads at an offset.
  Tensor t = ctx.from({8}, DType::f32, std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7});
  const float patch[2] = {-1.f, -2.f};
  ctx.device().write(t.buffer(), 3 * sizeof(float), patch, sizeof patch);
  float back[3];
  ctx.device().read(t.buffer(), 2 * sizeof(float), back, sizeof back);
  EXPECT_EQ(back[0], 2.f);
  EXPECT_EQ(back[1], -1.f);
  EXPECT_EQ(back[2], -2.f);
  EXPECT_THROW(ctx.device().read(t.buffer(), 7 * sizeof(float), back, sizeof back), InvalidArgument);
}

TEST_P(Vulkan, TensorsDroppedBeforeTheirWorkFinishesAreSafe) {
  Context ctx(open_device(GetParam()));
  Tensor keep;
  for (int i = 0; i < 20; ++i) {
    Tensor a = ctx.random({64, 64}, DType::f32);
    keep = matmul(ctx, a, a, {.config = small_config});  // a is released before the work runs
  }
  ctx.device().synchronize();
  EXPECT_EQ(keep.read().size(), 64u * 64u);
}

TEST_P(Vulkan, DescriptorPoolsWhereThereAreNoPushDescriptors) {
  auto dev = std::make_shared<vulkan::VulkanDevice>(index(), vulkan::DeviceOptions{.push_descriptors = false});
  EXPECT_FALSE(dev->uses_push_descriptors());
  Context ctx(dev);
  Tensor a = ctx.random({24, 16}, DType::f32), b = ctx.random({16, 40}, DType::f32);
  Tensor c = ctx.random({24, 40}, DType::f32);
  // More dispatches than one batch and one descriptor pool hold; each adds a * b to c.
  const int n = 150;
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 1);
  std::vector<double> want = c.read();
  auto ab = reference(kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 0), a, b, c);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += n * ab[i];
  for (int i = 0; i < n; ++i) matmul(ctx, a, b, c, {.beta = 1.0, .config = small_config});
  EXPECT_LE(test::relative_error(c.read(), want), 1e-4);
}

TEST_P(Vulkan, GridsBeyondTheWorkgroupCountAreSplit) {
  Context ctx(open_device(GetParam()));
  const std::int64_t batch = device().physical().limits.maxComputeWorkGroupCount[2] + 3;
  if (batch > (1 << 20)) GTEST_SKIP() << "the device's z count is too large to exceed in a test";
  Tensor a = ctx.random({batch, 2, 3}, DType::f32), b = ctx.random({3, 2}, DType::f32);
  Tensor c = ctx.empty({batch, 2, 2}, DType::f32);
  // The smallest workgroup the space allows: tens of thousands of them run here.
  const Config tiny{{"variant", std::string("scalar")}, {"tile_m", 16}, {"tile_n", 32}, {"tile_k", 8},
                    {"wpt_m", 4}, {"wpt_n", 4}, {"vec", 1}, {"prefetch", 0}};
  matmul(ctx, a, b, c, {.config = tiny});
  Invocation inv = kernels::matmul::invocation(a.spec(), b.spec(), c.spec(), false, false, 1, 0);
  EXPECT_LE(test::relative_error(c.read(), reference(inv, a, b, c)), 1e-5);
}

TEST_P(Vulkan, CoopmatMatchesTheReference) {
  Context ctx(open_device(GetParam()));
  const auto& impl = Registry::global().implementation(invocation_of({1, 64, 64, 64, false, false, 1, 0}, DType::f16), device().info());
  const Case cases[] = {
      {1, 256, 256, 256, false, false, 1, 0}, {1, 128, 512, 64, true, false, 1, 0},  {2, 192, 320, 96, false, true, 1, 0},
      {1, 96, 64, 128, true, true, 0.5, 0},   {1, 128, 128, 128, false, false, 1, 1}, {1, 67, 45, 83, false, false, 1, 0},
      {3, 17, 129, 33, true, false, 1, 0.5},  {1, 1, 200, 64, false, false, 1, 0},   {1, 1000, 24, 40, false, true, -1, 0},
  };
  bool any = false;
  for (const auto& c : cases) {
    Invocation inv = invocation_of(c, DType::f16);
    Config h = impl.heuristic(inv, device().info());
    if (h.text("variant") != "coopmat") continue;
    any = true;
    EXPECT_LE(run_case(ctx, DType::f16, c, h), tolerance(inv)) << c.m << "x" << c.n << "x" << c.k << " " << h.canonical();
  }
  if (!any) GTEST_SKIP() << device().info().name << " has no f16 cooperative matrices (or the build lacks the shader)";
  // A slice of the coopmat configs, on an aligned shape and on an odd one.
  for (const Case& c : {Case{1, 128, 256, 64, false, false, 1, 0}, Case{2, 67, 45, 83, false, true, 1, 0.5}}) {
    Invocation inv = invocation_of(c, DType::f16);
    std::vector<Config> configs;
    for (auto& cfg : impl.space(inv, device().info()).enumerate())
      if (cfg.text("variant") == "coopmat") configs.push_back(cfg);
    ASSERT_FALSE(configs.empty());
    std::mt19937 rng(7);
    std::shuffle(configs.begin(), configs.end(), rng);
    configs.resize(std::min<std::size_t>(configs.size(), 24));
    for (const auto& cfg : configs) EXPECT_LE(run_case(ctx, DType::f16, c, cfg), tolerance(inv)) << cfg.canonical();
  }
}

// A probe's output for a layout: element i of invocation l at position(l, i) = 16 r + c.
template <class Position>
std::vector<float> probe_of(std::uint32_t subgroup, Position position) {
  std::vector<float> out(257, -1.f);
  const std::uint32_t elements = 256 / subgroup;
  for (std::uint32_t l = 0; l < subgroup; ++l)
    for (std::uint32_t i = 0; i < elements; ++i) out[position(l, i)] = static_cast<float>(64 * l + i);
  out[256] = static_cast<float>(elements);
  return out;
}

TEST(VulkanFragmentRows, LayoutsOfRowGroupsAreRecognisedAndOthersRefused) {
  using kernels::FragmentRows;
  using kernels::fragment_rows_of;
  // NVIDIA's mma.sync accumulator, two 16x8 halves: rows l / 4 and l / 4 + 8, four invocations a row.
  const auto mma = probe_of(32, [](std::uint32_t l, std::uint32_t i) {
    return (l / 4 + 8 * ((i / 2) % 2)) * 16 + 2 * (l % 4) + i % 2 + 8 * (i / 4);
  });
  EXPECT_EQ(fragment_rows_of(mma, 32), (FragmentRows{4, 0x22002200u, 0}));
  // A column an invocation (RDNA's WMMA accumulator): element i on row 2 i + l / 16, sixteen invocations a row.
  const auto wmma = probe_of(32, [](std::uint32_t l, std::uint32_t i) { return (2 * i + l / 16) * 16 + l % 16; });
  EXPECT_EQ(fragment_rows_of(wmma, 32), (FragmentRows{16, 0x76543210u, 0}));
  // Half a row an invocation with 64 invocations; a row an invocation with 16.
  const auto halves = probe_of(64, [](std::uint32_t l, std::uint32_t i) { return (l / 4) * 16 + (l % 4) * 4 + i; });
  EXPECT_EQ(fragment_rows_of(halves, 64), (FragmentRows{4, 0, 0}));
  const auto whole = probe_of(16, [](std::uint32_t l, std::uint32_t i) { return l * 16 + i; });
  EXPECT_EQ(fragment_rows_of(whole, 16), (FragmentRows{1, 0, 0}));
  // Invocations sharing a row at different elements, rows held by scattered invocations, and
  // malformed output: no row groups.
  const auto shifted = probe_of(32, [](std::uint32_t l, std::uint32_t i) { return (l / 2) * 16 + (l % 2) * 8 + (i + l) % 8; });
  EXPECT_EQ(fragment_rows_of(shifted, 32).lanes, 2u) << "the same rows at the same elements, columns aside";
  const auto mixed = probe_of(32, [](std::uint32_t l, std::uint32_t i) { return ((l * 8 + i) * 37) % 256; });
  EXPECT_EQ(fragment_rows_of(mixed, 32).lanes, 0u);
  const auto apart = probe_of(32, [](std::uint32_t l, std::uint32_t i) { return (l % 16) * 16 + (l / 16) * 8 + i; });
  EXPECT_EQ(fragment_rows_of(apart, 32).lanes, 0u) << "a row on invocations l and l + 16, not an aligned group";
  auto twice = mma;
  twice[5] = twice[6];
  EXPECT_EQ(fragment_rows_of(twice, 32).lanes, 0u);
  auto short_length = mma;
  short_length[256] = 4;
  EXPECT_EQ(fragment_rows_of(short_length, 32).lanes, 0u);
}

// On a device with cooperative matrices the probe runs and, where it finds row groups, reports
// the subgroup's own layout consistently on every call.
TEST_P(Vulkan, FragmentRowsProbeRuns) {
  const auto rows = kernels::fragment_rows(device());
  EXPECT_EQ(kernels::fragment_rows(device()), rows);
  if (!device().info().offers({16, 16, 16, DType::f16, DType::f32})) {
    EXPECT_EQ(rows.lanes, 0u);
    GTEST_SKIP() << device().info().name << " has no 16x16x16 f16 cooperative matrices";
  }
  RecordProperty("fragment_row_lanes", static_cast<int>(rows.lanes));
  if (rows.lanes > 0) {
    EXPECT_LE(rows.lanes, device().info().subgroup_size);
    EXPECT_EQ(rows.lanes & (rows.lanes - 1), 0u);
  }
  if (device().info().vendor.find("NVIDIA") != std::string::npos) {
    EXPECT_EQ(rows.lanes, 4u) << "NVIDIA's fragments spread a row over four invocations";
  }
}

TEST_P(Vulkan, EveryScalarParameterValueRuns) {
  Context ctx(open_device(GetParam()));
  const auto& impl = Registry::global().implementation(invocation_of({1, 8, 8, 8, false, false, 1, 0}, DType::f32), device().info());
  for (DType t : {DType::f32, DType::bf16}) {
    Case c{2, 70, 36, 44, true, false, 1, 0.25};
    Invocation inv = invocation_of(c, t);
    auto configs = impl.space(inv, device().info()).enumerate();
    // One config per value of every parameter, so no value is left untried.
    std::map<std::string, std::set<std::string>> seen;
    std::vector<Config> picked;
    std::mt19937 rng(11);
    std::shuffle(configs.begin(), configs.end(), rng);
    for (const auto& cfg : configs) {
      if (cfg.text("variant") != "scalar") continue;
      bool fresh = false;
      for (const auto& [k, v] : cfg.values()) fresh |= seen[k].insert(to_string(v)).second;
      if (fresh) picked.push_back(cfg);
    }
    for (const auto& cfg : picked) EXPECT_LE(run_case(ctx, t, c, cfg), tolerance(inv)) << to_string(t) << " " << cfg.canonical();
  }
}

TEST_P(Vulkan, ValidationLayerReportsMisuse) {
  if (!vulkan::validation_active()) {
    if (vulkan::validation_requested() && test::in_ci()) FAIL() << "EJK_VULKAN_VALIDATION=1 but the layer is not active";
    GTEST_SKIP() << "the validation layer is not active (EJK_VULKAN_VALIDATION=1 and vulkan-validationlayers)";
  }
  vulkan::ExpectValidationMessages expect;
  auto info = vulkan::make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  info.size = 64;
  info.usage = 0;  // invalid: a buffer needs at least one usage
  VkBuffer buffer = VK_NULL_HANDLE;
  if (vkCreateBuffer(device().handle(), &info, nullptr, &buffer) == VK_SUCCESS) vkDestroyBuffer(device().handle(), buffer, nullptr);
  EXPECT_GT(expect.count(), 0u);
}

// Synchronization validation is on as well: two writes of one buffer with no barrier between
// them (what the backend's command stream must never record) are a reported hazard.
TEST_P(Vulkan, SynchronizationValidationReportsAHazard) {
  if (!vulkan::validation_active()) {
    if (vulkan::validation_requested() && test::in_ci()) FAIL() << "EJK_VULKAN_VALIDATION=1 but the layer is not active";
    GTEST_SKIP() << "the validation layer is not active (EJK_VULKAN_VALIDATION=1 and vulkan-validationlayers)";
  }
  const VkDevice dev = device().handle();
  auto bi = vulkan::make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
  bi.size = 256;
  bi.usage = VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer raw = VK_NULL_HANDLE;
  vulkan::check(vkCreateBuffer(dev, &bi, nullptr, &raw), "vkCreateBuffer");
  const vulkan::OwnedBuffer buffer(dev, raw);
  VkMemoryRequirements req{};
  vkGetBufferMemoryRequirements(dev, raw, &req);
  auto ai = vulkan::make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
  ai.allocationSize = req.size;
  while (!(req.memoryTypeBits & (1u << ai.memoryTypeIndex))) ++ai.memoryTypeIndex;
  VkDeviceMemory mem = VK_NULL_HANDLE;
  vulkan::check(vkAllocateMemory(dev, &ai, nullptr, &mem), "vkAllocateMemory");
  const vulkan::OwnedMemory memory(dev, mem);
  vulkan::check(vkBindBufferMemory(dev, raw, mem, 0), "vkBindBufferMemory");
  auto pi = vulkan::make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
  pi.queueFamilyIndex = device().physical().queue_family;
  VkCommandPool pool_raw = VK_NULL_HANDLE;
  vulkan::check(vkCreateCommandPool(dev, &pi, nullptr, &pool_raw), "vkCreateCommandPool");
  const vulkan::OwnedCommandPool pool(dev, pool_raw);
  auto ci = vulkan::make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
  ci.commandPool = pool_raw;
  ci.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ci.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  vulkan::check(vkAllocateCommandBuffers(dev, &ci, &cmd), "vkAllocateCommandBuffers");
  auto begin = vulkan::make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
  vulkan::check(vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");
  vulkan::ExpectValidationMessages expect;
  vkCmdFillBuffer(cmd, raw, 0, 256, 1u);
  vkCmdFillBuffer(cmd, raw, 0, 256, 2u);
  EXPECT_GT(expect.count(), 0u);
  vulkan::check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
}

// The coopmat variant's space and heuristic on a device description with an H100's relevant caps
// (the shaders themselves need such a device to run).
TEST(VulkanMatmulSpace, CoopmatConfigsFitADeviceThatOffersThem) {
#ifndef EJK_HAVE_COOPMAT
  GTEST_SKIP() << "built without the cooperative-matrix shader";
#endif
  auto devices = test::devices(Backend::vulkan);
  if (devices.empty()) GTEST_SKIP() << "no Vulkan device";
  DeviceInfo dev = open_device(devices.front())->info();
  dev.fp16 = true;
  dev.subgroup_size = 32;
  dev.local_mem = 48 * 1024;
  dev.coopmat = {{16, 16, 16, DType::f16, DType::f32}, {16, 8, 16, DType::f16, DType::f32}, {16, 8, 8, DType::f16, DType::f32},
                 {16, 16, 16, DType::f16, DType::f16}};
  const Case shapes[] = {{1, 4096, 4096, 4096, false, false, 1, 0}, {1, 1, 4096, 4096, false, false, 1, 0},
                         {1, 67, 45, 83, false, true, 1, 0.5},      {4, 1024, 1024, 1024, true, false, 1, 0},
                         {1, 2048, 512, 64, true, true, 1, 0},     {1, 300, 17, 1000, false, false, 1, 0}};
  for (const auto& c : shapes) {
    Invocation inv = invocation_of(c, DType::f16);
    const auto& impl = Registry::global().implementation(inv, dev);
    ParamSpace space = impl.space(inv, dev);
    Config h = impl.heuristic(inv, dev);
    EXPECT_EQ(h.text("variant"), "coopmat") << h.canonical();
    EXPECT_EQ(space.mismatch(h), "") << h.canonical();
    std::size_t coop = 0;
    std::set<std::string> mmas;
    for (const auto& cfg : space.enumerate()) {
      if (cfg.text("variant") != "coopmat") continue;
      ++coop;
      const std::int64_t tm = cfg.get("sg_m") * cfg.get("sg_tile_m"), tn = cfg.get("sg_n") * cfg.get("sg_tile_n");
      const std::int64_t bk = cfg.get("block_k");
      const std::int64_t a = c.ta ? bk * (tm + 8) : tm * (bk + 8), b = c.tb ? tn * (bk + 8) : bk * (tn + 8);
      EXPECT_LE(cfg.get("buffers") * 2 * (a + b), 48 * 1024) << cfg.canonical();
      EXPECT_LE(32 * cfg.get("sg_m") * cfg.get("sg_n"), std::int64_t{dev.max_workgroup_size}) << cfg.canonical();
      EXPECT_EQ(tm * bk / 8 % (32 * cfg.get("sg_m") * cfg.get("sg_n")), 0) << cfg.canonical();
      mmas.insert(cfg.text("mma"));
    }
    EXPECT_GT(coop, 100u) << "coopmat configs for " << c.m << "x" << c.n << "x" << c.k;
    EXPECT_EQ(mmas, (std::set<std::string>{"16x16x16", "16x8x16", "16x8x8"}));
  }
  for (DType t : {DType::f32, DType::bf16}) {
    Invocation inv = invocation_of(shapes[0], t);
    const auto& impl = Registry::global().implementation(inv, dev);
    for (const auto& cfg : impl.space(inv, dev).enumerate()) ASSERT_EQ(cfg.text("variant"), "scalar") << to_string(t);
  }
}

INSTANTIATE_TEST_SUITE_P(All, Vulkan, ::testing::ValuesIn(test::devices(Backend::vulkan)),
                         [](const auto& p) { return test::test_name(p.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Vulkan);

}  // namespace
}  // namespace ejk

#endif  // EJK_HAVE_VULKAN
