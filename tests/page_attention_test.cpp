// page_attention against its double-precision reference on random inputs, on every device:
// dtypes, GQA/MQA/MHA, contexts of 0 and ending mid-page, shuffled and shared block tables,
// soft cap and scale, every config of a small space, and bad input naming the argument.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "backends/clc/clc_device.hpp"
#include "decode_support.hpp"
#include "page_attention/page_attention.hpp"

namespace ejk {
namespace {

namespace pa = kernels::page_attention;

struct Case {
  std::string name;
  std::int64_t heads = 4, kv_heads = 2, dim = 64, block_size = 16, num_blocks = 0;  // 0: just enough
  std::vector<std::int64_t> contexts{37, 0, 16, 90};
  std::int64_t max_blocks = 0;  // 0: enough for the longest context
  double softcap = 0, scale = 0;
};

struct Built {
  Tensor q, kc, vc, lens, tables, out;
  std::vector<double> initial;
  PageAttentionOptions opts;
  Invocation inv;
  std::vector<Tensor> args() const { return {q, kc, vc, lens, tables, out}; }
};

Built build(Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto batch = static_cast<std::int64_t>(c.contexts.size());
  std::int64_t longest = 1;
  for (auto x : c.contexts) longest = std::max(longest, x);
  const std::int64_t mb = c.max_blocks ? c.max_blocks : (longest + c.block_size - 1) / c.block_size;
  const std::int64_t nb = c.num_blocks ? c.num_blocks : batch * mb;
  Built b;
  const Shape qs{batch, c.heads, c.dim}, cs{nb, c.kv_heads, c.block_size, c.dim};
  // q spans [-3, 3) so that softmax rows are far from uniform.
  b.q = ctx.from(qs, t, test::uniform_values(rng, numel(qs), -3, 3));
  b.kc = ctx.from(cs, t, test::uniform_values(rng, numel(cs), -1, 1));
  b.vc = ctx.from(cs, t, test::uniform_values(rng, numel(cs), -1, 1));
  std::vector<double> lens(c.contexts.begin(), c.contexts.end());
  b.lens = ctx.from({batch}, DType::i32, lens);
  b.tables = ctx.from({batch, mb}, DType::i32, test::shuffled_pages(rng, batch, mb, nb));
  b.initial.assign(static_cast<std::size_t>(numel(qs)), 7.0);
  b.out = ctx.from(qs, t, b.initial);
  if (c.scale != 0) b.opts.softmax_scale = c.scale;
  b.opts.logits_soft_cap = c.softcap;
  std::vector<TensorSpec> specs;
  for (const auto& x : b.args()) specs.push_back(x.spec());
  b.inv = pa::invocation(specs, {c.softcap, c.scale});
  return b;
}

test::Compared run(Context& ctx, const Case& c, DType t, std::optional<Config> config = {}, std::uint64_t seed = 5) {
  Built b = build(ctx, c, t, seed);
  b.opts.config = std::move(config);
  page_attention(ctx, b.q, b.kc, b.vc, b.lens, b.tables, b.out, b.opts);
  const auto args = b.args();
  return test::compare(pa::PageAttentionKernel(), b.inv, args, pa::arg::out, b.initial);
}

class PageAttention : public ::testing::TestWithParam<std::string> {
 protected:
  Context ctx{GetParam()};
};

TEST_P(PageAttention, MatchesReferenceInEveryDtype) {
  // GQA 2, contexts 0 (out 0), one full page, and mid-page ends; tables shuffled.
  const Case c{"gqa"};
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const auto r = run(ctx, c, t);
    EXPECT_LE(r.error, r.tolerance) << to_string(t) << ": " << test::head(r.got);
    // The empty sequence (index 1) gives exactly 0.
    for (std::int64_t i = 0; i < c.heads * c.dim; ++i)
      ASSERT_EQ(r.got[static_cast<std::size_t>(c.heads * c.dim + i)], 0.0) << to_string(t);
  }
}

TEST_P(PageAttention, HeadLayoutsAndOptions) {
  std::vector<Case> cases;
  cases.push_back({.name = "mqa", .heads = 8, .kv_heads = 1, .dim = 40, .block_size = 8});
  cases.push_back({.name = "mha", .heads = 3, .kv_heads = 3, .dim = 32, .block_size = 4, .contexts = {5, 1, 64}});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  // Rows not a multiple of 4 elements: the scalar load path.
  cases.push_back({.name = "odd head_dim", .heads = 2, .kv_heads = 1, .dim = 37, .block_size = 8, .contexts = {20, 50}});
  // Pages shared between sequences (fewer pages than table entries) and tables longer than needed.
  cases.push_back({.name = "shared pages", .num_blocks = 5, .contexts = {33, 70, 12}, .max_blocks = 6});
  cases.push_back({.name = "pages of 12", .block_size = 12, .contexts = {37, 0, 25, 90}});
  cases.push_back({.name = "long context, many splits", .heads = 2, .kv_heads = 1, .dim = 16, .block_size = 32,
                   .contexts = {1000, 777}});
  for (const auto& c : cases) {
    const auto r = run(ctx, c, DType::f32);
    EXPECT_LE(r.error, r.tolerance) << c.name << ": " << test::head(r.got);
  }
}

// Both kinds of pass 1, the tile pass (stream = 0) and the register-streamed one (stream = 1), on
// every layout and dtype, wherever both run: OpenCL C (OpenCL, CUDA) and GLSL (Vulkan). A device's
// heuristic picks one of them (PoCL the tile pass, GPUs and lavapipe the stream pass), so each is
// asked for here.
TEST_P(PageAttention, EachPassMatchesReference) {
  const Backend backend = ctx.device().info().backend;
  const auto clc = clc::backends();
  if (backend != Backend::vulkan && std::find(clc.begin(), clc.end(), backend) == clc.end())
    GTEST_SKIP() << "the two passes are OpenCL C's and Vulkan's";
  std::vector<Case> cases;
  cases.push_back({"gqa"});
  cases.push_back({.name = "mqa", .heads = 8, .kv_heads = 1, .dim = 40, .block_size = 8});
  cases.push_back({.name = "mha", .heads = 3, .kv_heads = 3, .dim = 32, .block_size = 4, .contexts = {5, 1, 64}});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  cases.push_back({.name = "odd head_dim", .heads = 2, .kv_heads = 1, .dim = 37, .block_size = 8, .contexts = {20, 50}});
  cases.push_back({.name = "head_dim 128, GQA 4", .heads = 8, .kv_heads = 2, .dim = 128, .contexts = {300, 0, 129}});
  cases.push_back({.name = "head_dim 100", .heads = 4, .kv_heads = 1, .dim = 100, .block_size = 8, .contexts = {77, 16}});
  // Page sizes that are not a power of two take a division where the others take a shift.
  cases.push_back({.name = "pages of 12", .block_size = 12, .contexts = {37, 0, 25, 90}});
  // The OpenCL C implementation itself (on cuda a native one is selected where it applies), or Vulkan's.
  const Implementation* impl = nullptr;
  for (const Implementation* i : Registry::global().implementations("page_attention"))
    if (i->backend() == backend &&
        (backend == Backend::vulkan || i->sources().front() == "decode_attention/decode_attention.cl"))
      impl = i;
  ASSERT_NE(impl, nullptr);
  for (const auto& c : cases)
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      Built b = build(ctx, c, t, 3);
      std::vector<Config> passes[2];
      for (const auto& cfg : impl->space(b.inv, ctx.device().info()).enumerate())
        if (cfg.get("stream") < 2) passes[cfg.get("stream")].push_back(cfg);  // 2: its own test
      for (const auto& configs : passes) {
        ASSERT_FALSE(configs.empty()) << c.name << " " << to_string(t);
        // The ends of the pass's space: the fewest and the most keys per tile (per work-item in
        // the stream pass), with the most splits.
        for (const Config& cfg : {configs.front(), configs.back()}) {
          Built r = build(ctx, c, t, 5);
          const auto args = r.args();
          impl->run(r.inv, cfg, args, ctx.device());
          const auto cmp = test::compare(pa::PageAttentionKernel(), r.inv, args, pa::arg::out, r.initial);
          EXPECT_LE(cmp.error, cmp.tolerance) << c.name << " " << to_string(t) << " " << cfg.canonical() << ": "
                                              << test::head(cmp.got);
        }
      }
    }
}

// The tensor-core pass (stream 2: Vulkan devices with 16x16x16 f16 cooperative matrices), every
// config of it, f16: GQA up to 16 rows a workgroup, head_dim 32 to 128, pages of 16 and 32,
// contexts ending mid-tile, shared pages, soft cap and scale. The heuristic takes it there.
TEST_P(PageAttention, CooperativeMatrixPassMatchesReference) {
  std::vector<Case> cases;
  cases.push_back({"gqa"});
  cases.push_back({.name = "GQA 8, head_dim 128, pages of 32", .heads = 16, .kv_heads = 2, .dim = 128, .block_size = 32,
                   .contexts = {300, 5, 129}});
  cases.push_back({.name = "16 rows", .heads = 16, .kv_heads = 1, .dim = 128, .contexts = {77, 400}});
  cases.push_back({.name = "mha, head_dim 32", .heads = 3, .kv_heads = 3, .dim = 32, .contexts = {5, 1, 64}});
  cases.push_back({.name = "shared pages", .num_blocks = 5, .contexts = {33, 70, 12}, .max_blocks = 6});
  cases.push_back({.name = "softcap and scale", .softcap = 2.5, .scale = 0.3});
  const bool offered = test::cooperative_pass_matches(
      ctx, cases, [&](const Case& c) { return build(ctx, c, DType::f16, 3).inv; },
      [&](const Case& c, const Config& cfg) { return run(ctx, c, DType::f16, cfg); });
  if (!offered) GTEST_SKIP() << ctx.device().info().id() << " has no cooperative-matrix pass";
}

TEST_P(PageAttention, EveryConfigOfASmallSpaceAgrees) {
  const Case c{.name = "space", .heads = 4, .kv_heads = 2, .dim = 32, .block_size = 8, .contexts = {150, 3, 64}};
  Built b = build(ctx, c, DType::f16, 9);
  const auto& impl = Registry::global().implementation(b.inv, ctx.device().info());
  const auto configs = impl.space(b.inv, ctx.device().info()).enumerate();
  ASSERT_GE(configs.size(), 8u);
  std::set<std::string> names;
  for (const auto& [name, _] : configs.front().values()) names.insert(name);
  EXPECT_TRUE(names.count("splits") && names.count("block_k")) << configs.front().canonical();
  std::vector<double> first;
  for (const auto& cfg : configs) {
    const auto r = run(ctx, c, DType::f16, cfg, 9);
    EXPECT_LE(r.error, r.tolerance) << cfg.canonical();
    if (first.empty()) first = r.got;
    // Splits and tiles only reorder f32 sums: results agree far inside the f16 tolerance.
    EXPECT_LE(test::relative_error(r.got, first), 2 * r.tolerance) << cfg.canonical();
  }
}

TEST_P(PageAttention, HeuristicIsInTheSpace) {
  for (auto [batch, ctxlen] : {std::pair{1, 512}, {32, 4096}, {64, 32768}}) {
    const Invocation inv = pa::PageAttentionKernel().from_sizes(
        {{"batch", batch}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"context", ctxlen}}, DType::f16, {});
    const auto& impl = Registry::global().implementation(inv, ctx.device().info());
    const Config h = impl.heuristic(inv, ctx.device().info());
    EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << h.canonical();
  }
}

TEST_P(PageAttention, BadInputNamesTheArgument) {
  const Case c{"bad"};
  Built b = build(ctx, c, DType::f32, 1);
  auto call = [&](const Tensor& q, const Tensor& kc, const Tensor& vc, const Tensor& lens, const Tensor& tables,
                  const PageAttentionOptions& o = {}) { (void)page_attention(ctx, q, kc, vc, lens, tables, o); };
  auto i32 = [&](const Shape& s, std::vector<double> v) { return ctx.from(s, DType::i32, v); };
  const std::int64_t batch = b.q.dim(0), mb = b.tables.dim(1), nb = b.kc.dim(0);
  test::expect_error([&] { call(b.q, b.kc, b.vc, i32({batch}, {37, 0, 16, static_cast<double>(mb * 16 + 1)}), b.tables); },
                     "context_lens[3] = " + std::to_string(mb * 16 + 1) + " is longer than");
  test::expect_error([&] { call(b.q, b.kc, b.vc, i32({batch}, {37, -1, 16, 9}), b.tables); }, "context_lens[1] = -1 is negative");
  std::vector<double> t = b.tables.read();
  t[1] = static_cast<double>(nb);
  test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, i32(b.tables.shape(), t)); },
                     "block_tables[0, 1] = " + std::to_string(nb) + " is not a block of key_cache");
  t[1] = -2;
  test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, i32(b.tables.shape(), t)); }, "block_tables[0, 1] = -2");
  // Unchecked, device kernels clamp page numbers into the cache (the CPU checks regardless).
  t[1] = 1e6;
  const Tensor wild = i32(b.tables.shape(), t);
  const PageAttentionOptions unchecked{.check_indices = false};
  if (ctx.device().info().backend == Backend::cpu) {
    test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, wild, unchecked); }, "block_tables[0, 1] = 1000000");
  } else {
    const Tensor out = page_attention(ctx, b.q, b.kc, b.vc, b.lens, wild, unchecked);
    for (double x : out.read()) ASSERT_TRUE(std::isfinite(x));
    // A context past its table reads the table's last entry again, never past the table.
    const Tensor long_lens = i32({batch}, {37, 0, 16, static_cast<double>(mb * 16 + 100)});
    const Tensor out2 = page_attention(ctx, b.q, b.kc, b.vc, long_lens, b.tables, unchecked);
    for (double x : out2.read()) ASSERT_TRUE(std::isfinite(x));
  }
  test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, i32({batch - 1, mb}, std::vector<double>(static_cast<std::size_t>((batch - 1) * mb), 0))); },
                     "block_tables [3, " + std::to_string(mb) + "] i32 must be i32 [4, max_blocks_per_seq >= 1]");
  test::expect_error([&] { call(b.q, b.kc, b.vc, i32({batch + 1}, std::vector<double>(static_cast<std::size_t>(batch + 1), 1)), b.tables); },
                     "context_lens [5] i32 must be i32 [4]");
  const Tensor kc3 = ctx.random({nb, 3, 16, 64}, DType::f32, 1);
  test::expect_error([&] { call(b.q, kc3, kc3, b.lens, b.tables); }, "kv_heads 3 of key_cache [");
  const Tensor kd = ctx.random({nb, 2, 16, 32}, DType::f32, 1);
  test::expect_error([&] { call(b.q, kd, kd, b.lens, b.tables); }, "head_dim differs: query [4, 4, 64] f32, key_cache [");
  test::expect_error([&] { call(b.q, b.kc, kd, b.lens, b.tables); }, "value_cache [");
  const Tensor kh = ctx.random(b.kc.shape(), DType::f16, 1);
  test::expect_error([&] { call(b.q, kh, kh, b.lens, b.tables); }, "dtypes differ: query [4, 4, 64] f32, key_cache");
  test::expect_error([&] { call(ctx.random({4, 64}, DType::f32, 1), b.kc, b.vc, b.lens, b.tables); },
                     "query [4, 64] f32 must have rank 3");
  test::expect_error([&] { call(b.q, b.kc, b.vc, ctx.from({batch}, DType::f32, std::vector<double>(4, 1)), b.tables); },
                     "context_lens [4] f32 must be i32 [4]");
  test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, b.tables, {.logits_soft_cap = -1}); }, "logits_soft_cap");
  test::expect_error([&] { call(b.q, b.kc, b.vc, b.lens, b.tables, {.softmax_scale = 0.0}); }, "softmax_scale");
  test::expect_error([&] { page_attention(ctx, b.q, b.kc, b.vc, b.lens, b.tables, ctx.empty({4, 4, 32}, DType::f32)); },
                     "out [4, 4, 32] f32 must be [4, 4, 64] f32");
}

INSTANTIATE_TEST_SUITE_P(Devices, PageAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

TEST(PageAttentionWorkloads, RecipeSizesGiveValidInputs) {
  const pa::PageAttentionKernel k;
  const Invocation inv = k.from_sizes({{"batch", 3}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}, {"context", 40}},
                                      DType::f16, {{"logits_soft_cap", 5.0}});
  EXPECT_EQ(inv.args[pa::arg::block_tables].shape, (Shape{3, 3}));
  EXPECT_EQ(inv.args[pa::arg::key_cache].shape, (Shape{9, 2, 16, 16}));
  const HostArrays a = k.inputs(inv, 3);
  EXPECT_EQ(a[pa::arg::context_lens], (std::vector<double>{48, 48, 48}));
  std::vector<double> pages = a[pa::arg::block_tables];
  std::sort(pages.begin(), pages.end());
  for (std::size_t i = 0; i < pages.size(); ++i) EXPECT_EQ(pages[i], static_cast<double>(i));
  EXPECT_EQ(k.reference(inv, a)[0].size(), 3u * 4 * 16);
  // Bytes: the caches' 9 pages of keys and values once, query and out, the index arrays.
  EXPECT_DOUBLE_EQ(k.bytes(inv), 2.0 * (2 * 3 * 48 * 2 * 16 + 2 * 3 * 4 * 16) + 4.0 * 3 * 4);
  test::expect_error([&] { (void)k.from_sizes({{"batch", 1}, {"heads", 4}, {"head_dim", 16}}, DType::f16, {}); },
                     "needs size 'context'");
  test::expect_error([&] { (void)k.from_sizes({{"batch", 1}, {"heads", 4}, {"head_dim", 16}, {"context", 8}, {"seq", 3}},
                                              DType::f16, {}); },
                     "has no size 'seq'");
}

}  // namespace
}  // namespace ejk
