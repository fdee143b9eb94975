// flash_attention on OpenCL beyond the backend-independent tests: the largest head_dim of each
// size class (the program's DMAX), bitwise-deterministic gradients, the GPU family's space and
// heuristics (checked against an NVIDIA-like description and run on whatever OpenCL device is
// present), configs that reach run() without the space, and the tensor-core variant where the
// device offers it.
#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "support.hpp"

#ifdef EJK_HAVE_OPENCL
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/opencl.hpp"

namespace ejk {
namespace {

namespace fa = kernels::flash_attention;

Invocation invocation(bool backward, std::int64_t dim, DType t, const nlohmann::json& options,
                      std::map<std::string, std::int64_t> sizes = {}) {
  sizes.merge(std::map<std::string, std::int64_t>{{"batch", 2}, {"seq_q", 21}, {"seq_k", 37}, {"heads", 4},
                                                  {"kv_heads", 2}, {"head_dim", dim}});
  return fa::recipe_invocation(backward, sizes, t, options);
}

// Forward and backward of `opts` at head_dim `dim`, each output within its tolerance.
void expect_matches(Context& ctx, std::int64_t dim, DType t, const nlohmann::json& opts, const std::string& label,
                    const std::optional<Config>& fwd_config = {}, const std::optional<Config>& bwd_config = {},
                    const std::map<std::string, std::int64_t>& sizes = {}) {
  const fa::FlashAttentionKernel fk;
  const fa::FlashAttentionBwdKernel bk;
  const Invocation f = invocation(false, dim, t, opts, sizes);
  HostArrays in = fk.inputs(f, 5);
  HostArrays got = test::run_implementation(ctx, f, in, fa::fwd::out, fwd_config);
  HostArrays want = fk.reference(f, in);
  EXPECT_LE(test::relative_error(got[0], want[0]), fk.tolerance(f)) << label << ": out";
  EXPECT_LE(test::relative_error(got[1], want[1]), fk.tolerance(f)) << label << ": lse";

  const Invocation b = invocation(true, dim, t, opts, sizes);
  in = bk.inputs(b, 6);
  got = test::run_implementation(ctx, b, in, fa::bwd::dq, bwd_config);
  want = bk.reference(b, in);
  const char* names[] = {"dq", "dk", "dv", "dbias", "dsoftmax_aux"};
  for (std::size_t i = 0; i < 5; ++i)
    EXPECT_LE(test::relative_error(got[i], want[i]), bk.tolerance(b)) << label << ": " << names[i];
}

class FlashAttentionOpenCL : public ::testing::TestWithParam<std::string> {};

TEST_P(FlashAttentionOpenCL, LargestHeadDimOfEachClass) {
  Context ctx(GetParam());
  const nlohmann::json opts = {{"causal", true}, {"bias", "heads"}, {"sinks", true}, {"logits_soft_cap", 4.0}};
  for (auto [dim, t] : {std::pair{256, DType::f32}, {128, DType::f16}, {64, DType::bf16}})
    expect_matches(ctx, dim, t, opts, std::to_string(dim) + " " + std::string(to_string(t)));
}

// Broadcast dbias and dsoftmax_aux are sums over many workgroups' results, done in a fixed order.
TEST_P(FlashAttentionOpenCL, GradientsAreBitwiseRepeatable) {
  Context ctx(GetParam());
  const Invocation b = invocation(true, 32, DType::f32, {{"bias", "shared"}, {"sinks", true}, {"dropout", 0.2}},
                                  {{"seq_q", 70}, {"seq_k", 90}});
  test::expect_bitwise_repeatable(ctx, b, 9, fa::bwd::dq, {{3, "dbias"}, {4, "dsoftmax_aux"}});
  // 16-bit operands asked to be deterministic: on NVIDIA the tensor-core passes without atomic dq.
  const Invocation d = invocation(true, 64, DType::f16, {{"deterministic", true}}, {{"seq_q", 200}, {"seq_k", 300}});
  test::expect_bitwise_repeatable(ctx, d, 10, fa::bwd::dq, {{0, "dq"}, {1, "dk"}, {2, "dv"}});
}

// The GPU family's space on an NVIDIA-like device: never more than 256 work-items or 48 KiB of
// local memory, something for every head_dim up to 256, and the heuristics inside it.
TEST_P(FlashAttentionOpenCL, GpuSpaceFitsNvidia) {
  const DeviceInfo gpu = test::nvidia_opencl_like();
  for (bool backward : {false, true})
    for (std::int64_t dim : {1, 64, 128, 256}) {
      const Invocation inv = invocation(backward, dim, DType::f16, {{"causal", true}}, {{"seq_q", 4096}, {"seq_k", 4096}});
      const std::string label = (backward ? "backward " : "forward ") + std::to_string(dim);
      const auto configs = fa::opencl_space(inv, gpu, backward, false).enumerate();
      ASSERT_FALSE(configs.empty()) << label;
      for (const auto& c : configs) {
        const std::int64_t threads = c.get("threads_x") * c.get("threads_y");
        EXPECT_GE(threads, 32) << label << " " << c.canonical();
        EXPECT_LE(threads, 256) << label << " " << c.canonical();
      }
      const Config h = fa::opencl_heuristic(inv, gpu, backward, false);
      EXPECT_EQ(fa::opencl_space(inv, gpu, backward, false).mismatch(h), "") << label;
      if (dim == 128) {
        // The largest tiles that fit 48 KiB at head_dim 128.
        EXPECT_EQ(h.get("block_k"), 32) << label;
        EXPECT_EQ(h.get("threads_x") * h.get("threads_y"), 128) << label;
      }
    }
  // 64 x 64 blocks at head_dim 256 need far more than 48 KiB.
  const Invocation big = invocation(false, 256, DType::f16, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 4096}});
  EXPECT_NE(fa::opencl_space(big, gpu, false, false)
                .mismatch(Config{{"block_q", 64}, {"block_k", 64}, {"threads_x", 16}, {"threads_y", 16}}),
            "");
}

// The configs the GPU heuristics pick at head_dim 128 (the largest tiles), run here: their
// numerics do not depend on the device.
TEST_P(FlashAttentionOpenCL, GpuHeuristicConfigsMatchTheReference) {
  Context ctx(GetParam());
  const DeviceInfo gpu = test::nvidia_opencl_like();
  const nlohmann::json opts = {{"causal", true}, {"window_left", 20}, {"bias", "full"}, {"sinks", true}, {"dropout", 0.1}};
  const Config fc = fa::opencl_heuristic(invocation(false, 128, DType::f16, opts, {{"seq_q", 4096}, {"seq_k", 4096}}),
                                         gpu, false, false);
  const Config bc = fa::opencl_heuristic(invocation(true, 128, DType::f16, opts, {{"seq_q", 4096}, {"seq_k", 4096}}),
                                         gpu, true, false);
  expect_matches(ctx, 80, DType::f16, opts, "gpu configs " + fc.canonical() + " " + bc.canonical(), fc, bc);
}

TEST_P(FlashAttentionOpenCL, ConfigsOutsideTheSpaceAreRefused) {
  Context ctx(GetParam());
  auto expect_refused = [&](const Invocation& inv, std::size_t first_output, const Config& c, const std::string& needle) {
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    EXPECT_FALSE(impl.space(inv, ctx.device().info()).admits(c)) << c.canonical();
    const HostArrays in = Registry::global().kernel(inv.kernel).inputs(inv, 1);
    try {
      test::run_implementation(ctx, inv, in, first_output, c);
      ADD_FAILURE() << "expected InvalidArgument for " << c.canonical();
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto cfg = [](std::int64_t bq, std::int64_t bk, std::int64_t rx, std::int64_t ry) {
    return Config{{"block_q", bq}, {"block_k", bk}, {"threads_x", rx}, {"threads_y", ry}};
  };
  const Invocation f = invocation(false, 256, DType::f32, nlohmann::json::object());
  const Invocation b = invocation(true, 16, DType::f32, nlohmann::json::object());
  const DeviceInfo& info = ctx.device().info();
  expect_refused(f, fa::fwd::out, cfg(12, 16, 8, 8), "block_q % threads_y == 0");
  expect_refused(b, fa::bwd::dq, cfg(16, 8, 8, 16), "block_k % threads_y == 0");
  expect_refused(f, fa::fwd::out, cfg(8, 8, 0, 8), "positive");
  const std::int64_t wide = static_cast<std::int64_t>(info.max_workgroup_size) * 2;
  expect_refused(f, fa::fwd::out, cfg(8, wide, wide, 1), "workgroup size");
  // Staged rows of about 1 KiB (head_dim 256 in f32): local_mem / 256 of them need four times the
  // device's local memory.
  const std::int64_t rows = std::max<std::int64_t>(1024, static_cast<std::int64_t>(info.local_mem) / 256 / 8 * 8);
  expect_refused(f, fa::fwd::out, cfg(rows, 8, 8, 8), "bytes of local memory");
}

// The tensor-core variant is offered exactly where the device lists m16n8k16 fragments of the
// storage type and head_dim fits its registers, and its heuristics come first there.
TEST_P(FlashAttentionOpenCL, TensorCoreVariantNeedsFragments) {
  DeviceInfo gpu = test::nvidia_opencl_like();
  auto offered = [&](std::int64_t dim, DType t, bool backward) {
    const Invocation inv = invocation(backward, dim, t, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 4096}});
    const auto configs = fa::opencl_space(inv, gpu, backward, false).enumerate();
    return std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.text("variant") == "mma"; });
  };
  EXPECT_FALSE(offered(128, DType::f16, false)) << "no fragments listed";
  gpu.coopmat = {CoopMatShape{16, 8, 16, DType::f16, DType::f32}};
  for (bool backward : {false, true}) {
    EXPECT_TRUE(offered(128, DType::f16, backward));
    EXPECT_TRUE(offered(16, DType::f16, backward));
    EXPECT_FALSE(offered(128, DType::bf16, backward)) << "only f16 fragments listed";
    EXPECT_FALSE(offered(128, DType::f32, backward));
    EXPECT_FALSE(offered(72, DType::f16, backward)) << "head_dim not a multiple of 16";
    EXPECT_FALSE(offered(256, DType::f16, backward)) << "head_dim beyond the registers";
    const Invocation inv = invocation(backward, 128, DType::f16, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 4096}});
    EXPECT_EQ(fa::opencl_heuristic(inv, gpu, backward, false).text("variant"), "mma");
  }
}

// The cp.async copies (mma_async 1): the forward's ring of one to three stages, each of k and v
// rows padded by 16 bytes, within NVIDIA's 48 KiB (plus the 16 bytes that align it), and the
// backward's rows likewise; the forward's register path keeps one or two buffers.
TEST_P(FlashAttentionOpenCL, TensorCoreAsyncRingFitsLocalMemory) {
  DeviceInfo gpu = test::nvidia_opencl_like();
  gpu.coopmat = {CoopMatShape{16, 8, 16, DType::f16, DType::f32}};
  for (std::int64_t dim : {64, 128}) {
    const Invocation inv = invocation(false, dim, DType::f16, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 4096}});
    std::set<std::pair<std::int64_t, std::int64_t>> ring;  // (stages, block_k) with mma_async 1
    for (const Config& c : fa::opencl_space(inv, gpu, false, false).enumerate()) {
      if (c.text("variant") != "mma") continue;
      const std::int64_t stages = c.get("mma_stages"), bk = c.get("mma_block_k");
      if (c.get("mma_async") == 0) {
        EXPECT_LE(stages, 2) << c.canonical();
        continue;
      }
      EXPECT_LE(16 + stages * 2 * bk * (2 * dim + 16), 48 * 1024) << c.canonical();
      ring.insert({stages, bk});
    }
    EXPECT_TRUE(ring.count({1, 64}) && ring.count({2, 32}) && ring.count({3, 16})) << dim;
    EXPECT_EQ(ring.count({2, 64}), dim == 64 ? 1u : 0u) << dim << ": two 64-key stages need 68 KiB at head_dim 128";
    EXPECT_EQ(ring.count({3, 32}), dim == 64 ? 1u : 0u) << dim;
    // Whichever path the heuristic leads with, one key block (no ring) still gets tensor cores.
    const Invocation one = invocation(false, dim, DType::f16, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 32}});
    const Config h = fa::opencl_heuristic(one, gpu, false, false);
    EXPECT_EQ(h.text("variant"), "mma") << h.canonical();
    EXPECT_TRUE(fa::opencl_space(one, gpu, false, false).admits(h)) << h.canonical();
    // Backward: dq's ring of two stages of k and v, dk/dv's two stages of q and dout rows (fused:
    // no dq pass, and dk/dv also holds the workgroup's k rows and a block's dS^T).
    const Invocation b = invocation(true, dim, DType::f16, nlohmann::json::object(), {{"seq_q", 4096}, {"seq_k", 4096}});
    std::set<std::int64_t> keys;         // mma_block_k with mma_async 1, not fused
    std::set<std::int64_t> fused_warps;  // mma_warps of fused configs
    for (const Config& c : fa::opencl_space(b, gpu, true, false).enumerate()) {
      if (c.text("variant") != "mma" || c.get("mma_async") == 0) {
        if (c.text("variant") == "mma") EXPECT_EQ(c.get("mma_fused"), 0) << c.canonical();
        continue;
      }
      const std::int64_t bk = c.get("mma_block_k"), bq = c.get("mma_block_q"), w = c.get("mma_warps");
      const std::int64_t fused = c.get("mma_fused");
      const std::int64_t dq = fused ? 0 : 4 * bk * (2 * dim + 16);
      const std::int64_t dkdv = 4 * bq * (2 * dim + 16) + 16 * bq + fused * 16 * w * (2 * dim + 2 * bq + 32);
      EXPECT_LE(16 + std::max(dq, dkdv), 48 * 1024) << c.canonical();
      if (fused) {
        EXPECT_EQ(dim % (16 * w), 0) << c.canonical();
        fused_warps.insert(w);
      } else {
        keys.insert(bk);
      }
    }
    EXPECT_EQ(keys, (dim == 64 ? std::set<std::int64_t>{32, 64} : std::set<std::int64_t>{32})) << dim;
    // 8 warps divide head_dim 128 but their k rows and dS^T pass 48 KiB: they take a fixed-size
    // array where the device gives one more (NVIDIA's OpenCL: the opt-in shared memory).
    EXPECT_EQ(fused_warps, (std::set<std::int64_t>{2, 4})) << dim;
    {
      DeviceInfo big = gpu;
      big.static_local_mem = 227 * 1024;
      std::set<std::int64_t> warps;
      for (const Config& c : fa::opencl_space(b, big, true, false).enumerate())
        if (c.text("variant") == "mma" && c.get("mma_fused") == 1) {
          warps.insert(c.get("mma_warps"));
          const std::int64_t bq = c.get("mma_block_q"), w = c.get("mma_warps");
          EXPECT_LE(16 + 4 * bq * (2 * dim + 16) + 16 * bq + 16 * w * (2 * dim + 2 * bq + 32), 227 * 1024) << c.canonical();
        }
      EXPECT_EQ(warps, (dim == 128 ? std::set<std::int64_t>{2, 4, 8} : std::set<std::int64_t>{2, 4})) << dim;
    }
    EXPECT_EQ(fa::opencl_heuristic(b, gpu, true, false).text("variant"), "mma");
    // Asked for deterministic gradients, no config sums dq atomically, the heuristic included.
    const Invocation bd = invocation(true, dim, DType::f16, {{"deterministic", true}}, {{"seq_q", 4096}, {"seq_k", 4096}});
    DeviceInfo hopper = gpu;
    hopper.architecture = "sm_90";
    EXPECT_EQ(fa::opencl_heuristic(b, hopper, true, false).get("mma_fused"), 1);
    EXPECT_EQ(fa::opencl_heuristic(bd, hopper, true, false).get("mma_fused"), 0);
    EXPECT_EQ(fa::opencl_heuristic(bd, hopper, true, false).text("variant"), "mma");
    for (const Config& c : fa::opencl_space(bd, hopper, true, false).enumerate())
      if (c.text("variant") == "mma") EXPECT_EQ(c.get("mma_fused"), 0) << c.canonical();
    // The fused dq leads where one red adds four floats (sm_90 on), not before.
    for (const auto& [arch, fused] : {std::pair{"sm_80", 0}, {"sm_89", 0}, {"sm_90", 1}, {"sm_100", 1}, {"", 0}}) {
      DeviceInfo d = gpu;
      d.architecture = arch;
      EXPECT_EQ(fa::vector_red(d), fused == 1) << arch;
      const Config hb = fa::opencl_heuristic(b, d, true, false);
      EXPECT_EQ(hb.get("mma_fused"), fused) << arch << " " << hb.canonical();
      EXPECT_TRUE(fa::opencl_space(b, d, true, false).admits(hb)) << hb.canonical();
    }
  }
}

// Every program shape of the tensor-core variant, forward and backward, with the options alone
// and together, against the double reference; a test per dtype, so that either fits a few minutes
// of NVIDIA's compiler. Runs where the device offers the variant (NVIDIA GPUs from sm_80);
// elsewhere it says why it skips.
void tensor_cores_match_the_reference(Context& ctx, DType t) {
  const DeviceInfo& info = ctx.device().info();
  // Long enough for every workgroup size of the variant (up to 128 rows) to fit.
  const std::map<std::string, std::int64_t> sizes{{"seq_q", 80}, {"seq_k", 96}};
  auto mma_configs = [&](bool backward, std::int64_t dim, DType t) {
    const Invocation inv = invocation(backward, dim, t, nlohmann::json::object(), sizes);
    std::vector<Config> out;
    for (const Config& c : Registry::global().implementation(inv, info).space(inv, info).enumerate())
      if (c.text("variant") == "mma") out.push_back(c);
    return out;
  };
  if (mma_configs(false, 64, DType::f16).empty())
    GTEST_SKIP() << info.id() << " (" << info.name << ") lists no 16x8x16 f16 tensor-core fragments";
  const std::vector<nlohmann::json> option_sets = {
      nlohmann::json::object(),
      {{"causal", true}, {"sinks", true}},
      {{"window_left", 40}, {"window_right", 8}, {"logits_soft_cap", 20.0}, {"dropout", 0.1}, {"segments", true}},
      {{"causal", true}, {"bias", "heads"}},
  };
  // One config of each program shape that changes the code path (forward: async x stages x key
  // block x tiles; backward: async x fused x key block x query block), the warp count rotating from one dtype and
  // head_dim to the next: every config is a program for NVIDIA's compiler, a few seconds each.
  auto covering = [](const std::vector<Config>& configs, std::vector<std::string> keys, std::size_t turn) {
    std::map<std::string, std::vector<Config>> groups;
    for (const Config& c : configs) {
      std::string key;
      for (const auto& k : keys) key += k + "=" + std::to_string(c.get(k)) + " ";
      groups[key].push_back(c);
    }
    std::vector<Config> out;
    for (const auto& [key, g] : groups) out.push_back(g[turn % g.size()]);
    return out;
  };
  std::size_t turn = t == DType::f16 ? 0 : 2;
  for (std::int64_t dim : {64, 128}) {
    const auto fwd = covering(mma_configs(false, dim, t), {"mma_async", "mma_stages", "mma_block_k", "mma_tiles"}, turn);
    const auto bwd = covering(mma_configs(true, dim, t), {"mma_async", "mma_fused", "mma_block_k", "mma_block_q"}, turn++);
    ASSERT_FALSE(fwd.empty());
    ASSERT_FALSE(bwd.empty());
    for (std::size_t i = 0; i < std::max(fwd.size(), bwd.size()); ++i) {
      const Config& fc = fwd[i % fwd.size()];
      const Config& bc = bwd[i % bwd.size()];
      const auto& opts = option_sets[i % option_sets.size()];
      expect_matches(ctx, dim, t, opts, std::string(to_string(t)) + " " + std::to_string(dim) + " " + opts.dump() + " " +
                                            fc.canonical() + " " + bc.canonical(),
                     fc, bc, sizes);
    }
  }
}

TEST_P(FlashAttentionOpenCL, TensorCoreVariantMatchesTheReferenceF16) {
  Context ctx(GetParam());
  tensor_cores_match_the_reference(ctx, DType::f16);
}

TEST_P(FlashAttentionOpenCL, TensorCoreVariantMatchesTheReferenceBf16) {
  Context ctx(GetParam());
  tensor_cores_match_the_reference(ctx, DType::bf16);
}

INSTANTIATE_TEST_SUITE_P(All, FlashAttentionOpenCL, ::testing::ValuesIn(test::devices(Backend::opencl)),
                         [](const auto& p) { return test::test_name(p.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashAttentionOpenCL);

}  // namespace
}  // namespace ejk
#endif
