// Batched execution with one selection (run_batched) and its split over several devices
// (run_sharded): results equal to per-item calls, one selection per device, and the errors.
#include <algorithm>
#include <map>
#include <random>
#include <regex>

#include "ejk/batched.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t M = 5, K = 7, N = 6;

// A matmul item with beta != 0, so c is read and written (the inout path).
BatchedCall matmul_call() {
  return {.kernel = "matmul",
          .options = {{"trans_a", false}, {"trans_b", false}},
          .scalars = {{"alpha", 1.0}, {"beta", 0.5}},
          .config = std::nullopt};
}

// Executors that neither read nor write the user's cache or profiles.
std::unique_ptr<Executor> isolated(const std::string& device) {
  return std::make_unique<Executor>(open_device(device),
                                    ExecutorOptions{.cache_path = fs::path{}, .profile_dirs = std::vector<fs::path>{}});
}

struct Batch {
  std::vector<std::vector<double>> host;  // a, b, c
  std::vector<Tensor> tensors;
};

Batch random_batch(const std::shared_ptr<Device>& dev, std::int64_t batch, std::uint64_t seed) {
  Batch b;
  const std::vector<Shape> shapes = {{batch, M, K}, {batch, K, N}, {batch, M, N}};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (const auto& s : shapes) {
    std::vector<double> v(static_cast<std::size_t>(numel(s)));
    for (auto& x : v) x = u(rng);
    Tensor t(dev, s, DType::f32);
    t.write(std::span<const double>(v));
    b.host.push_back(t.read());  // rounded to f32
    b.tensors.push_back(t);
  }
  return b;
}

// Item i of a batched host array of `rows` rows.
std::vector<double> row(const std::vector<double>& all, std::int64_t rows, std::int64_t i) {
  const auto n = static_cast<std::int64_t>(all.size()) / rows;
  return {all.begin() + i * n, all.begin() + (i + 1) * n};
}

// c of every item computed by one executor.run per item, on `ex`'s device.
std::vector<double> per_item(Executor& ex, const Batch& b, std::int64_t batch) {
  const Invocation item = item_invocation(matmul_call(), b.tensors);
  std::vector<double> out;
  for (std::int64_t i = 0; i < batch; ++i) {
    std::vector<Tensor> args;
    for (std::size_t a = 0; a < 3; ++a) {
      Tensor t(ex.device_ptr(), item.args[a].shape, DType::f32);
      auto v = row(b.host[a], batch, i);
      t.write(std::span<const double>(v));
      args.push_back(t);
    }
    ex.run(item, args);
    auto c = args[2].read();
    out.insert(out.end(), c.begin(), c.end());
  }
  return out;
}

// Lines the executor logged for selections while `fn` ran (EJK_LOG_SELECTION=all logs every call).
template <class Fn>
int selections_logged(Fn&& fn) {
  ScopedPolicy log({.log = SelectionLog::all});
  ::testing::internal::CaptureStderr();
  fn();
  std::string err = ::testing::internal::GetCapturedStderr();
  int n = 0;
  for (std::size_t p = 0; (p = err.find("ejk: select ", p)) != std::string::npos; ++p) ++n;
  return n;
}

class BatchedOn : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchedOn, EqualsPerItemCallsWithOneSelection) {
  for (std::int64_t batch : {1, 4}) {
    auto ex = isolated(GetParam());
    Batch b = random_batch(ex->device_ptr(), batch, 11 + static_cast<std::uint64_t>(batch));
    Selection sel;
    int logged = selections_logged([&] { sel = run_batched(*ex, matmul_call(), b.tensors); });
    EXPECT_EQ(logged, 1) << "batch " << batch;
    EXPECT_EQ(sel.tier, Tier::heuristic);
    EXPECT_EQ(b.tensors[0].read(), b.host[0]) << "inputs are left as they were";

    auto ref_ex = isolated(GetParam());
    EXPECT_EQ(selections_logged([&] { per_item(*ref_ex, b, batch); }), batch) << "per-item calls select each time";
    // Same device, same config: the same arithmetic, bit for bit.
    EXPECT_EQ(b.tensors[2].read(), per_item(*ref_ex, b, batch)) << "batch " << batch;
  }
}

TEST_P(BatchedOn, OverrideConfigIsUsedForEveryItem) {
  auto ex = isolated(GetParam());
  Batch b = random_batch(ex->device_ptr(), 3, 5);
  const Invocation item = item_invocation(matmul_call(), b.tensors);
  ParamSpace space = Registry::global().implementation(item, ex->device().info()).space(item, ex->device().info());
  auto configs = space.enumerate();
  ASSERT_FALSE(configs.empty());
  BatchedCall call = matmul_call();
  call.config = configs.back();
  Selection sel = run_batched(*ex, call, b.tensors);
  EXPECT_EQ(sel.tier, Tier::override_);
  EXPECT_EQ(sel.config, configs.back());
  auto ref_ex = isolated(GetParam());
  auto want = per_item(*ref_ex, b, 3);
  EXPECT_LT(test::relative_error(b.tensors[2].read(), want), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Devices, BatchedOn, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(Batched, EveryBackendIsPresent) {
  auto ds = test::devices();
  for (const char* want : {"cpu", "opencl:0", "vulkan:0"})
    EXPECT_NE(std::find(ds.begin(), ds.end(), want), ds.end()) << want << " is missing";
}

// Any kernel: the item built from the kernel's recipe sizes, a batch of the kernel's own random
// inputs stacked along a new leading axis (outputs included, so `out` rows that are not staged
// in would show), and every item equal to its own executor call.
TEST(Batched, AnyKernelEqualsPerItemCalls) {
  struct Case {
    std::string kernel;
    std::map<std::string, std::int64_t> sizes;
    nlohmann::json options;
  };
  const std::vector<Case> cases = {
      {"flash_attention", {{"batch", 1}, {"seq", 16}, {"heads", 2}, {"head_dim", 16}}, {{"causal", true}}},
      {"matmul", {{"m", 4}, {"n", 5}, {"k", 6}}, nlohmann::json::object()},
  };
  const std::int64_t batch = 3;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.kernel);
    auto ex = isolated("cpu");
    const Kernel& kernel = Registry::global().kernel(c.kernel);
    const Invocation item = kernel.from_sizes(c.sizes, DType::f32, c.options);
    std::vector<HostArrays> items;
    for (std::int64_t b = 0; b < batch; ++b) items.push_back(kernel.inputs(item, 100 + static_cast<std::uint64_t>(b)));
    std::vector<Tensor> args;
    for (std::size_t i = 0; i < item.args.size(); ++i) {
      Shape shape = item.args[i].shape;
      shape.insert(shape.begin(), batch);
      std::vector<double> all;
      for (const auto& h : items) all.insert(all.end(), h[i].begin(), h[i].end());
      Tensor t(ex->device_ptr(), shape, item.args[i].dtype);
      t.write(std::span<const double>(all));
      args.push_back(t);
    }
    int logged = selections_logged([&] {
      run_batched(*ex, {.kernel = c.kernel, .options = item.options, .scalars = item.scalars, .config = std::nullopt},
                  args);
    });
    EXPECT_EQ(logged, 1);
    const auto defs = kernel.args();
    auto ref = isolated("cpu");
    for (std::int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> one;
      for (std::size_t i = 0; i < item.args.size(); ++i) {
        Tensor t(ref->device_ptr(), item.args[i].shape, item.args[i].dtype);
        t.write(std::span<const double>(items[static_cast<std::size_t>(b)][i]));
        one.push_back(t);
      }
      ref->run(item, one);
      for (std::size_t i = 0; i < item.args.size(); ++i) {
        auto got = row(args[i].read(), batch, b);
        EXPECT_EQ(got, one[i].read()) << defs[i].name << " of item " << b;
      }
    }
  }
}

TEST(Batched, MismatchedLeadingAxesAreRefused) {
  auto ex = isolated("cpu");
  auto dev = ex->device_ptr();
  std::vector<Tensor> args = {Tensor(dev, {3, M, K}, DType::f32), Tensor(dev, {2, K, N}, DType::f32),
                              Tensor(dev, {3, M, N}, DType::f32)};
  test::expect_error([&] { run_batched(*ex, matmul_call(), args); },
                     "argument 1 [2, 7, 6] has leading axis 2 but argument 0 [3, 5, 7] has 3");
  Context cpu("cpu");
  const Context* ctxs[] = {&cpu};
  test::expect_error([&] { run_sharded(ctxs, matmul_call(), args); }, "has leading axis 2");
  args[1] = Tensor(dev, {}, DType::f32);
  test::expect_error([&] { run_batched(*ex, matmul_call(), args); }, "argument 1 [] has no leading batch axis");
  // An item shape the kernel refuses is named by the kernel's own validation.
  args[1] = Tensor(dev, {3, K + 1, N}, DType::f32);
  EXPECT_THROW(run_batched(*ex, matmul_call(), args), InvalidArgument);
}

TEST(Batched, ArgumentsOnAnotherDeviceAreRefused) {
  auto ex = isolated("cpu");
  auto other = open_device("opencl:0");
  std::vector<Tensor> args = {Tensor(other, {2, M, K}, DType::f32), Tensor(other, {2, K, N}, DType::f32),
                              Tensor(other, {2, M, N}, DType::f32)};
  test::expect_error([&] { run_batched(*ex, matmul_call(), args); }, "lives on opencl:0, the executor runs on cpu");
}

// The batch split over every backend of this host, one selection and thread per device.
TEST(Sharded, SplitsTheBatchOverDevicesWithOneSelectionEach) {
  Context cpu("cpu"), cl("opencl:0"), vk("vulkan:0");
  const Context* ctxs[] = {&cpu, &cl, &vk};
  const std::int64_t batch = 5;
  Batch b = random_batch(cpu.device_ptr(), batch, 23);
  std::vector<DeviceShard> shards;
  int logged = selections_logged([&] { shards = run_sharded(ctxs, matmul_call(), b.tensors); });
  EXPECT_EQ(logged, 3);
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(shards[0].device, "cpu");
  EXPECT_EQ(shards[1].device, "opencl:0");
  EXPECT_EQ(shards[2].device, "vulkan:0");
  EXPECT_EQ((std::vector<std::int64_t>{shards[0].begin, shards[1].begin, shards[2].begin}),
            (std::vector<std::int64_t>{0, 2, 4}));
  EXPECT_EQ((std::vector<std::int64_t>{shards[0].count, shards[1].count, shards[2].count}),
            (std::vector<std::int64_t>{2, 2, 1}));
  for (const auto& s : shards) EXPECT_TRUE(s.selection.has_value()) << s.device;

  auto ref = isolated("cpu");
  auto want = per_item(*ref, b, batch);
  EXPECT_LT(test::relative_error(b.tensors[2].read(), want), 1e-5);
  EXPECT_EQ(b.tensors[0].read(), b.host[0]);
}

TEST(Sharded, DevicesBeyondTheBatchGetNothing) {
  Context cpu("cpu"), cl("opencl:0");
  const Context* ctxs[] = {&cpu, &cl};
  Batch b = random_batch(cl.device_ptr(), 1, 31);  // arguments on the second device
  auto shards = run_sharded(ctxs, matmul_call(), b.tensors);
  ASSERT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0].count, 1);
  EXPECT_EQ(shards[1].count, 0);
  EXPECT_FALSE(shards[1].selection.has_value());
  auto ref = isolated("cpu");
  EXPECT_LT(test::relative_error(b.tensors[2].read(), per_item(*ref, b, 1)), 1e-5);
}

TEST(Sharded, AnErrorNamesTheDevice) {
  Context cpu("cpu"), cl("opencl:0");
  const Context* ctxs[] = {&cpu, &cl};
  Batch b = random_batch(cpu.device_ptr(), 2, 7);
  BatchedCall call = matmul_call();
  call.config = Config{};  // an empty config is in no device's space
  try {
    run_sharded(ctxs, call, b.tensors);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(std::regex_search(e.what(), std::regex("^matmul on (cpu|opencl:0): override config"))) << e.what();
  }
  const Context* none[] = {nullptr};
  test::expect_error([&] { run_sharded(none, matmul_call(), b.tensors); }, "context 0 is null");
  Context cpu_again("cpu");
  const Context* twice[] = {&cpu, &cl, &cpu_again};
  test::expect_error([&] { run_sharded(twice, matmul_call(), b.tensors); }, "contexts 0 and 2 both run on cpu");
}

}  // namespace
}  // namespace ejk
