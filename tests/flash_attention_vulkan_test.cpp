// flash_attention on Vulkan beyond the backend-independent tests: the largest head_dim of each
// size class (the shader's DMAX specialization), bitwise-deterministic gradients, and configs
// that reach run() without the space.
#include <functional>

#include "flash_attention/flash_attention.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace fa = kernels::flash_attention;

Invocation invocation(bool backward, std::int64_t dim, DType t, const nlohmann::json& options,
                      std::map<std::string, std::int64_t> sizes = {}) {
  sizes.merge(std::map<std::string, std::int64_t>{{"batch", 2}, {"seq_q", 21}, {"seq_k", 37}, {"heads", 4},
                                                  {"kv_heads", 2}, {"head_dim", dim}});
  return fa::recipe_invocation(backward, sizes, t, options);
}

// The cooperative-matrix configs of the invocation's space on ctx's device (none where it has none).
std::vector<Config> coopmat_configs(const Context& ctx, const Invocation& inv) {
  const auto& impl = Registry::global().implementation(inv, ctx.device().info());
  std::vector<Config> out;
  for (const auto& c : impl.space(inv, ctx.device().info()).enumerate())
    if (c.has("variant") && c.text("variant") == "coopmat") out.push_back(c);
  return out;
}

// The cases both tensor-core passes are checked on: every cooperative-matrix config on a plain
// case, then the first and the last with every option at once at head_dim 128 and 256. False
// (nothing run) where the device offers no such config.
using CheckConfig = std::function<void(const Invocation&, const Config&, const std::string&)>;
bool check_plain_and_all_options(const Context& ctx, bool backward, const CheckConfig& expect_close) {
  const Invocation plain = invocation(backward, 64, DType::f16, nlohmann::json::object(), {{"seq_q", 150}, {"seq_k", 170}});
  const auto configs = coopmat_configs(ctx, plain);
  if (configs.empty()) return false;
  for (const auto& c : configs) expect_close(plain, c, "plain");

  const nlohmann::json all = {{"causal", true}, {"window_left", 50}, {"logits_soft_cap", 5.0}, {"dropout", 0.1},
                              {"bias", "heads"}, {"sinks", true}, {"segments", true}};
  for (std::int64_t dim : {128, 256}) {
    const Invocation inv = invocation(backward, dim, DType::f16, all, {{"seq_q", 100}, {"seq_k", 130}});
    const auto cs = coopmat_configs(ctx, inv);
    if (cs.empty()) {
      ADD_FAILURE() << "no cooperative-matrix config with every option at head_dim " << dim;
      continue;
    }
    expect_close(inv, cs.front(), "all options, head_dim " + std::to_string(dim));
    expect_close(inv, cs.back(), "all options, head_dim " + std::to_string(dim));
  }
  return true;
}

class FlashAttentionVulkan : public ::testing::TestWithParam<std::string> {};

TEST_P(FlashAttentionVulkan, LargestHeadDimOfEachClass) {
  Context ctx(GetParam());
  const fa::FlashAttentionKernel fk;
  const fa::FlashAttentionBwdKernel bk;
  const nlohmann::json opts = {{"causal", true}, {"bias", "heads"}, {"sinks", true}, {"logits_soft_cap", 4.0}};
  for (auto [dim, t] : {std::pair{256, DType::f32}, {128, DType::f16}, {64, DType::bf16}}) {
    const std::string label = std::to_string(dim) + " " + std::string(to_string(t));
    const Invocation f = invocation(false, dim, t, opts);
    HostArrays in = fk.inputs(f, 5);
    HostArrays got = test::run_implementation(ctx, f, in, fa::fwd::out);
    HostArrays want = fk.reference(f, in);
    EXPECT_LE(test::relative_error(got[0], want[0]), fk.tolerance(f)) << label << ": out";
    EXPECT_LE(test::relative_error(got[1], want[1]), fk.tolerance(f)) << label << ": lse";

    const Invocation b = invocation(true, dim, t, opts);
    in = bk.inputs(b, 6);
    got = test::run_implementation(ctx, b, in, fa::bwd::dq);
    want = bk.reference(b, in);
    const char* names[] = {"dq", "dk", "dv", "dbias", "dsoftmax_aux"};
    for (std::size_t i = 0; i < 5; ++i)
      EXPECT_LE(test::relative_error(got[i], want[i]), bk.tolerance(b)) << label << ": " << names[i];
  }
}

// Broadcast dbias and dsoftmax_aux are sums over many workgroups' results, done in a fixed order.
TEST_P(FlashAttentionVulkan, GradientsAreBitwiseRepeatable) {
  Context ctx(GetParam());
  const Invocation b = invocation(true, 32, DType::f32, {{"bias", "shared"}, {"sinks", true}, {"dropout", 0.2}},
                                  {{"seq_q", 70}, {"seq_k", 90}});
  test::expect_bitwise_repeatable(ctx, b, 9, fa::bwd::dq, {{3, "dbias"}, {4, "dsoftmax_aux"}});
}

// The tensor-core forward, on devices that list 16x16x16 f16 cooperative matrices (lavapipe does
// not): every config of its part of the space on a plain case, and the smallest and largest
// with every option at once and with packed input.
TEST_P(FlashAttentionVulkan, CooperativeMatrixForwardMatchesTheReference) {
  Context ctx(GetParam());
  const fa::FlashAttentionKernel fk;
  auto expect_close = [&](const Invocation& inv, const Config& c, const std::string& label) {
    const HostArrays in = fk.inputs(inv, 11);
    const HostArrays got = test::run_implementation(ctx, inv, in, fa::fwd::out, c);
    const HostArrays want = fk.reference(inv, in);
    EXPECT_LE(test::relative_error(got[0], want[0]), fk.tolerance(inv)) << label << " " << c.canonical() << ": out";
    EXPECT_LE(test::relative_error(got[1], want[1]), fk.tolerance(inv)) << label << " " << c.canonical() << ": lse";
  };
  if (!check_plain_and_all_options(ctx, false, expect_close))
    GTEST_SKIP() << ctx.device().info().name << " offers no cooperative-matrix flash attention";

  // Packed input: causal over sequences of 30 queries and 23 or 24 keys.
  const TensorSpec q{{90, 4, 64}, DType::f16}, k{{70, 2, 64}, DType::f16}, cu{{4}, DType::i32};
  const TensorSpec args[] = {q, k, k, fa::absent(), fa::absent(), cu, cu, fa::absent(), fa::absent(), q, {{4, 90}, DType::f32}};
  const Invocation packed = fa::forward_invocation(args, {.causal = true, .max_seqlen_q = 30, .max_seqlen_k = 24});
  for (const auto& c : coopmat_configs(ctx, packed)) expect_close(packed, c, "packed");
}

// The tensor-core backward, where the forward's is offered: every config of its part of the
// space on a plain case, and the smallest and largest with every option at once (dbias
// included) and with packed input; the sums of dsoftmax_aux and a broadcast dbias too.
TEST_P(FlashAttentionVulkan, CooperativeMatrixBackwardMatchesTheReference) {
  Context ctx(GetParam());
  const fa::FlashAttentionBwdKernel bk;
  auto expect_close = [&](const Invocation& inv, const Config& c, const std::string& label) {
    const HostArrays in = bk.inputs(inv, 12);
    const HostArrays got = test::run_implementation(ctx, inv, in, fa::bwd::dq, c);
    const HostArrays want = bk.reference(inv, in);
    const char* names[] = {"dq", "dk", "dv", "dbias", "dsoftmax_aux"};
    for (std::size_t i = 0; i < 5; ++i)
      EXPECT_LE(test::relative_error(got[i], want[i]), bk.tolerance(inv)) << label << " " << c.canonical() << ": " << names[i];
  };
  if (!check_plain_and_all_options(ctx, true, expect_close))
    GTEST_SKIP() << ctx.device().info().name << " offers no cooperative-matrix flash attention";
  const Invocation shared = invocation(true, 64, DType::f16, {{"bias", "shared"}, {"sinks", true}},
                                       {{"seq_q", 70}, {"seq_k", 90}});
  for (const auto& c : coopmat_configs(ctx, shared)) expect_close(shared, c, "broadcast bias");

  // Packed input: causal over sequences of 30 queries and 23 or 24 keys.
  const TensorSpec q{{90, 4, 64}, DType::f16}, k{{70, 2, 64}, DType::f16}, cu{{4}, DType::i32};
  const TensorSpec lse{{4, 90}, DType::f32};
  const TensorSpec args[] = {q, k, k, q, q, lse, fa::absent(), fa::absent(), cu, cu, fa::absent(), fa::absent(),
                             q, k, k, fa::absent(), fa::absent()};
  const Invocation packed = fa::backward_invocation(args, {.causal = true, .max_seqlen_q = 30, .max_seqlen_k = 24});
  for (const auto& c : coopmat_configs(ctx, packed)) expect_close(packed, c, "packed");
}

TEST_P(FlashAttentionVulkan, ConfigsOutsideTheSpaceAreRefused) {
  Context ctx(GetParam());
  auto expect_refused = [&](const Invocation& inv, std::size_t first_output, const Config& c, const std::string& needle) {
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    if (c.get("threads_x", 0) > 0) {
      EXPECT_FALSE(impl.space(inv, ctx.device().info()).admits(c)) << c.canonical();
    }
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
  expect_refused(f, fa::fwd::out, cfg(12, 16, 8, 8), "block_q % threads_y == 0");
  expect_refused(b, fa::bwd::dq, cfg(16, 8, 8, 16), "block_k % threads_y == 0");
  expect_refused(f, fa::fwd::out, cfg(64, 64, 32, 16), "bytes of shared memory");
  expect_refused(f, fa::fwd::out, cfg(8, 8, 0, 8), "positive");
  // The cooperative-matrix passes need f16 (and, on devices without them, cooperative matrices).
  const Config coop_fwd{{"variant", std::string("coopmat")}, {"subgroups", 4}, {"coop_block_k", 16}};
  const Config coop_bwd{{"variant", std::string("coopmat")}, {"subgroups", 4}, {"coop_block_q", 16}, {"coop_block_k", 16}};
  expect_refused(f, fa::fwd::out, coop_fwd, "needs f16 q, k, v");
  expect_refused(b, fa::bwd::dq, coop_bwd, "needs f16 q, k, v");
  const Invocation b16 = invocation(true, 64, DType::f16, nlohmann::json::object());
  Config odd = coop_bwd;
  odd.set("coop_block_q", 24);
  expect_refused(b16, fa::bwd::dq, odd, coopmat_configs(ctx, b16).empty() ? "cooperative matrices" : "positive multiples of 16");
}

INSTANTIATE_TEST_SUITE_P(All, FlashAttentionVulkan, ::testing::ValuesIn(test::devices(Backend::vulkan)),
                         [](const auto& p) { return test::test_name(p.param); });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(FlashAttentionVulkan);

}  // namespace
}  // namespace ejk
