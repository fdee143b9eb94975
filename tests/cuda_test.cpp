// The CUDA backend. Everywhere: the OpenCL C translation and every kernel's programs compiled by
// NVRTC for sm_80 and sm_90a on a compile-only device (NVRTC needs no GPU). On a machine with an
// NVIDIA driver, the device itself (the suite's other tests run every kernel on cuda:N through
// test::devices(), Conformance included).
#ifdef EJK_HAVE_CUDA
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "backends/clc/clc_device.hpp"
#include "backends/cuda/compile_only.hpp"
#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/opencl_c.hpp"
#include "core/embedded.hpp"
#include "block_sparse_attention/block_sparse_attention.hpp"
#include "flash_attention/flash_attention.hpp"
#include "grouped_matmul/grouped_matmul.hpp"
#include "matmul/matmul.hpp"
#include "mla_attention/mla_attention.hpp"
#include "ragged_decode_attention/ragged_decode_attention.hpp"
#include "support.hpp"

namespace ejk {
namespace {

TEST(CudaOpenCLC, QualifiersAndVectorLiteralsAreRewritten) {
  const auto t = cuda::translate_opencl_c(
      "// (a comment with __local and (float4)(1, 2))\n"
      "__kernel void f(__global float* x, __local float* tmp) {\n"
      "  __local float tile[64];\n"
      "  __local float* p = (__local float*)tile;\n"
      "  float4 v = (float4)(1.0f, 2.0f, 3.0f, 4.0f);\n"
      "}\n");
  const std::string code = t.source.substr(cuda::opencl_c_prelude().size());
  EXPECT_EQ(code.find("__global"), std::string::npos) << code;
  EXPECT_EQ(code.find("__local"), std::string::npos) << code;
  EXPECT_NE(code.find("__shared__ float tile[64]"), std::string::npos) << code;
  EXPECT_NE(code.find(" float* p = ( float*)tile"), std::string::npos) << code;
  EXPECT_NE(code.find("ejk_make_float4(1.0f, 2.0f, 3.0f, 4.0f)"), std::string::npos) << code;
  EXPECT_EQ(std::count(t.options.begin(), t.options.end(), "-fmad=false"), 0);
  EXPECT_EQ(cuda::translate_opencl_c("#pragma OPENCL FP_CONTRACT OFF\n").options.back(), "-fmad=false");
  EXPECT_EQ(cuda::translate_options(" -DA=1  -cl-mad-enable -DB=x"), (std::vector<std::string>{"-DA=1", "-DB=x"}));
  EXPECT_THROW(cuda::translate_options("-cl-kernel-arg-info -Ifoo"), InvalidArgument);
}

// mla_decode.cu includes common/cuda.cuh and, on Hopper, common/hopper.cuh, which includes it
// too: a `#pragma once` header is expanded once, or the compiler sees its definitions twice.
TEST(CudaSources, PragmaOnceHeadersAreExpandedOnce) {
  const std::string key = "mla_attention/mla_decode.cu";
  const std::string text = clc::with_includes(key, detail::embedded(key).text());
  auto count = [&](std::string_view what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("unsigned shared_addr(const void* p)"), 1u);
  EXPECT_EQ(count("void mbar_init(unsigned bar, unsigned count)"), 1u);
  EXPECT_EQ(count("#pragma once"), 2u);  // cuda.cuh's and hopper.cuh's, each once
}

// A device like an H100 (or an A100 for sm_80): what the spaces read.
DeviceInfo like_nvidia(int cc) {
  DeviceInfo info;
  info.backend = Backend::cuda;
  info.vendor = "NVIDIA";
  info.name = cc >= 90 ? "compile-only sm_90a" : "compile-only sm_80";
  info.architecture = "sm_" + std::to_string(cc);
  info.discrete = true;
  info.compute_units = cc >= 90 ? 132 : 108;
  info.global_mem = info.max_buffer = 80ull << 30;
  info.local_mem = 48 * 1024;
  info.max_workgroup_size = 1024;
  info.max_workgroup_dims = {1024, 1024, 64};
  info.subgroup_size = 32;
  info.subgroups = info.fp16 = info.bf16 = true;
  for (DType t : {DType::f16, DType::bf16}) info.coopmat.push_back(CoopMatShape{16, 8, 16, t, DType::f32});
  return info;
}

// The configs a compile check covers: the heuristic's and the first and last of the space (as
// Conformance runs), or every config under EJK_CUDA_COMPILE_ALL=1. Flash attention's OpenCL C
// tensor-core programs (variant mma) are left to that setting and to the GPU machine's runs:
// NVRTC takes minutes over each (docs/backends/cuda.md).
bool compile_all() {
  const char* every = std::getenv("EJK_CUDA_COMPILE_ALL");
  return every && std::string(every) == "1";
}

std::vector<Config> configs_to_compile(const Implementation& impl, const Invocation& inv, const DeviceInfo& info) {
  std::vector<Config> out;
  auto add = [&](const Config& c) {
    const bool slow = c.has("variant") && c.text("variant") == "mma" && impl.sources().front().ends_with(".cl");
    if ((!slow || compile_all()) && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  add(impl.heuristic(inv, info));
  const auto all = impl.space(inv, info).enumerate();
  if (compile_all()) {
    for (const Config& c : all) add(c);
  } else if (!all.empty()) {
    add(all.front());
    add(all.back());
  }
  return out;
}

// f32 operands take the tf32 option: TF32 tensor cores.
Invocation tc_matmul(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, DType t,
                     double alpha, double beta) {
  auto spec = [&](std::int64_t r, std::int64_t c) {
    return batch > 1 ? TensorSpec{{batch, r, c}, t} : TensorSpec{{r, c}, t};
  };
  return kernels::matmul::invocation(ta ? spec(k, m) : spec(m, k), tb ? spec(n, k) : spec(k, n), spec(m, n), ta, tb,
                                     alpha, beta, t == DType::f32);
}

// The heuristic's config and six spread over the space, a different six for each `salt`.
std::vector<Config> heuristic_and_spread(const Implementation& impl, const Invocation& inv, const DeviceInfo& info,
                                         std::size_t salt) {
  std::vector<Config> configs{impl.heuristic(inv, info)};
  const auto all = impl.space(inv, info).enumerate();
  for (std::size_t i = 0; i < 6 && !all.empty(); ++i) configs.push_back(all[(i * 7919 + salt) % all.size()]);
  return configs;
}

// The tensor-core matmuls (CUDA C++, priority above the OpenCL C one) taking `inv`, the first
// the one selection picks.
std::vector<const Implementation*> tensor_core_matmuls(const Invocation& inv, const DeviceInfo& info) {
  std::vector<const Implementation*> out;
  for (const Implementation* impl : Registry::global().implementations("matmul"))
    if (impl->backend() == Backend::cuda && impl->priority() >= 1 && impl->supports(inv, info)) out.push_back(impl);
  std::stable_sort(out.begin(), out.end(), [](auto* a, auto* b) { return a->priority() > b->priority(); });
  return out;
}

// A flash attention forward the Hopper kernel takes: GQA, lengths off the tile sizes.
Invocation hopper_attention(std::int64_t dim, DType t, const nlohmann::json& options,
                            std::map<std::string, std::int64_t> sizes = {}, bool backward = false) {
  sizes.merge(std::map<std::string, std::int64_t>{{"batch", 2}, {"seq_q", 200}, {"seq_k", 333}, {"heads", 4},
                                                  {"kv_heads", 2}, {"head_dim", dim}});
  return kernels::flash_attention::recipe_invocation(backward, sizes, t, options);
}

// The Hopper backward sums dq by bulk reductions in no fixed order: asked to be deterministic,
// a backward goes to the OpenCL C passes, whose heuristic leaves dq's atomic sum out too.
TEST(CudaSelection, DeterministicBackwardAvoidsAtomicDq) {
  const DeviceInfo info = like_nvidia(90);
  for (bool deterministic : {false, true}) {
    const Invocation inv = hopper_attention(128, DType::f16, {{"deterministic", deterministic}}, {}, true);
    std::size_t hopper = 0;
    const Implementation* portable = nullptr;
    for (const Implementation* impl : Registry::global().implementations(inv.kernel)) {
      if (impl->backend() != Backend::cuda || !impl->supports(inv, info)) continue;
      if (impl->priority() >= 1) ++hopper;
      else portable = impl;
    }
    EXPECT_EQ(hopper, deterministic ? 0u : 1u) << "deterministic " << deterministic;
    ASSERT_NE(portable, nullptr);
    const Config h = portable->heuristic(inv, info);
    EXPECT_EQ(h.get("mma_fused"), deterministic ? 0 : 1) << h.canonical();
  }
}

class CudaCompile : public ::testing::TestWithParam<int> {};

// Every implementation on cuda, on its kernel's smallest workload in f32, f16 and bf16: the
// programs its configs build compile for the architecture, and launch with ranges the device
// takes. Programs compile on every core.
TEST_P(CudaCompile, EveryProgramOfTheSpacesCompiles) {
  if (!cuda::nvrtc_available()) {
    if (const char* ci = std::getenv("CI"); ci && std::string(ci) == "true") FAIL() << "NVRTC is missing under CI";
    GTEST_SKIP() << "no NVRTC (scripts/setup installs it)";
  }
  const int cc = GetParam();
  auto dev = std::make_shared<cuda::CompileOnlyDevice>(like_nvidia(cc), cuda::nvrtc_arch(cc / 10, cc % 10));
  const DeviceInfo& info = dev->info();
  struct Task {
    const Implementation* impl;
    Invocation inv;
    Config config;
  };
  std::vector<Task> tasks;
  std::set<std::string> kernels_run;
  for (const auto& name : Registry::global().kernels()) {
    const Kernel& kernel = Registry::global().kernel(name);
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      Invocation inv;
      try {
        inv = kernel.from_sizes(kernel.smallest_sizes(), t, kernel.smallest_options());
      } catch (const InvalidArgument&) {
        continue;  // the kernel does not take this dtype
      }
      for (const Implementation* impl : Registry::global().implementations(name)) {
        if (impl->backend() != Backend::cuda || !impl->supports(inv, info)) continue;
        for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
        kernels_run.insert(name);
      }
    }
  }
  // The tensor-core matmul takes no smallest workload (rows of 16-byte multiples only), and f32
  // only with tf32 (wgmma only with a K-major b: transposed).
  for (DType t : {DType::f16, DType::bf16, DType::f32})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Invocation inv = tc_matmul(1, 64, 64, 64, ta, tb, t, 1, 0);
        const auto impls = tensor_core_matmuls(inv, info);
        const bool wgmma = cc >= 90 && (t != DType::f32 || (!ta && tb));
        EXPECT_EQ(impls.size(), wgmma ? 2u : 1u) << "tensor-core matmuls taking " << inv.signature();
        for (const Implementation* impl : impls)
          for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
      }
  // The Hopper grouped matmuls take rows of 16-byte multiples only.
  for (DType t : {DType::f16, DType::bf16})
    for (const auto& [kernel, trans] : {std::pair{"grouped_matmul", false}, {"grouped_matmul", true}, {"grouped_matmul_tgmm", false}}) {
      const Invocation inv = Registry::global().kernel(kernel).from_sizes(
          {{"m", 200}, {"k", 64}, {"n", 72}, {"groups", 3}}, t,
          trans ? nlohmann::json{{"trans_rhs", true}} : nlohmann::json::object());
      std::size_t taken = 0;
      for (const Implementation* impl : Registry::global().implementations(inv.kernel))
        if (impl->backend() == Backend::cuda && impl->priority() >= 1 && impl->supports(inv, info)) {
          for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
          ++taken;
        }
      EXPECT_EQ(taken, cc >= 90 ? 1u : 0u) << "the Hopper grouped matmul for " << inv.signature();
    }
  // The Hopper flash attention takes head_dim 64 and 128 only.
  for (DType t : {DType::f16, DType::bf16})
    for (std::int64_t dim : {64, 128})
      for (const nlohmann::json& opts : {nlohmann::json{{"causal", true}}, nlohmann::json{{"logits_soft_cap", 30.0}}}) {
        for (bool backward : {false, true}) {
          const Invocation inv = hopper_attention(dim, t, opts, {}, backward);
          for (const Implementation* impl : Registry::global().implementations(inv.kernel))
            if (impl->backend() == Backend::cuda && impl->priority() >= 1 && impl->supports(inv, info))
              for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
        }
      }
  // mla_decode's tensor-core pass takes latent ranks of 64s only; so does the OpenCL C's
  // tensor-core attend pass (variant mma), each of whose programs (warps x tile rows x staging:
  // through registers, or a cp.async ring of so many stages) compiles.
  for (DType t : {DType::f16, DType::bf16}) {
    const kernels::mla_attention::MlaDecodeKernel mk;
    const Invocation inv = mk.from_sizes({{"batch", 2}, {"heads", 16}, {"context", 128}}, t, nlohmann::json::object());
    for (const Implementation* impl : Registry::global().implementations(inv.kernel)) {
      if (impl->backend() != Backend::cuda || !impl->supports(inv, info)) continue;
      if (impl->priority() >= 1) {
        for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
        continue;
      }
      std::set<std::array<std::int64_t, 3>> programs;
      for (const Config& c : impl->space(inv, info).enumerate())
        if (c.has("variant") && c.text("variant") == "mma" &&
            programs.insert({c.get("mma_warps"), c.get("mma_block_n"), c.get("mma_async") ? c.get("mma_stages") : 0}).second)
          tasks.push_back({impl, inv, c});
      // Through registers: 4 x 16, 4 x 32, 8 x 32; by cp.async, two stages of 16 rows (48 KiB).
      EXPECT_EQ(programs.size(), 4u) << "the OpenCL C's tensor-core programs for " << inv.signature();
    }
  }
  // The decode engine's tensor-core pass takes head_dim 64 to 256 in steps of 64.
  const std::vector<std::pair<std::string, std::map<std::string, std::int64_t>>> decode = {
      {"page_attention", {{"batch", 2}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 128}, {"context", 64}}},
      {"ragged_decode_attention", {{"batch", 2}, {"heads", 4}, {"kv_heads", 4}, {"head_dim", 256}, {"seq", 64}}},
      {"ragged_page_attention",
       {{"num_seqs", 2}, {"q_len", 2}, {"context", 64}, {"heads", 8}, {"kv_heads", 1}, {"head_dim", 64}}}};
  for (DType t : {DType::f16, DType::bf16})
    for (const auto& [name, sizes] : decode) {
      const Invocation inv = Registry::global().kernel(name).from_sizes(sizes, t, nlohmann::json::object());
      std::size_t taken = 0;
      for (const Implementation* impl : Registry::global().implementations(inv.kernel))
        if (impl->backend() == Backend::cuda && impl->priority() >= 1 && impl->supports(inv, info)) {
          for (const Config& c : configs_to_compile(*impl, inv, info)) tasks.push_back({impl, inv, c});
          ++taken;
        }
      EXPECT_EQ(taken, 1u) << "the decode engine's tensor-core pass for " << inv.signature();
    }
  std::atomic<std::size_t> next{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto work = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < tasks.size();) {
      const Task& task = tasks[i];
      std::vector<Tensor> args;
      for (const auto& a : task.inv.args) args.emplace_back(dev, a.shape, a.dtype);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        task.impl->run(task.inv, task.config, args, *dev);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (secs > 30)
          std::printf("slow: %.0f s for %s %s %s\n", secs, task.inv.kernel.c_str(),
                      std::string(to_string(task.inv.args[0].dtype)).c_str(), task.config.canonical().c_str());
      } catch (const std::exception& e) {
        std::lock_guard lock(failures_mutex);
        failures.push_back(task.inv.kernel + " " + std::string(to_string(task.inv.args[0].dtype)) + " " +
                           task.config.canonical() + ": " + e.what());
      }
    }
  };
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < std::max(2u, std::thread::hardware_concurrency()); ++i) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
  std::printf("%s: %zu configs, %zu programs compiled in %.0f s\n", dev->info().name.c_str(), tasks.size(),
              dev->compiled(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  // Every kernel OpenCL runs, cuda runs (its OpenCL C at least); kernels a test registers for
  // the CPU alone are not among them.
  for (const auto& name : Registry::global().kernels()) {
    const auto impls = Registry::global().implementations(name);
    const bool opencl = std::any_of(impls.begin(), impls.end(), [](const Implementation* i) { return i->backend() == Backend::opencl; });
    EXPECT_TRUE(!opencl || kernels_run.count(name)) << name << " has an OpenCL implementation but none on cuda";
  }
  EXPECT_GT(dev->compiled(), 20u);
}

// Flash attention's OpenCL C tensor-core passes (variant mma), left out of the test above, as
// the heuristics of flash_attention and block_sparse_attention pick them on an NVIDIA device:
// the dense programs and the ones built with a block layout's lists (SPARSE) compile for the
// architecture, as do the scalar passes with the lists. block_sparse_attention's heuristic must
// pick the tensor-core passes: they are what runs by default.
TEST_P(CudaCompile, FlashTensorCorePassesCompileWithAndWithoutLists) {
  if (!cuda::nvrtc_available()) GTEST_SKIP() << "no NVRTC (scripts/setup installs it)";
  const int cc = GetParam();
  auto dev = std::make_shared<cuda::CompileOnlyDevice>(like_nvidia(cc), cuda::nvrtc_arch(cc / 10, cc % 10));
  const DeviceInfo& info = dev->info();
  const std::map<std::string, std::int64_t> sizes{{"seq", 512}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 128}};
  const nlohmann::json layout{{"block_q", 64}, {"block_k", 64}, {"causal", true}, {"local_blocks", 2}};
  for (const char* name : {"flash_attention", "flash_attention_bwd", "block_sparse_attention", "block_sparse_attention_bwd"}) {
    const Kernel& kernel = Registry::global().kernel(name);
    const bool sparse = std::string_view(name).starts_with("block_sparse");
    const Invocation inv = kernel.from_sizes(sizes, DType::f16, sparse ? layout : nlohmann::json{{"causal", true}});
    std::size_t taken = 0;
    for (const Implementation* impl : Registry::global().implementations(inv.kernel)) {
      if (impl->backend() != Backend::cuda || impl->priority() >= 1 || !impl->supports(inv, info)) continue;
      const Config c = impl->heuristic(inv, info);
      EXPECT_EQ(c.text("variant"), "mma") << inv.kernel << " " << c.canonical();
      std::vector<Tensor> args;
      for (const auto& a : inv.args) args.emplace_back(dev, a.shape, a.dtype);
      EXPECT_NO_THROW(impl->run(inv, c, args, *dev)) << inv.kernel << " " << c.canonical();
      // The backward with dq added by the dk/dv pass and without (its zero and convert passes too).
      if (std::string_view(name).ends_with("_bwd"))
        for (std::int64_t fused : {0, 1}) {
          Config f = c;
          f.set("mma_fused", fused);
          EXPECT_EQ(impl->space(inv, info).mismatch(f), "") << f.canonical();
          EXPECT_NO_THROW(impl->run(inv, f, args, *dev)) << inv.kernel << " " << f.canonical();
        }
      // And the scalar passes with the lists, which the test above reaches only by chance.
      if (sparse)
        for (const Config& s : impl->space(inv, info).enumerate())
          if (s.text("variant") == "scalar") {
            EXPECT_NO_THROW(impl->run(inv, s, args, *dev)) << inv.kernel << " " << s.canonical();
            break;
          }
      ++taken;
    }
    EXPECT_EQ(taken, 1u) << "the OpenCL C implementation of " << name;
  }
  // Each kernel's tensor-core program (the forward's and backward's share one where their
  // geometries agree), the backward's scalar prep pass and the scalar SPARSE programs.
  EXPECT_GE(dev->compiled(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Arch, CudaCompile, ::testing::Values(80, 90),
                         [](const auto& i) { return "sm_" + std::to_string(i.param); });

TEST(CudaDevices, ListedOnlyWithADriver) {
  bool listed = false;
  for (const auto& d : list_devices()) listed |= d.backend == Backend::cuda;
  EXPECT_EQ(listed, cuda::driver() != nullptr) << cuda::driver_absent_reason();
  if (!cuda::driver()) {
    test::expect_error([] { (void)open_device("cuda:0"); }, "cuda:0");
  }
}

class Cuda : public ::testing::TestWithParam<std::string> {
 protected:
  cuda::CudaDevice& dev() { return cuda::cuda_device(*open_device(GetParam())); }
};
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Cuda);

TEST_P(Cuda, LaunchChecksArgumentsAndTimesOnTheDevice) {
  const char* src = "common/fill.cl";
  auto k = dev().kernel(src, "", "ejk_fill");
  Context ctx(GetParam());
  Tensor x = ctx.empty({64}, DType::f32);
  // Nine arguments: one given, and a double where the kernel takes a float.
  EXPECT_THROW(dev().launch(*k, clc::Range(64), clc::Range(64), x), InvalidArgument);
  EXPECT_THROW(dev().launch(*k, clc::Range(64), clc::Range(64), x, std::uint64_t{0}, std::uint64_t{0}, std::uint64_t{16},
                            0u, 0u, 0.0, 1.0f, 0u),
               DeviceError);
  double ns = dev().time_ns([&] { fill_uniform(x, 3, -1.0f, 1.0f); });
  EXPECT_GT(ns, 0.0);
  EXPECT_EQ(dev().time_ns([] {}), 0.0);
  auto before = dev().module_cache_stats();
  (void)dev().kernel(src, "", "ejk_fill");
  EXPECT_EQ(dev().module_cache_stats().builds, before.builds);
  EXPECT_THROW(dev().kernel(src, "", "no_such_kernel"), NotFound);
}

struct Shape3 {
  std::int64_t batch, m, n, k;
  double alpha, beta;
};

// Runs every tensor-core matmul taking each (layout, shape) of dtype `t` against the double
// reference, under the heuristic's config and configs spread over its space; returns the runs.
std::size_t expect_tensor_core_matmuls(const Context& ctx, DType t, const std::vector<Shape3>& shapes) {
  const DeviceInfo& info = ctx.device().info();
  const kernels::matmul::MatmulKernel mk;
  std::size_t runs = 0;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const auto& sh : shapes) {
        const Invocation inv = tc_matmul(sh.batch, sh.m, sh.n, sh.k, ta, tb, t, sh.alpha, sh.beta);
        const auto impls = tensor_core_matmuls(inv, info);
        EXPECT_FALSE(impls.empty()) << inv.signature();
        if (impls.empty()) continue;
        EXPECT_EQ(&Registry::global().implementation(inv, info), impls.front()) << inv.signature();
        const HostArrays in = mk.inputs(inv, 7);
        const std::vector<double> want = mk.reference(inv, in)[0];
        for (const Implementation* impl : impls) {
          for (const Config& c : heuristic_and_spread(*impl, inv, info, runs)) {
            std::vector<Tensor> args;
            for (std::size_t i = 0; i < 3; ++i) args.push_back(ctx.from(inv.args[i].shape, t, in[i]));
            impl->run(inv, c, args, ctx.device());
            EXPECT_LE(test::relative_error(args[2].read(), want), mk.tolerance(inv))
                << inv.signature() << " " << impl->sources().front() << " " << c.canonical();
            ++runs;
          }
        }
      }
  return runs;
}

const std::vector<Shape3> tensor_core_shapes = {
    {1, 64, 64, 64, 1, 0}, {2, 200, 136, 72, 0.5, 0.75}, {1, 8, 264, 1000, 1, 0}, {1, 520, 24, 8, -1, 1}};

// The tensor-core matmuls against the double reference: every transpose, both dtypes, edges of
// every tile size, a batch, alpha and beta.
TEST_P(Cuda, TensorCoreMatmulMatchesTheReference) {
  Context ctx(GetParam());
  if (ctx.device().info().coopmat.empty()) GTEST_SKIP() << ctx.device().info().name << " has no mma.sync (sm_80 and later)";
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16}) runs += expect_tensor_core_matmuls(ctx, t, tensor_core_shapes);
  EXPECT_GT(runs, 100u);
}

// f32 with tf32 on TF32 mma.sync the same way, also with rows of 4-float multiples (36, 44, 52)
// and k short of one slice.
TEST_P(Cuda, Tf32MatmulMatchesTheReference) {
  Context ctx(GetParam());
  if (ctx.device().info().coopmat.empty()) GTEST_SKIP() << ctx.device().info().name << " has no mma.sync (sm_80 and later)";
  std::vector<Shape3> shapes = tensor_core_shapes;
  shapes.insert(shapes.end(), {{3, 36, 44, 52, 1, 0.5}, {1, 300, 260, 4, 2, 0}});
  EXPECT_GT(expect_tensor_core_matmuls(ctx, DType::f32, shapes), 150u);
}

// The Hopper grouped matmuls against the double reference: f16 and bf16, rhs transposed or not,
// groups empty, shorter than a tile and straddling tiles, reductions ending inside a slice
// (tgmm), under the heuristic's config and configs spread over the space.
TEST_P(Cuda, HopperGroupedMatmulMatchesTheReference) {
  namespace gm = kernels::grouped_matmul;
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  struct Case {
    const char* kernel;
    bool trans;
    std::int64_t m, k, n;
    std::vector<double> sizes;  // empty: the kernel's random split
  };
  const Case cases[] = {{"grouped_matmul", false, 300, 72, 136, {0, 130, 7, 163}},
                        {"grouped_matmul", true, 300, 72, 136, {0, 130, 7, 163}},
                        {"grouped_matmul", false, 1000, 256, 264, {}},
                        {"grouped_matmul", true, 777, 8, 520, {}},
                        {"grouped_matmul_tgmm", false, 300, 136, 72, {0, 130, 7, 163}},
                        {"grouped_matmul_tgmm", false, 1000, 200, 264, {}},
                        {"grouped_matmul_tgmm", false, 64, 64, 64, {64, 0}}};
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (const Case& c : cases) {
      const Kernel& kernel = Registry::global().kernel(c.kernel);
      const auto groups = static_cast<std::int64_t>(c.sizes.empty() ? 5 : c.sizes.size());
      const Invocation inv = kernel.from_sizes({{"m", c.m}, {"k", c.k}, {"n", c.n}, {"groups", groups}}, t,
                                               c.trans ? nlohmann::json{{"trans_rhs", true}} : nlohmann::json::object());
      const Implementation& impl = Registry::global().implementation(inv, info);
      if (impl.sources().front() != "grouped_matmul/grouped_matmul.cu")
        GTEST_SKIP() << info.name << " (" << info.architecture << ") has no wgmma (sm_90a)";
      HostArrays in = kernel.inputs(inv, 11);
      if (!c.sizes.empty()) in[gm::arg::group_sizes] = c.sizes;
      const std::vector<double> want = kernel.reference(inv, in)[0];
      for (const Config& config : heuristic_and_spread(impl, inv, info, runs)) {
        std::vector<Tensor> args;
        for (std::size_t i = 0; i < gm::arg::count; ++i) args.push_back(ctx.from(inv.args[i].shape, inv.args[i].dtype, in[i]));
        impl.run(inv, config, args, ctx.device());
        EXPECT_LE(test::relative_error(args[gm::arg::out].read(), want), kernel.tolerance(inv))
            << inv.signature() << " sizes " << nlohmann::json(in[gm::arg::group_sizes]).dump() << " " << config.canonical();
        ++runs;
      }
    }
  EXPECT_GT(runs, 60u);
}

// The Hopper flash attention forward (wgmma) against the double reference: f16 and bf16, head_dim
// 64 and 128, masks, soft cap, GQA, lengths off the tiles, every config of its space on one set
// of options and the heuristic's on the others.
// Forward and backward alike: out and lse, or dq, dk and dv.
void expect_hopper_attention(bool backward, const std::string& device) {
  namespace fa = kernels::flash_attention;
  Context ctx(device);
  const DeviceInfo& info = ctx.device().info();
  const Kernel& kernel = Registry::global().kernel(backward ? "flash_attention_bwd" : "flash_attention");
  const std::string source = backward ? "flash_attention/flash_attention_bwd_wgmma.cu" : "flash_attention/flash_attention_wgmma.cu";
  const Invocation probe = hopper_attention(128, DType::f16, nlohmann::json::object(), {}, backward);
  const Implementation& impl = Registry::global().implementation(probe, info);
  if (impl.sources() != std::vector<std::string>{source})
    GTEST_SKIP() << info.name << " (" << info.architecture << ") has no wgmma (sm_90a)";
  const std::vector<std::string> outputs =
      backward ? std::vector<std::string>{"dq", "dk", "dv"} : std::vector<std::string>{"out", "lse"};
  const std::vector<std::pair<nlohmann::json, std::map<std::string, std::int64_t>>> cases = {
      {nlohmann::json::object(), {}},
      {{{"causal", true}}, {}},
      {{{"causal", true}}, {{"seq_q", 256}, {"seq_k", 256}, {"batch", 1}}},
      {{{"window_left", 40}, {"window_right", 8}, {"logits_soft_cap", 20.0}}, {}},
      {{{"causal", true}, {"window_left", 70}}, {{"seq_q", 333}, {"seq_k", 200}}},
      {{{"softmax_scale", 0.5}}, {{"seq_q", 1}, {"seq_k", 5}, {"kv_heads", 1}}},
  };
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (std::int64_t dim : {64, 128})
      for (std::size_t ci = 0; ci < cases.size(); ++ci) {
        const auto& [opts, sizes] = cases[ci];
        const Invocation inv = hopper_attention(dim, t, opts, sizes, backward);
        ASSERT_EQ(&Registry::global().implementation(inv, info), &impl) << inv.signature();
        const HostArrays in = kernel.inputs(inv, 11 + ci);
        const HostArrays want = kernel.reference(inv, in);
        std::vector<Config> configs{impl.heuristic(inv, info)};
        if (ci == 1)
          for (const Config& c : impl.space(inv, info).enumerate()) configs.push_back(c);
        for (const Config& c : configs) {
          const HostArrays got = test::run_implementation(ctx, inv, in, backward ? fa::bwd::dq : fa::fwd::out, c);
          const std::string label = std::string(to_string(t)) + " " + std::to_string(dim) + " " + opts.dump() + " " +
                                    c.canonical();
          for (std::size_t i = 0; i < outputs.size(); ++i)
            EXPECT_LE(test::relative_error(got[i], want[i]), kernel.tolerance(inv)) << label << ": " << outputs[i];
          ++runs;
        }
      }
  EXPECT_GT(runs, 40u);
}

TEST_P(Cuda, HopperFlashAttentionMatchesTheReference) { expect_hopper_attention(false, GetParam()); }
TEST_P(Cuda, HopperFlashAttentionBackwardMatchesTheReference) { expect_hopper_attention(true, GetParam()); }

// mla_decode's tensor-core attention pass against the double reference: f16 and bf16, 16 heads a
// block with fewer and more heads than that, ragged contexts (0 included), splits, both tiles.
TEST_P(Cuda, TensorCoreMlaDecodeMatchesTheReference) {
  namespace mla = kernels::mla_attention;
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  const mla::MlaDecodeKernel mk;
  const Invocation probe =
      mk.from_sizes({{"batch", 2}, {"heads", 16}, {"context", 64}}, DType::f16, nlohmann::json::object());
  const Implementation& impl = Registry::global().implementation(probe, info);
  if (impl.sources().front() != "mla_attention/mla_decode.cu")
    GTEST_SKIP() << info.name << " has no mma.sync (sm_80 and later)";
  const std::vector<std::map<std::string, std::int64_t>> shapes = {
      {{"batch", 3}, {"heads", 16}, {"context", 300}},
      {{"batch", 2}, {"heads", 8}, {"context", 70}, {"kv_lora_rank", 128}, {"rope_dim", 64}, {"block_size", 32}},
      {{"batch", 2}, {"heads", 40}, {"context", 129}, {"kv_lora_rank", 256}, {"qk_nope_head_dim", 64}, {"v_head_dim", 64}},
  };
  std::size_t runs = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (std::size_t si = 0; si < shapes.size(); ++si) {
      const Invocation inv = mk.from_sizes(shapes[si], t, nlohmann::json::object());
      ASSERT_EQ(&Registry::global().implementation(inv, info), &impl) << inv.signature();
      HostArrays in = mk.inputs(inv, 21 + si);
      // Ragged contexts: the whole table row, about half of it, none.
      auto& lens = in[mla::arg::context_lens];
      for (std::size_t b = 1; b < lens.size(); ++b) lens[b] = b == 1 ? std::floor(lens[0] / 2) + 3 : 0;
      const HostArrays want = mk.reference(inv, in);
      std::vector<Config> configs{impl.heuristic(inv, info)};
      for (const Config& c : impl.space(inv, info).enumerate())
        if (c.get("splits") <= 4) configs.push_back(c);
      for (const Config& c : configs) {
        const HostArrays got = test::run_implementation(ctx, inv, in, mla::arg::out, c);
        EXPECT_LE(test::relative_error(got[0], want[0]), mk.tolerance(inv))
            << to_string(t) << " " << inv.signature() << " " << c.canonical();
        ++runs;
      }
    }
  EXPECT_GT(runs, 20u);
}

// The decode engine's tensor-core pass 1 against the double reference: the three kernels, f16 and
// bf16, head_dim 64, 128 and 256, groups 1 to 16, paged and contiguous caches, ragged query runs
// (several tokens a block), ragged key ranges, sliding windows, soft caps and sinks; one split
// (the block writes the output) and several (decode_reduce merges them). The space's programs
// rotate over the cases.
TEST_P(Cuda, TensorCoreDecodeMatchesTheReference) {
  namespace rd = kernels::ragged_decode_attention;
  Context ctx(GetParam());
  const DeviceInfo& info = ctx.device().info();
  struct Case {
    std::string kernel;
    std::map<std::string, std::int64_t> sizes;
    nlohmann::json options;
  };
  const std::vector<Case> cases = {
      {"page_attention", {{"batch", 3}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 128}, {"context", 300}}, {{"logits_soft_cap", 5.0}}},
      {"page_attention", {{"batch", 2}, {"heads", 16}, {"kv_heads", 1}, {"head_dim", 64}, {"context", 129}, {"block_size", 32}},
       nlohmann::json::object()},
      {"ragged_decode_attention", {{"batch", 3}, {"heads", 4}, {"kv_heads", 4}, {"head_dim", 256}, {"seq", 200}},
       {{"sliding_window", 37}, {"sinks", true}}},
      {"ragged_decode_attention", {{"batch", 4}, {"heads", 16}, {"kv_heads", 2}, {"head_dim", 128}, {"seq", 160}},
       {{"sinks", true}}},
      {"ragged_page_attention",
       {{"num_seqs", 3}, {"q_len", 3}, {"context", 70}, {"heads", 8}, {"kv_heads", 2}, {"head_dim", 128}, {"block_size", 16}},
       {{"sliding_window", 20}, {"logits_soft_cap", 3.0}, {"sinks", true}}},
      {"ragged_page_attention",
       {{"num_seqs", 2}, {"q_len", 5}, {"context", 90}, {"heads", 4}, {"kv_heads", 1}, {"head_dim", 64}, {"block_size", 16}},
       nlohmann::json::object()},
  };
  std::size_t runs = 0, at = 0;
  for (DType t : {DType::f16, DType::bf16})
    for (std::size_t ci = 0; ci < cases.size(); ++ci) {
      const Case& c = cases[ci];
      const Kernel& kernel = Registry::global().kernel(c.kernel);
      const Invocation inv = kernel.from_sizes(c.sizes, t, c.options);
      const Implementation& impl = Registry::global().implementation(inv, info);
      if (impl.sources().front() != "decode_attention/decode_attention.cu")
        GTEST_SKIP() << info.name << " has no mma.sync (sm_80 and later)";
      HostArrays in = kernel.inputs(inv, 31 + ci);
      if (c.kernel == "ragged_decode_attention") {
        // Ragged key ranges: a late start, an empty sequence, a short one.
        const double seq = static_cast<double>(c.sizes.at("seq"));
        in[rd::arg::sequence_start][0] = std::floor(seq / 3);
        in[rd::arg::sequence_start][1] = 5;
        in[rd::arg::sequence_end][1] = 5;
        in[rd::arg::sequence_end][2] = 17;
      }
      const HostArrays want = kernel.reference(inv, in);
      const std::vector<Config> space = impl.space(inv, info).enumerate();
      std::vector<Config> configs{impl.heuristic(inv, info)};
      for (std::size_t i = 0; i < space.size(); ++i)
        if ((i + at) % 7 == 0) configs.push_back(space[i]);
      ++at;
      for (const Config& config : configs) {
        const HostArrays got = test::run_implementation(ctx, inv, in, inv.args.size() - 1, config);
        EXPECT_LE(test::relative_error(got[0], want[0]), kernel.tolerance(inv))
            << to_string(t) << " " << inv.signature() << " " << config.canonical();
        ++runs;
      }
    }
  EXPECT_GT(runs, 50u);
}

INSTANTIATE_TEST_SUITE_P(All, Cuda, ::testing::ValuesIn(test::devices(Backend::cuda)),
                         [](const auto& i) { return std::string("cuda_") + i.param.substr(5); });

}  // namespace
}  // namespace ejk
#endif
