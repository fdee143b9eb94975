// flash_attention and flash_attention_bwd against the double-precision references on random
// inputs, each option alone and in combinations, on every device that has an implementation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "flash_attention/flash_attention.hpp"
#include "common/philox.h"
#include "support.hpp"

namespace ejk {
namespace {

namespace fa = kernels::flash_attention;

bool implemented(const std::string& kernel, Backend b) {
  for (const Implementation* impl : Registry::global().implementations(kernel))
    if (impl->backend() == b) return true;
  return false;
}

// Every backend has both implementations: a device whose backend lacks one fails (rather than
// skips), so a registration lost in a build shows in CI.
#define REQUIRE_IMPLEMENTATION(ctx)                                                                          \
  do {                                                                                                       \
    if (!implemented("flash_attention", (ctx).device().info().backend) ||                                    \
        !implemented("flash_attention_bwd", (ctx).device().info().backend))                                  \
      FAIL() << "no flash_attention implementation registered for backend "                                 \
             << to_string((ctx).device().info().backend);                                                    \
  } while (0)

// Bias layouts: none, [B, H], [1, H], [B, 1], [1, 1] (+ seq_q, seq_k).
enum class Bias { none, full, heads_only, batch_only, shared };

struct Case {
  std::string name;
  std::int64_t batch = 2, sq = 17, sk = 19, heads = 4, kv_heads = 2, dim = 32;
  bool causal = false;
  std::int64_t left = -1, right = -1;
  std::int64_t diag = 0;  // diagonal_offset
  double softcap = 0, dropout = 0, scale = 0;
  std::uint64_t seed = 1234;
  Bias bias = Bias::none;
  bool sinks = false, segments = false;
  std::vector<std::pair<std::int64_t, std::int64_t>> varlen{};  // (q, k) lengths: packed input
  bool backward = true;
};

std::vector<double> uniform(std::mt19937_64& rng, std::int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0);
  }
  return v;
}

// Segment ids in runs; kv ids use fewer runs than q ids, so some queries match no key.
std::vector<double> runs(std::int64_t len, std::int64_t nrun) {
  std::vector<double> v(static_cast<std::size_t>(len));
  for (std::int64_t i = 0; i < len; ++i) v[static_cast<std::size_t>(i)] = static_cast<double>(i * nrun / std::max<std::int64_t>(len, 1));
  return v;
}

struct Built {
  Tensor q, k, v;
  AttentionOptions opts;
  fa::Options fopts;
  std::vector<Tensor> optional;  // bias, sinks, cu_q, cu_k, q_seg, k_seg in argument order (placeholders when absent)
};

Built build(Context& ctx, const Case& c, DType t, std::uint64_t data_seed) {
  std::mt19937_64 rng(data_seed);
  Built b;
  const bool packed = !c.varlen.empty();
  std::int64_t tq = 0, tk = 0, mq = 0, mk = 0;
  for (auto [lq, lk] : c.varlen) tq += lq, tk += lk, mq = std::max(mq, lq), mk = std::max(mk, lk);
  const std::int64_t nb = packed ? static_cast<std::int64_t>(c.varlen.size()) : c.batch;
  Shape qs = packed ? Shape{tq, c.heads, c.dim} : Shape{c.batch, c.sq, c.heads, c.dim};
  Shape ks = packed ? Shape{tk, c.kv_heads, c.dim} : Shape{c.batch, c.sk, c.kv_heads, c.dim};
  // q spans [-3, 3) so that softmax rows are far from uniform.
  b.q = ctx.from(qs, t, uniform(rng, numel(qs), -3, 3));
  b.k = ctx.from(ks, t, uniform(rng, numel(ks), -1, 1));
  b.v = ctx.from(ks, t, uniform(rng, numel(ks), -1, 1));
  auto& o = b.opts;
  o.causal = c.causal;
  o.sliding_window = {c.left, c.right};
  o.diagonal_offset = c.diag;
  o.logits_soft_cap = c.softcap;
  if (c.scale != 0) o.softmax_scale = c.scale;
  o.dropout = c.dropout;
  o.dropout_seed = c.seed;
  if (c.bias != Bias::none) {
    const bool fb = c.bias == Bias::full || c.bias == Bias::batch_only;
    const bool fh = c.bias == Bias::full || c.bias == Bias::heads_only;
    Shape s{fb ? c.batch : 1, fh ? c.heads : 1, c.sq, c.sk};
    o.bias = ctx.from(s, t, uniform(rng, numel(s), -2, 2));
  }
  if (c.sinks) o.softmax_aux = ctx.from({c.heads}, DType::f32, uniform(rng, c.heads, -1, 3));
  if (packed) {
    std::vector<double> cq{0}, ck{0};
    for (auto [lq, lk] : c.varlen) cq.push_back(cq.back() + static_cast<double>(lq)), ck.push_back(ck.back() + static_cast<double>(lk));
    o.cu_seqlens_q = ctx.from({nb + 1}, DType::i32, cq);
    o.cu_seqlens_k = ctx.from({nb + 1}, DType::i32, ck);
  }
  if (c.segments) {
    std::vector<double> sq_ids, sk_ids;
    for (std::int64_t s = 0; s < nb; ++s) {
      const std::int64_t lq = packed ? c.varlen[static_cast<std::size_t>(s)].first : c.sq;
      const std::int64_t lk = packed ? c.varlen[static_cast<std::size_t>(s)].second : c.sk;
      auto a = runs(lq, 4), bb = runs(lk, 3);
      sq_ids.insert(sq_ids.end(), a.begin(), a.end());
      sk_ids.insert(sk_ids.end(), bb.begin(), bb.end());
    }
    o.q_segment_ids = ctx.from(Shape(qs.begin(), qs.end() - 2), DType::i32, sq_ids);
    o.kv_segment_ids = ctx.from(Shape(ks.begin(), ks.end() - 2), DType::i32, sk_ids);
  }
  for (const Tensor* x : {&o.bias, &o.softmax_aux, &o.cu_seqlens_q, &o.cu_seqlens_k, &o.q_segment_ids, &o.kv_segment_ids})
    b.optional.push_back(x->defined() ? *x : ctx.empty({0}, DType::f32));
  b.fopts = {c.causal, c.left, c.right, c.softcap, c.dropout, c.scale, c.seed, packed ? mq : 0, packed ? mk : 0, c.diag};
  return b;
}

// Normwise error of lse where finite; -inf must sit exactly where the reference has it.
double lse_error(const std::vector<double>& got, const std::vector<double>& want, std::string& why) {
  std::vector<double> g, w;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const bool wi = std::isinf(want[i]), gi = std::isinf(got[i]);
    if (wi != gi || (wi && got[i] > 0)) {
      why = "lse[" + std::to_string(i) + "] = " + std::to_string(got[i]) + ", reference " + std::to_string(want[i]);
      return INFINITY;
    }
    if (!wi) g.push_back(got[i]), w.push_back(want[i]);
  }
  return test::relative_error(g, w);
}

struct Errors {
  double out = 0, lse = 0, dq = 0, dk = 0, dv = 0, dbias = 0, dsinks = 0;
  double tol_fwd = 0, tol_bwd = 0;
  std::string why;
};

Errors check(Context& ctx, const Case& c, DType t, std::uint64_t data_seed = 7,
             const std::optional<Config>& fwd_cfg = {}, const std::optional<Config>& bwd_cfg = {}) {
  Built b = build(ctx, c, t, data_seed);
  Errors e;
  AttentionOptions o = b.opts;
  o.config = fwd_cfg;
  AttentionOutput r = flash_attention(ctx, b.q, b.k, b.v, o);

  std::vector<TensorSpec> fs{b.q.spec(), b.k.spec(), b.v.spec()};
  HostArrays fa_in{b.q.read(), b.k.read(), b.v.read()};
  for (const auto& x : b.optional) fs.push_back(x.spec()), fa_in.push_back(x.read());
  fs.push_back(r.out.spec());
  fs.push_back(r.lse.spec());
  fa_in.push_back(r.out.read());
  fa_in.push_back(r.lse.read());
  const Invocation finv = fa::forward_invocation(fs, b.fopts);
  const fa::FlashAttentionKernel fk;
  const auto want = fk.reference(finv, fa_in);
  e.tol_fwd = fk.tolerance(finv);
  e.out = test::relative_error(fa_in[fa::fwd::out], want[0]);
  e.lse = lse_error(fa_in[fa::fwd::lse], want[1], e.why);
  if (!c.backward) return e;

  std::mt19937_64 rng(data_seed + 1);
  Tensor dout = ctx.from(b.q.shape(), t, uniform(rng, b.q.numel(), -1, 1));
  o.config = bwd_cfg;
  AttentionGrads g = flash_attention_bwd(ctx, b.q, b.k, b.v, r.out, dout, r.lse, o);
  std::vector<TensorSpec> bs{b.q.spec(), b.k.spec(), b.v.spec(), r.out.spec(), dout.spec(), r.lse.spec()};
  HostArrays bin{fa_in[0], fa_in[1], fa_in[2], fa_in[fa::fwd::out], dout.read(), fa_in[fa::fwd::lse]};
  for (const auto& x : b.optional) bs.push_back(x.spec()), bin.push_back(x.read());
  for (const Tensor* x : {&g.dq, &g.dk, &g.dv, &g.dbias, &g.dsoftmax_aux}) {
    Tensor y = x->defined() ? *x : ctx.empty({0}, DType::f32);
    bs.push_back(y.spec());
    bin.push_back(y.read());
  }
  const Invocation binv = fa::backward_invocation(bs, b.fopts);
  const fa::FlashAttentionBwdKernel bk;
  const auto gw = bk.reference(binv, bin);
  e.tol_bwd = bk.tolerance(binv);
  e.dq = test::relative_error(bin[fa::bwd::dq], gw[0]);
  e.dk = test::relative_error(bin[fa::bwd::dk], gw[1]);
  e.dv = test::relative_error(bin[fa::bwd::dv], gw[2]);
  if (g.dbias.defined()) e.dbias = test::relative_error(bin[fa::bwd::dbias], gw[3]);
  if (g.dsoftmax_aux.defined()) e.dsinks = test::relative_error(bin[fa::bwd::dsoftmax_aux], gw[4]);
  return e;
}

void expect_close(Context& ctx, const Case& c, DType t, const std::string& where = "") {
  Errors e = check(ctx, c, t);
  const std::string label = c.name + " " + std::string(to_string(t)) + where;
  EXPECT_LE(e.out, e.tol_fwd) << label << ": out";
  EXPECT_LE(e.lse, e.tol_fwd) << label << ": lse " << e.why;
  if (!c.backward) return;
  EXPECT_LE(e.dq, e.tol_bwd) << label << ": dq";
  EXPECT_LE(e.dk, e.tol_bwd) << label << ": dk";
  EXPECT_LE(e.dv, e.tol_bwd) << label << ": dv";
  EXPECT_LE(e.dbias, e.tol_bwd) << label << ": dbias";
  EXPECT_LE(e.dsinks, e.tol_bwd) << label << ": dsoftmax_aux";
}

// ---- device-independent ---------------------------------------------------------------------

// Every option alone and together, grouped queries and packed sequences: what the sampled
// references are checked under.
std::vector<Case> sampled_cases() {
  return {
      {.name = "plain", .kv_heads = 4},
      {.name = "gqa causal", .sq = 23, .sk = 23, .causal = true},
      {.name = "window", .sq = 33, .sk = 37, .left = 5, .right = 2, .diag = -3},
      {.name = "all options", .causal = true, .softcap = 2.5, .dropout = 0.3, .bias = Bias::full, .sinks = true, .segments = true},
      {.name = "bias per head", .bias = Bias::heads_only},
      {.name = "varlen", .causal = true, .bias = Bias::none, .segments = true, .varlen = {{5, 9}, {0, 3}, {12, 4}}},
  };
}

// The sampled reference is the full reference at the elements it samples, whatever the
// options, reading only inside each argument.
TEST(FlashAttentionSampledReference, IsTheFullReferenceAtItsElements) {
  Context ctx("cpu");
  const fa::FlashAttentionKernel fk;
  for (const Case& c : sampled_cases()) {
    Built b = build(ctx, c, DType::f32, 7);
    std::vector<TensorSpec> fs{b.q.spec(), b.k.spec(), b.v.spec()};
    HostArrays in{b.q.read(), b.k.read(), b.v.read()};
    for (const auto& x : b.optional) fs.push_back(x.spec()), in.push_back(x.read());
    const std::int64_t nq = b.q.numel() / c.dim;  // token-heads
    fs.push_back(b.q.spec());
    fs.push_back(TensorSpec{c.varlen.empty() ? Shape{c.batch, c.heads, c.sq} : Shape{c.heads, nq / c.heads}, DType::f32});
    in.emplace_back(static_cast<std::size_t>(b.q.numel()), 0.0);
    in.emplace_back(static_cast<std::size_t>(nq), 0.0);
    const Invocation inv = fa::forward_invocation(fs, b.fopts);
    const HostArrays want = fk.reference(inv, in);
    const ArgReader read = test::host_reader(in, fk.args(), c.name);
    const std::vector<SampledOutput> got = fk.sampled_reference(inv, read);
    ASSERT_EQ(got.size(), 2u) << c.name;
    for (const SampledOutput& s : got) {
      ASSERT_FALSE(s.index.empty()) << c.name;
      test::expect_sample_matches(s, want[s.arg - fa::fwd::out], c.name);
    }
    // The first query row of the first sequence with queries is among the samples.
    EXPECT_EQ(got[0].index.front(), 0) << c.name;
  }
}

// The backward's sampled reference is the full reference at its elements too: dq rows, dk and dv
// rows, and an unbroadcast dbias.
TEST(FlashAttentionSampledReference, BackwardIsTheFullReferenceAtItsElements) {
  Context ctx("cpu");
  const fa::FlashAttentionBwdKernel bk;
  for (const Case& c : sampled_cases()) {
    Built b = build(ctx, c, DType::f32, 7);
    std::mt19937_64 rng(8);
    const std::int64_t nq = b.q.numel() / c.dim;  // token-heads
    const TensorSpec lse{c.varlen.empty() ? Shape{c.batch, c.heads, c.sq} : Shape{c.heads, nq / c.heads}, DType::f32};
    std::vector<TensorSpec> bs{b.q.spec(), b.k.spec(), b.v.spec(), b.q.spec(), b.q.spec(), lse};
    // out and lse stay zero: the reference derives what it needs from q, k, v and dout.
    HostArrays in{b.q.read(), b.k.read(), b.v.read(), std::vector<double>(static_cast<std::size_t>(b.q.numel()), 0.0),
                  uniform(rng, b.q.numel(), -1, 1), std::vector<double>(static_cast<std::size_t>(nq), 0.0)};
    for (const auto& x : b.optional) bs.push_back(x.spec()), in.push_back(x.read());
    for (const TensorSpec& x : {b.q.spec(), b.k.spec(), b.v.spec(), b.optional[0].spec(), b.optional[1].spec()}) {
      bs.push_back(x);
      in.emplace_back(static_cast<std::size_t>(numel(x.shape)), 0.0);
    }
    const Invocation inv = fa::backward_invocation(bs, b.fopts);
    const HostArrays want = bk.reference(inv, in);
    const ArgReader read = test::host_reader(in, bk.args(), c.name);
    const std::vector<SampledOutput> got = bk.sampled_reference(inv, read);
    const bool dbias = c.bias == Bias::full;
    ASSERT_EQ(got.size(), dbias ? 4u : 3u) << c.name;
    for (const SampledOutput& s : got) {
      ASSERT_FALSE(s.index.empty()) << c.name;
      test::expect_sample_matches(s, want[s.arg - fa::bwd::dq], c.name);
    }
    EXPECT_EQ(got[0].arg, fa::bwd::dq) << c.name;
    EXPECT_EQ(got[0].index.front(), 0) << c.name;
  }
}

TEST(FlashAttentionPhilox, KnownAnswers) {
  auto r = ejk_philox4x32_10(ejk_make4(0, 0, 0, 0), 0, 0);
  EXPECT_EQ((std::array{r.x, r.y, r.z, r.w}), (std::array<std::uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  r = ejk_philox4x32_10(ejk_make4(~0u, ~0u, ~0u, ~0u), ~0u, ~0u);
  EXPECT_EQ((std::array{r.x, r.y, r.z, r.w}), (std::array<std::uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  r = ejk_philox4x32_10(ejk_make4(0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), 0xa4093822, 0x299f31d0);
  EXPECT_EQ((std::array{r.x, r.y, r.z, r.w}), (std::array<std::uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(FlashAttentionPhilox, KeepRateFollowsProbability) {
  for (double p : {0.1, 0.5, 0.9}) {
    const std::uint32_t th = fa::dropout_threshold(p);
    std::int64_t kept = 0, n = 0;
    for (std::uint32_t i = 0; i < 64; ++i)
      for (std::uint32_t j = 0; j < 512; ++j, ++n) kept += ejk_dropout_keep(3, 1, i, j, 42, 0, th);
    EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(n), 1 - p, 0.01) << p;
  }
  EXPECT_EQ(fa::dropout_threshold(0.0), 0u);
  EXPECT_EQ(fa::dropout_threshold(0.5), 0x80000000u);
  EXPECT_EQ(fa::dropout_threshold(std::nextafter(1.0, 0.0)), 0xFFFFFFFFu);
}

TEST(FlashAttentionWorkloads, RecipeSizesAndValidInputs) {
  const auto& fk = Registry::global().kernel("flash_attention");
  const auto& bk = Registry::global().kernel("flash_attention_bwd");
  Invocation f = fk.from_sizes({{"seq", 40}, {"heads", 4}, {"kv_heads", 2}, {"head_dim", 16}, {"batch", 2}}, DType::f16,
                               {{"causal", true}, {"bias", "heads"}, {"sinks", true}, {"segments", true}, {"window_left", 9}});
  EXPECT_EQ(f.args[fa::fwd::q].shape, (Shape{2, 40, 4, 16}));
  EXPECT_EQ(f.args[fa::fwd::bias].shape, (Shape{1, 4, 40, 40}));
  EXPECT_EQ(f.args[fa::fwd::lse].shape, (Shape{2, 4, 40}));
  EXPECT_TRUE(f.options.at("causal").get<bool>());
  Invocation b = bk.from_sizes({{"seq_q", 9}, {"seq_k", 33}, {"heads", 2}, {"head_dim", 8}}, DType::f32,
                               {{"bias", "shared"}, {"sinks", true}, {"segments", true}, {"causal", true}, {"logits_soft_cap", 3.0}});
  EXPECT_EQ(b.args[fa::bwd::dbias].shape, (Shape{1, 1, 9, 33}));
  // The backward's out and lse are the forward of its q, k, v.
  HostArrays a = bk.inputs(b, 3);
  std::vector<TensorSpec> fs;
  HostArrays fin;
  for (std::size_t i : {fa::bwd::q, fa::bwd::k, fa::bwd::v, fa::bwd::bias, fa::bwd::softmax_aux, fa::bwd::cu_seqlens_q,
                        fa::bwd::cu_seqlens_k, fa::bwd::q_segment_ids, fa::bwd::kv_segment_ids, fa::bwd::out, fa::bwd::lse})
    fs.push_back(b.args[i]), fin.push_back(a[i]);
  Invocation fwd_of_b = b;
  fwd_of_b.kernel = "flash_attention";
  fwd_of_b.args = fs;
  auto want = fk.reference(fwd_of_b, fin);
  EXPECT_LE(test::relative_error(a[fa::bwd::out], want[0]), 1e-5);
  std::string why;
  EXPECT_LE(lse_error(a[fa::bwd::lse], want[1], why), 1e-5) << why;
  // Packed invocations get offsets that respect their bounds.
  const TensorSpec pq{{10, 2, 8}, DType::f32}, pk{{7, 1, 8}, DType::f32}, cu{{4}, DType::i32};
  const TensorSpec args[] = {pq, pk, pk, fa::absent(), fa::absent(), cu, cu, fa::absent(), fa::absent(), pq, {{2, 10}, DType::f32}};
  Invocation packed = fa::forward_invocation(args, {.max_seqlen_q = 4, .max_seqlen_k = 3});
  HostArrays pa = fk.inputs(packed, 1);
  EXPECT_EQ(pa[fa::fwd::cu_seqlens_q], (std::vector<double>{0, 4, 7, 10}));
  EXPECT_EQ(pa[fa::fwd::cu_seqlens_k], (std::vector<double>{0, 3, 5, 7}));
  EXPECT_THROW(fk.inputs(fa::forward_invocation(args, {.max_seqlen_q = 3, .max_seqlen_k = 3}), 1), InvalidArgument);
  // Unknown sizes and options are named.
  try {
    (void)fk.from_sizes({{"seq", 8}, {"heads", 2}, {"head_dim", 8}, {"m", 3}}, DType::f32, nlohmann::json::object());
    ADD_FAILURE() << "expected an error for size m";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("no size 'm'"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)fk.from_sizes({{"seq", 8}, {"heads", 2}, {"head_dim", 8}}, DType::f32, {{"alibi", true}}), InvalidArgument);
  EXPECT_THROW((void)fk.from_sizes({{"heads", 2}, {"head_dim", 8}}, DType::f32, nlohmann::json::object()), InvalidArgument);
  // deterministic: a boolean, in the invocation (its cache key) only where asked for.
  const std::map<std::string, std::int64_t> small{{"seq", 8}, {"heads", 2}, {"head_dim", 8}};
  EXPECT_TRUE(bk.from_sizes(small, DType::f16, {{"deterministic", true}}).options.at("deterministic").get<bool>());
  EXPECT_FALSE(bk.from_sizes(small, DType::f16, {{"deterministic", false}}).options.contains("deterministic"));
  EXPECT_TRUE(fa::Problem::of(bk.from_sizes(small, DType::f16, {{"deterministic", true}})).deterministic);
  test::expect_error([&] { (void)bk.from_sizes(small, DType::f16, {{"deterministic", 1}}); },
                     "flash_attention_bwd option 'deterministic' must be a boolean, got 1");
  Invocation raw = bk.from_sizes(small, DType::f16, nlohmann::json::object());
  raw.options["deterministic"] = "yes";
  test::expect_error([&] { (void)fa::Problem::of(raw); }, "option 'deterministic' must be a boolean, got \"yes\"");
}

// ---- every device -------------------------------------------------------------------------

class FlashAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(FlashAttention, EachOptionAlone) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  std::vector<Case> cases = {
      {.name = "plain", .kv_heads = 4},
      {.name = "gqa"},
      {.name = "mqa", .kv_heads = 1},
      {.name = "causal", .sq = 23, .sk = 23, .causal = true},
      {.name = "causal sq<sk", .sq = 9, .sk = 40, .causal = true},
      {.name = "causal sq>sk", .sq = 40, .sk = 9, .causal = true},
      {.name = "window left", .sq = 33, .sk = 33, .left = 5},
      {.name = "window right", .sq = 33, .sk = 33, .right = 3},
      {.name = "window both", .sq = 20, .sk = 37, .left = 4, .right = 0},
      {.name = "window zero", .sq = 20, .sk = 20, .left = 0, .right = 0},
      // A shard of a longer sequence: the diagonal moved by diagonal_offset.
      {.name = "causal offset +7", .sq = 20, .sk = 20, .causal = true, .diag = 7},
      {.name = "causal offset -6", .sq = 20, .sk = 24, .causal = true, .diag = -6},
      {.name = "causal offset past", .sq = 20, .sk = 20, .causal = true, .diag = 20},
      {.name = "window offset", .sq = 33, .sk = 33, .left = 6, .right = 2, .diag = -10},
      {.name = "causal window offset", .sq = 33, .sk = 33, .causal = true, .left = 5, .diag = 30},
      {.name = "varlen causal offset", .causal = true, .diag = 3, .varlen = {{5, 9}, {7, 7}, {12, 4}}},
      {.name = "soft cap", .softcap = 2.5},
      {.name = "softmax scale", .scale = 0.3},
      {.name = "dropout", .dropout = 0.3},
      {.name = "bias", .bias = Bias::full},
      {.name = "bias heads only", .bias = Bias::heads_only},
      {.name = "bias batch only", .bias = Bias::batch_only},
      {.name = "bias shared", .bias = Bias::shared},
      {.name = "sinks", .sinks = true},
      {.name = "segments", .segments = true},
      {.name = "varlen", .varlen = {{5, 9}, {1, 1}, {17, 4}, {0, 3}, {6, 0}}},
      {.name = "head_dim 1", .dim = 1},
      {.name = "head_dim 7", .dim = 7},
      {.name = "head_dim 80", .dim = 80},
  };
  for (const auto& c : cases) expect_close(ctx, c, DType::f32);
}

TEST_P(FlashAttention, CombinationsAndDtypes) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  std::vector<Case> cases = {
      {.name = "causal+window+cap+gqa+sinks+dropout",
       .sq = 31,
       .sk = 45,
       .heads = 6,
       .kv_heads = 2,
       .causal = true,
       .left = 11,
       .softcap = 3.0,
       .dropout = 0.2,
       .sinks = true},
      {.name = "causal+window+cap+gqa offset (a ring shard)",
       .sq = 24,
       .sk = 24,
       .heads = 4,
       .kv_heads = 2,
       .causal = true,
       .left = 30,
       .diag = 24,
       .softcap = 3.0},
      {.name = "varlen+causal+window+segments+sinks+dropout",
       .heads = 4,
       .kv_heads = 1,
       .causal = true,
       .left = 9,
       .dropout = 0.1,
       .sinks = true,
       .segments = true,
       .varlen = {{13, 21}, {7, 7}, {30, 18}}},
      {.name = "bias+cap+causal+segments+gqa",
       .sq = 26,
       .sk = 26,
       .causal = true,
       .softcap = 4.0,
       .bias = Bias::heads_only,
       .segments = true},
      {.name = "bias shared+window+dropout+mqa", .kv_heads = 1, .left = 6, .right = 2, .dropout = 0.25, .bias = Bias::shared},
      {.name = "everything padded",
       .sq = 21,
       .sk = 35,
       .heads = 4,
       .kv_heads = 2,
       .dim = 48,
       .causal = true,
       .left = 13,
       .softcap = 5.0,
       .dropout = 0.15,
       .scale = 0.2,
       .bias = Bias::batch_only,
       .sinks = true,
       .segments = true},
  };
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    for (const auto& c : cases) expect_close(ctx, c, t);
}

TEST_P(FlashAttention, OddLengths) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  std::vector<Case> cases = {
      {.name = "1x1", .batch = 1, .sq = 1, .sk = 1},
      {.name = "7x7", .batch = 3, .sq = 7, .sk = 7, .causal = true},
      {.name = "129x129", .batch = 1, .sq = 129, .sk = 129, .heads = 2, .kv_heads = 1, .dim = 64, .causal = true},
      {.name = "1x1000 decode", .batch = 2, .sq = 1, .sk = 1000, .heads = 2, .kv_heads = 1, .dim = 64},
      {.name = "1000x1000", .batch = 1, .sq = 1000, .sk = 1000, .heads = 1, .kv_heads = 1, .dim = 64, .left = 200},
      {.name = "129x7", .batch = 1, .sq = 129, .sk = 7, .heads = 2, .kv_heads = 2},
  };
  for (const auto& c : cases) expect_close(ctx, c, DType::f32);
  expect_close(ctx, {.name = "129x1000 f16", .batch = 1, .sq = 129, .sk = 1000, .heads = 2, .kv_heads = 1, .dim = 64},
               DType::f16);
  expect_close(ctx, {.name = "7x129 bf16", .batch = 2, .sq = 7, .sk = 129, .causal = true}, DType::bf16);
}

TEST_P(FlashAttention, FullyMaskedRowsGiveZeroAndMinusInfinity) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  // Bottom-right causal with more queries than keys: query i sees keys j <= i - 4.
  for (bool sinks : {false, true}) {
    Case c{.name = "masked", .batch = 1, .sq = 9, .sk = 5, .heads = 2, .kv_heads = 1, .dim = 16, .causal = true, .sinks = sinks};
    Built b = build(ctx, c, DType::f32, 11);
    AttentionOutput r = flash_attention(ctx, b.q, b.k, b.v, b.opts);
    auto out = r.out.read(), lse = r.lse.read();
    auto sink = sinks ? b.opts.softmax_aux.read() : std::vector<double>{};
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 9; ++i) {
        const double l = lse[static_cast<std::size_t>(h * 9 + i)];
        if (i < 4) {
          if (sinks) EXPECT_NEAR(l, sink[static_cast<std::size_t>(h)], 1e-5) << "row " << i;
          else EXPECT_EQ(l, -std::numeric_limits<double>::infinity()) << "row " << i;
          for (std::int64_t d = 0; d < 16; ++d) EXPECT_EQ(out[static_cast<std::size_t>((i * 2 + h) * 16 + d)], 0.0);
        } else {
          EXPECT_TRUE(std::isfinite(l)) << "row " << i;
        }
      }
    // Gradients stay finite and match the reference there too.
    expect_close(ctx, c, DType::f32);
  }
}

TEST_P(FlashAttention, DropoutMaskFollowsTheSeed) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  Case c{.name = "dropout", .batch = 1, .sq = 24, .sk = 40, .dropout = 0.4};
  Built b = build(ctx, c, DType::f32, 3);
  auto o1 = flash_attention(ctx, b.q, b.k, b.v, b.opts).out.read();
  auto o2 = flash_attention(ctx, b.q, b.k, b.v, b.opts).out.read();
  EXPECT_EQ(o1, o2);
  AttentionOptions other = b.opts;
  other.dropout_seed = b.opts.dropout_seed + 1;
  auto o3 = flash_attention(ctx, b.q, b.k, b.v, other).out.read();
  EXPECT_GT(test::relative_error(o3, o1), 1e-2);
  // Only the seed's 64 bits matter: a seed differing in the high word gives another mask too.
  other.dropout_seed = b.opts.dropout_seed | (1ull << 40);
  auto o4 = flash_attention(ctx, b.q, b.k, b.v, other).out.read();
  EXPECT_GT(test::relative_error(o4, o1), 1e-2);
  // The reference draws the same mask, on this seed and another.
  for (std::uint64_t seed : {std::uint64_t{5}, std::uint64_t{0xFFFFFFFF00000001ull}}) {
    c.seed = seed;
    expect_close(ctx, c, DType::f32, " seed " + std::to_string(seed));
  }
}

TEST_P(FlashAttention, SampledConfigsOfTheSpace) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  Case c{.name = "configs",
         .batch = 1,
         .sq = 70,
         .sk = 150,
         .causal = true,
         .left = 60,
         .dropout = 0.1,
         .bias = Bias::shared,
         .sinks = true};
  Built b = build(ctx, c, DType::f32, 5);
  AttentionOutput r = flash_attention(ctx, b.q, b.k, b.v, b.opts);
  std::vector<TensorSpec> fs{b.q.spec(), b.k.spec(), b.v.spec()};
  for (const auto& x : b.optional) fs.push_back(x.spec());
  fs.push_back(r.out.spec());
  fs.push_back(r.lse.spec());
  const Invocation inv = fa::forward_invocation(fs, b.fopts);
  // The backward's space is its own (its passes keep more in shared memory).
  std::vector<TensorSpec> bs{b.q.spec(), b.k.spec(), b.v.spec(), r.out.spec(), b.q.spec(), r.lse.spec()};
  for (const auto& x : b.optional) bs.push_back(x.spec());
  for (const Tensor* x : {&b.q, &b.k, &b.v, &b.optional[0], &b.optional[1]}) bs.push_back(x->spec());
  const Invocation binv = fa::backward_invocation(bs, b.fopts);
  auto sample = [&](const Invocation& i) {
    const auto& impl = Registry::global().implementation(i, ctx.device().info());
    auto configs = impl.space(i, ctx.device().info()).enumerate();
    EXPECT_FALSE(configs.empty()) << i.kernel;
    std::mt19937 rng(42);
    std::shuffle(configs.begin(), configs.end(), rng);
    configs.resize(std::min<std::size_t>(configs.size(), 6));
    return configs;
  };
  const auto fwd_configs = sample(inv), bwd_configs = sample(binv);
  for (std::size_t i = 0; i < std::min(fwd_configs.size(), bwd_configs.size()); ++i) {
    const Config &fc = fwd_configs[i], &bc = bwd_configs[i];
    Errors e = check(ctx, c, DType::f32, 5, fc, bc);
    EXPECT_LE(e.out, e.tol_fwd) << fc.canonical();
    EXPECT_LE(e.dq, e.tol_bwd) << bc.canonical();
    EXPECT_LE(e.dk, e.tol_bwd) << bc.canonical();
    EXPECT_LE(e.dv, e.tol_bwd) << bc.canonical();
    EXPECT_LE(e.dbias, e.tol_bwd) << bc.canonical();
    EXPECT_LE(e.dsinks, e.tol_bwd) << bc.canonical();
  }
}

TEST_P(FlashAttention, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  for (auto [sq, sk, d] : {std::tuple{1, 4096, 128}, {2048, 2048, 64}, {7, 7, 7}, {4096, 4096, 128}, {1, 1, 256}})
    for (DType t : {DType::f32, DType::f16}) {
      const TensorSpec q{{1, sq, 8, d}, t}, k{{1, sk, 2, d}, t};
      std::vector<TensorSpec> fs{q, k, k};
      for (int i = 0; i < 6; ++i) fs.push_back(fa::absent());
      fs.push_back(q);
      fs.push_back({{1, 8, sq}, DType::f32});
      const Invocation inv = fa::forward_invocation(fs, {.causal = true});
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      Config h = impl.heuristic(inv, ctx.device().info());
      EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << h.canonical();
    }
}

TEST_P(FlashAttention, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const DType f = DType::f32;
  Tensor q = ctx.random({2, 8, 4, 16}, f), k = ctx.random({2, 10, 2, 16}, f), v = ctx.random({2, 10, 2, 16}, f);
  expect_error([&] { flash_attention(ctx, ctx.random({1, 4, 2, 300}, f), ctx.random({1, 4, 2, 300}, f),
                                     ctx.random({1, 4, 2, 300}, f)); },
               "head_dim 300 is not supported");
  expect_error([&] { flash_attention(ctx, q, ctx.random({2, 10, 3, 16}, f), ctx.random({2, 10, 3, 16}, f)); },
               "kv_heads 3 of k [2, 10, 3, 16] f32 does not divide heads 4");
  expect_error([&] { flash_attention(ctx, q, k, ctx.random({2, 10, 2, 16}, DType::f16)); }, "dtypes differ");
  expect_error([&] { flash_attention(ctx, q, k, ctx.random({2, 11, 2, 16}, f)); }, "v [2, 11, 2, 16]");
  expect_error([&] { flash_attention(ctx, q, k, v, {.sliding_window = {-2, -1}}); }, "window_left = -2");
  expect_error([&] { flash_attention(ctx, q, k, v, {.diagonal_offset = std::int64_t{1} << 31}); },
               "diagonal_offset 2147483648 is outside");
  expect_error([&] { flash_attention(ctx, q, k, v, {.dropout = 1.0}); }, "dropout probability 1.000000 is not in [0, 1)");
  expect_error([&] { flash_attention(ctx, q, k, v, {.dropout = -0.1}); }, "not in [0, 1)");
  expect_error([&] { flash_attention(ctx, q, k, v, {.logits_soft_cap = -1}); }, "logits_soft_cap");
  expect_error([&] { flash_attention(ctx, q, k, v, {.bias = ctx.random({2, 3, 8, 10}, f)}); },
               "bias [2, 3, 8, 10] f32 is not broadcastable");
  expect_error([&] { flash_attention(ctx, q, k, v, {.softmax_aux = ctx.random({3}, f)}); }, "softmax_aux [3]");
  expect_error([&] { flash_attention(ctx, q, k, v, {.q_segment_ids = ctx.random({2, 8}, DType::i32)}); },
               "need both q_segment_ids and kv_segment_ids");
  expect_error([&] { flash_attention(ctx, q, k, v, {.q_segment_ids = ctx.random({2, 8}, DType::i32),
                                                    .kv_segment_ids = ctx.random({2, 9}, DType::i32)}); },
               "kv_segment_ids [2, 9] i32 must be i32 [2, 10]");
  expect_error([&] { flash_attention(ctx, ctx.random({2, 8, 4, 16}, DType::i32), k, v); }, "i32 is not supported");

  // Packed input and its offsets.
  Tensor pq = ctx.random({12, 4, 16}, f), pk = ctx.random({9, 2, 16}, f), pv = ctx.random({9, 2, 16}, f);
  auto cu = [&](std::vector<double> x) { return ctx.from({static_cast<std::int64_t>(x.size())}, DType::i32, x); };
  expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({1, 5, 12}), .cu_seqlens_k = cu({0, 4, 9})}); },
               "cu_seqlens_q [1, 5, 12] must start at 0");
  expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({0, 7, 5, 12}), .cu_seqlens_k = cu({0, 4, 6, 9})}); },
               "cu_seqlens_q [0, 7, 5, 12] decreases at index 2");
  expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({0, 5, 12}), .cu_seqlens_k = cu({0, 4, 8})}); },
               "cu_seqlens_k [0, 4, 8] ends at 8, not at the token count 9");
  expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({0, 5, 12})}); }, "needs both cu_seqlens_q");
  expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({0, 5, 12}), .cu_seqlens_k = cu({0, 9})}); },
               "cu_seqlens differ in batch");
  expect_error([&] { flash_attention(ctx, q, k, v, {.cu_seqlens_q = cu({0, 5, 12}), .cu_seqlens_k = cu({0, 4, 9})}); },
               "must have rank 3");
  // Offsets trusted through max_seqlen are still checked where the implementation can read them.
  if (implemented("flash_attention", ctx.device().info().backend) && ctx.device().info().backend == Backend::cpu)
    expect_error([&] { flash_attention(ctx, pq, pk, pv, {.cu_seqlens_q = cu({0, 7, 5, 12}), .cu_seqlens_k = cu({0, 4, 6, 9}),
                                                         .max_seqlen_q = 8, .max_seqlen_k = 8}); },
                 "decreases");

  // Backward: arguments must match the forward's.
  Tensor out = ctx.random({2, 8, 4, 16}, f), dout = ctx.random({2, 8, 4, 16}, f), lse = ctx.random({2, 4, 8}, f);
  expect_error([&] { flash_attention_bwd(ctx, q, k, v, out, dout, ctx.random({2, 4, 9}, f)); }, "lse [2, 4, 9]");
  expect_error([&] { flash_attention_bwd(ctx, q, k, v, out, ctx.random({2, 8, 4, 16}, DType::bf16), lse); }, "dout");
  AttentionGrads g{ctx.empty(q.shape(), f), ctx.empty(k.shape(), f), ctx.empty(v.shape(), f), ctx.empty({2, 4, 8, 10}, f), {}};
  expect_error([&] { flash_attention_bwd(ctx, q, k, v, out, dout, lse, g); }, "dbias [2, 4, 8, 10] f32 given without a bias");
}

TEST_P(FlashAttention, ApiShapes) {
  Context ctx(GetParam());
  REQUIRE_IMPLEMENTATION(ctx);
  Tensor q = ctx.random({1, 5, 4, 8}, DType::f16), k = ctx.random({1, 6, 1, 8}, DType::f16), v = ctx.random({1, 6, 1, 8}, DType::f16);
  auto [out, lse] = flash_attention(ctx, q, k, v, {.causal = true});
  EXPECT_EQ(out.shape(), q.shape());
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_EQ(lse.shape(), (Shape{1, 4, 5}));
  EXPECT_EQ(lse.dtype(), DType::f32);
  auto g = flash_attention_bwd(ctx, q, k, v, out, out, lse, {.causal = true});
  EXPECT_EQ(g.dk.shape(), k.shape());
  EXPECT_FALSE(g.dbias.defined());
  Tensor pq = ctx.random({9, 4, 8}, DType::f32), pk = ctx.random({11, 2, 8}, DType::f32);
  auto p = flash_attention(ctx, pq, pk, pk,
                           {.cu_seqlens_q = ctx.from({3}, DType::i32, std::vector<double>{0, 4, 9}),
                            .cu_seqlens_k = ctx.from({3}, DType::i32, std::vector<double>{0, 6, 11})});
  EXPECT_EQ(p.lse.shape(), (Shape{4, 9}));
}

INSTANTIATE_TEST_SUITE_P(All, FlashAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
