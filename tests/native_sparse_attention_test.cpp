// Native sparse attention: native_sparse_attention and native_sparse_attention_bwd against the
// double-precision reference on random inputs (GQA groups, random block counts, random sorted
// and unsorted block indices with -1 markers, later blocks and repeats, odd lengths, packed
// sequences with an empty one), every storage dtype, every config of small spaces, bitwise
// repeatable gradients, and the errors, on every device.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "native_sparse_attention/nsa.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace nsa = kernels::native_sparse_attention;

struct Case {
  std::int64_t batch = 2, seq = 19, heads = 4, kv_heads = 2, dk = 16, dv = 16, selected = 3, block_size = 4;
  std::vector<std::int64_t> lengths{};  // packed sequences (batch 1, seq their sum) when given
  bool sorted = false;
  bool repeats = false;                 // some tokens list a block twice
  std::int64_t block_count = -1;        // >= 0: one count for every token, else random counts
};

std::vector<double> uniform(std::mt19937_64& rng, std::int64_t n) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0);
  }
  return v;
}

struct Inputs {
  Tensor q, k, v, g_cmp, g_slc, bi, dout;
  NsaOptions options;
};

Inputs build(const Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::int64_t B = c.lengths.empty() ? c.batch : 1;
  const std::int64_t T = c.lengths.empty() ? c.seq : std::accumulate(c.lengths.begin(), c.lengths.end(), std::int64_t{0});
  const std::int64_t HQ = c.heads, H = c.kv_heads, S = c.selected, BS = c.block_size;
  Inputs in;
  in.q = ctx.from({B, T, HQ, c.dk}, t, uniform(rng, B * T * HQ * c.dk));
  in.k = ctx.from({B, T, H, c.dk}, t, uniform(rng, B * T * H * c.dk));
  in.v = ctx.from({B, T, H, c.dv}, t, uniform(rng, B * T * H * c.dv));
  in.g_cmp = ctx.from({B, T, HQ}, t, uniform(rng, B * T * HQ));
  in.g_slc = ctx.from({B, T, HQ}, t, uniform(rng, B * T * HQ));
  in.dout = ctx.from({B, T, HQ, c.dv}, t, uniform(rng, B * T * HQ * c.dv));
  // Every token's sequence start and length.
  std::vector<std::int64_t> cu{0};
  if (c.lengths.empty())
    for (std::int64_t b = 0; b < B; ++b) cu.push_back((b + 1) * T);
  else
    for (auto n : c.lengths) cu.push_back(cu.back() + n);
  std::vector<double> bi(static_cast<std::size_t>(B * T * H * S)), bc(static_cast<std::size_t>(B * T * H));
  for (std::size_t n = 0; n + 1 < cu.size(); ++n)
    for (std::int64_t tok = cu[n]; tok < cu[n + 1]; ++tok) {
      const std::int64_t pos = tok - cu[n], len = cu[n + 1] - cu[n], nb = (len + BS - 1) / BS;
      for (std::int64_t h = 0; h < H; ++h) {
        // Distinct blocks of the sequence (later ones included: the kernel ignores them), the
        // token's own block first so that most tokens see their diagonal, -1 markers mixed in.
        std::vector<std::int64_t> blocks(static_cast<std::size_t>(nb));
        std::iota(blocks.begin(), blocks.end(), 0);
        std::shuffle(blocks.begin(), blocks.end(), rng);
        std::iter_swap(blocks.begin(), std::find(blocks.begin(), blocks.end(), pos / BS));
        std::vector<double> row(static_cast<std::size_t>(S), -1.0);
        for (std::int64_t i = 0; i < std::min(S, nb); ++i)
          row[static_cast<std::size_t>(i)] = (i > 0 && rng() % 4 == 0) ? -1.0 : static_cast<double>(blocks[static_cast<std::size_t>(i)]);
        if (c.repeats && S > 1 && rng() % 2) row[static_cast<std::size_t>(S - 1)] = row[0];
        if (c.sorted) std::sort(row.begin(), row.end());
        else std::shuffle(row.begin(), row.end(), rng);
        std::copy(row.begin(), row.end(), bi.begin() + (tok * H + h) * S);
        bc[static_cast<std::size_t>(tok * H + h)] =
            static_cast<double>(std::uniform_int_distribution<std::int64_t>(0, S)(rng));
      }
    }
  in.bi = ctx.from({B, T, H, S}, DType::i32, bi);
  in.options.block_size = BS;
  if (c.block_count >= 0) in.options.block_count = c.block_count;
  else in.options.block_counts = ctx.from({B, T, H}, DType::i32, bc);
  if (!c.lengths.empty()) {
    std::vector<double> cud(cu.begin(), cu.end());
    in.options.cu_seqlens = ctx.from({static_cast<std::int64_t>(cu.size())}, DType::i32, cud);
  }
  return in;
}

// The index arrays exactly as the API passes them.
struct Specs {
  Tensor counts, cu;
};

Specs index_arrays(const Context& ctx, const Inputs& in) {
  const std::int64_t B = in.q.dim(0), T = in.q.dim(1), H = in.k.dim(2), S = in.bi.dim(3);
  Specs s;
  s.counts = in.options.block_counts.defined()
                 ? in.options.block_counts
                 : ctx.from({B, T, H}, DType::i32,
                            std::vector<double>(static_cast<std::size_t>(B * T * H),
                                                static_cast<double>(in.options.block_count < 0 ? S : in.options.block_count)));
  if (in.options.cu_seqlens.defined()) {
    s.cu = in.options.cu_seqlens;
  } else {
    std::vector<double> cu;
    for (std::int64_t b = 0; b <= B; ++b) cu.push_back(static_cast<double>(b * T));
    s.cu = ctx.from({B + 1}, DType::i32, cu);
  }
  return s;
}

struct Checked {
  double worst = 0, tolerance = 0;
  std::vector<std::vector<double>> outputs;
};

Checked check_forward(const Context& ctx, const Inputs& in, NsaOutput& f, const std::optional<Config>& config = {}) {
  NsaOptions o = in.options;
  o.config = config;
  f = native_sparse_attention(ctx, in.q, in.k, in.v, in.g_cmp, in.g_slc, in.bi, o);
  const Specs ix = index_arrays(ctx, in);
  const Tensor args[] = {in.q, in.k, in.v, in.g_cmp, in.g_slc, in.bi, ix.counts, ix.cu, f.o, f.o_cmp, f.o_slc, f.lse};
  std::vector<TensorSpec> specs;
  HostArrays host;
  for (const auto& t : args) {
    specs.push_back(t.spec());
    host.push_back(t.read());
  }
  const Invocation inv = nsa::forward_invocation(specs, in.options.block_size);
  const nsa::NsaKernel k;
  const auto want = k.reference(inv, host);
  Checked r{0, k.tolerance(inv), {}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& got = host[nsa::fwd::o + i];
    r.worst = std::max(r.worst, test::relative_error(got, want[i]));
    r.outputs.push_back(got);
  }
  return r;
}

Checked check_backward(const Context& ctx, const Inputs& in, const NsaOutput& f, const std::optional<Config>& config = {}) {
  NsaOptions o = in.options;
  o.config = config;
  const NsaGrads g = native_sparse_attention_bwd(ctx, in.q, in.k, in.v, in.g_cmp, in.g_slc, in.bi, f, in.dout, o);
  const Specs ix = index_arrays(ctx, in);
  const Tensor args[] = {in.q,    in.k,    in.v,     in.g_cmp, in.g_slc, in.bi,    ix.counts, ix.cu,   f.o_cmp,
                         f.o_slc, f.lse,   in.dout,  g.dq,     g.dk,     g.dv,     g.dg_cmp,  g.dg_slc};
  std::vector<TensorSpec> specs;
  HostArrays host;
  for (const auto& t : args) {
    specs.push_back(t.spec());
    host.push_back(t.read());
  }
  const Invocation inv = nsa::backward_invocation(specs, in.options.block_size);
  const nsa::NsaBwdKernel k;
  const auto want = k.reference(inv, host);
  Checked r{0, k.tolerance(inv), {}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& got = host[nsa::bwd::dq + i];
    const double e = test::relative_error(got, want[i]);
    EXPECT_LE(e, r.tolerance) << "gradient " << i;
    r.worst = std::max(r.worst, e);
    r.outputs.push_back(got);
  }
  return r;
}

// The backward's specs as the API passes them: inputs, the index arrays, the forward's outputs and
// dout, then the gradients (shaped like q, k, v and the gates).
std::vector<TensorSpec> backward_specs(const Inputs& in, const Specs& ix, const NsaOutput& f) {
  return {in.q.spec(),   in.k.spec(),     in.v.spec(),     in.g_cmp.spec(), in.g_slc.spec(), in.bi.spec(),
          ix.counts.spec(), ix.cu.spec(), f.o_cmp.spec(),  f.o_slc.spec(),  f.lse.spec(),    in.dout.spec(),
          in.q.spec(),   in.k.spec(),     in.v.spec(),     in.g_cmp.spec(), in.g_slc.spec()};
}

// The tensor-core tests' cases: 16 query heads a kv head over more pooled blocks than one warp's
// tile (and more blocks than one tile of 16), a group of 4 (12 zero rows a fragment) with repeated
// blocks and head dims of 32 and 48, and a group of 32 (two groups of 16 a kv head) over packed
// sequences with an empty one.
const Case tensor_core_cases[] = {
    {.batch = 1, .seq = 300, .heads = 16, .kv_heads = 1, .dk = 64, .dv = 32, .selected = 6, .block_size = 16},
    {.batch = 2, .seq = 100, .heads = 8, .kv_heads = 2, .dk = 32, .dv = 48, .selected = 3, .block_size = 32, .repeats = true},
    {.heads = 32, .kv_heads = 1, .dk = 16, .dv = 16, .selected = 4, .block_size = 16, .lengths = {40, 0, 7, 70}},
};

class NativeSparseAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(NativeSparseAttention, ForwardAndGradientsMatchReferenceInEveryDtype) {
  Context ctx(GetParam());
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const Inputs in = build(ctx, {}, t, 7);
    NsaOutput f;
    const Checked fw = check_forward(ctx, in, f);
    EXPECT_LE(fw.worst, fw.tolerance) << to_string(t);
    const Checked bw = check_backward(ctx, in, f);
    EXPECT_LE(bw.worst, bw.tolerance) << to_string(t);
  }
}

TEST_P(NativeSparseAttention, GroupsWidthsAndSelections) {
  Context ctx(GetParam());
  // MHA with a wider key than value, sorted indices, one count for all; a group of four with
  // repeated blocks and every entry read; odd lengths and block sizes.
  const Case cases[] = {
      {.batch = 1, .seq = 23, .heads = 2, .kv_heads = 2, .dk = 16, .dv = 8, .selected = 4, .block_size = 5, .sorted = true, .block_count = 2},
      {.batch = 1, .seq = 17, .heads = 8, .kv_heads = 2, .dk = 16, .dv = 16, .selected = 3, .block_size = 4, .repeats = true, .block_count = 3},
  };
  for (const Case& c : cases) {
    const Inputs in = build(ctx, c, DType::f32, 3);
    NsaOutput f;
    const Checked fw = check_forward(ctx, in, f);
    EXPECT_LE(fw.worst, fw.tolerance) << c.heads << "/" << c.kv_heads;
    const Checked bw = check_backward(ctx, in, f);
    EXPECT_LE(bw.worst, bw.tolerance) << c.heads << "/" << c.kv_heads;
  }
}

TEST_P(NativeSparseAttention, PackedSequences) {
  Context ctx(GetParam());
  // An empty sequence, one shorter than a block, lengths that end mid-block.
  const Case c{.heads = 4, .kv_heads = 2, .selected = 3, .block_size = 4, .lengths = {9, 0, 3, 14}};
  for (DType t : {DType::f32, DType::bf16}) {
    const Inputs in = build(ctx, c, t, 5);
    NsaOutput f;
    const Checked fw = check_forward(ctx, in, f);
    EXPECT_LE(fw.worst, fw.tolerance) << to_string(t);
    const Checked bw = check_backward(ctx, in, f);
    EXPECT_LE(bw.worst, bw.tolerance) << to_string(t);
  }
}

TEST_P(NativeSparseAttention, EveryConfigOfASmallSpaceAgrees) {
  Context ctx(GetParam());
  const Case c{.batch = 1, .seq = 21, .heads = 4, .kv_heads = 2, .selected = 3, .block_size = 8};
  const Inputs in = build(ctx, c, DType::f32, 9);
  NsaOutput f;
  (void)check_forward(ctx, in, f);
  const Specs ix = index_arrays(ctx, in);
  std::vector<TensorSpec> fs{in.q.spec(), in.k.spec(), in.v.spec(), in.g_cmp.spec(), in.g_slc.spec(), in.bi.spec(),
                             ix.counts.spec(), ix.cu.spec(), f.o.spec(), f.o_cmp.spec(), f.o_slc.spec(), f.lse.spec()};
  const std::vector<TensorSpec> bs = backward_specs(in, ix, f);
  const DeviceInfo& dev = ctx.device().info();
  for (bool backward : {false, true}) {
    const Invocation inv = backward ? nsa::backward_invocation(bs, c.block_size) : nsa::forward_invocation(fs, c.block_size);
    const auto& impl = Registry::global().implementation(inv, dev);
    const auto configs = impl.space(inv, dev).enumerate();
    ASSERT_GE(configs.size(), 2u);
    std::vector<std::vector<double>> first;
    for (const Config& config : configs) {
      NsaOutput fc = f;
      const Checked r = backward ? check_backward(ctx, in, f, config) : check_forward(ctx, in, fc, config);
      EXPECT_LE(r.worst, r.tolerance) << config.canonical();
      if (first.empty()) first = r.outputs;
      else
        for (std::size_t i = 0; i < first.size(); ++i)
          EXPECT_LE(test::relative_error(r.outputs[i], first[i]), r.tolerance) << config.canonical() << " output " << i;
    }
  }
}

// The OpenCL forward on tensor cores (variant mma), where the device lists m16n8k16 fragments:
// tensor_core_cases (the warps split the first's compression branch) in f16 and bf16 against the
// double reference, every config of the variant. The heuristic takes it where offered.
TEST_P(NativeSparseAttention, TensorCoreForwardMatchesReference) {
  Context ctx(GetParam());
  const DeviceInfo& dev = ctx.device().info();
  std::size_t runs = 0;
  for (const Case& c : tensor_core_cases)
    for (DType t : {DType::f16, DType::bf16}) {
      const Inputs in = build(ctx, c, t, 13);
      const Specs ix = index_arrays(ctx, in);
      // The outputs' specs as the API allocates them: o, o_cmp, o_slc like q's rows of v, lse f32.
      const std::vector<std::int64_t> rows{in.q.dim(0), in.q.dim(1), in.q.dim(2)};
      std::vector<std::int64_t> orow = rows, lrow = rows;
      orow.push_back(in.v.dim(3));
      lrow.push_back(2);
      const TensorSpec o{orow, t}, l{lrow, DType::f32};
      const std::vector<TensorSpec> fs{in.q.spec(),  in.k.spec(), in.v.spec(), in.g_cmp.spec(), in.g_slc.spec(), in.bi.spec(),
                                       ix.counts.spec(), ix.cu.spec(), o, o, o, l};
      const Invocation inv = nsa::forward_invocation(fs, c.block_size);
      const auto& impl = Registry::global().implementation(inv, dev);
      for (const Config& config : impl.space(inv, dev).enumerate()) {
        if (!config.has("variant") || config.text("variant") != "mma") continue;
        NsaOutput f;
        const Checked r = check_forward(ctx, in, f, config);
        EXPECT_LE(r.worst, r.tolerance) << c.heads << "/" << c.kv_heads << " " << to_string(t) << " " << config.canonical();
        EXPECT_EQ(impl.heuristic(inv, dev).text("variant"), "mma");
        ++runs;
      }
    }
  if (runs == 0) GTEST_SKIP() << dev.id() << " (" << dev.name << ") offers no tensor-core forward";
  // Warps 2 and 4; tiles of 16 keys, and of 32 where blocks hold them (the second case's).
  EXPECT_EQ(runs, 16u);
}

// The backward's dq and key passes on tensor cores (variant mma): each (warps, tile) build, in f16
// and bf16, on tensor_core_cases, every gradient against the double reference. Runs where the
// device offers the tensor-core forward.
TEST_P(NativeSparseAttention, TensorCoreBackwardMatchesReference) {
  Context ctx(GetParam());
  const DeviceInfo& dev = ctx.device().info();
  std::size_t runs = 0;
  for (const Case& c : tensor_core_cases)
    for (DType t : {DType::f16, DType::bf16}) {
      const Inputs in = build(ctx, c, t, 17);
      NsaOutput f;
      (void)check_forward(ctx, in, f);
      const Invocation inv = nsa::backward_invocation(backward_specs(in, index_arrays(ctx, in), f), c.block_size);
      const auto& impl = Registry::global().implementation(inv, dev);
      std::set<std::pair<std::int64_t, std::int64_t>> builds;
      for (const Config& config : impl.space(inv, dev).enumerate()) {
        if (!config.has("variant") || config.text("variant") != "mma") continue;
        if (!builds.insert({config.get("mma_warps"), config.get("mma_block_n")}).second) continue;
        const Checked r = check_backward(ctx, in, f, config);
        EXPECT_LE(r.worst, r.tolerance) << c.heads << "/" << c.kv_heads << " " << to_string(t) << " " << config.canonical();
        EXPECT_EQ(impl.heuristic(inv, dev).text("variant"), "mma");
        ++runs;
      }
    }
  if (runs == 0) GTEST_SKIP() << dev.id() << " (" << dev.name << ") offers no tensor-core backward";
  // Warps 2 and 4; tiles of 16 keys, and of 32 where blocks hold them (the second case's).
  EXPECT_EQ(runs, 16u);
}

// The keys' gradients come from the selection's inverse: per block, the queries that list it in
// words of 32 (nsa_bwd_mark). Sequences of several words after a block, blocks longer than a
// word, tiles starting mid-word (every block_n of the space), repeats, an empty sequence, and
// sequences ending mid-word and mid-block, against the double reference.
TEST_P(NativeSparseAttention, KeyGradientsFromTheSelectionsInverse) {
  Context ctx(GetParam());
  const Case c{.heads = 4, .kv_heads = 2, .dk = 8, .dv = 8, .selected = 4, .block_size = 48,
               .lengths = {150, 0, 97, 33}, .repeats = true};
  const Inputs in = build(ctx, c, DType::f32, 21);
  NsaOutput f;
  (void)check_forward(ctx, in, f);
  const Invocation inv = nsa::backward_invocation(backward_specs(in, index_arrays(ctx, in), f), c.block_size);
  const DeviceInfo& dev = ctx.device().info();
  const auto& impl = Registry::global().implementation(inv, dev);
  std::set<std::int64_t> tiles;
  for (const Config& config : impl.space(inv, dev).enumerate()) {
    if (!config.has("block_n") || !tiles.insert(config.get("block_n")).second) continue;  // scalar tiles
    const Checked r = check_backward(ctx, in, f, config);
    EXPECT_LE(r.worst, r.tolerance) << config.canonical();
  }
  EXPECT_GE(tiles.size(), 3u) << "tiles of 8, 16 and 32 keys at least";
}

TEST_P(NativeSparseAttention, GradientsAreDeterministic) {
  Context ctx(GetParam());
  // No atomics: every gradient element has one writer, so two runs agree bit for bit.
  const Inputs in = build(ctx, {.heads = 8, .kv_heads = 2}, DType::f32, 13);
  NsaOutput f;
  (void)check_forward(ctx, in, f);
  const Checked a = check_backward(ctx, in, f), b = check_backward(ctx, in, f);
  for (std::size_t i = 0; i < a.outputs.size(); ++i) EXPECT_EQ(a.outputs[i], b.outputs[i]) << "gradient " << i;
}

TEST_P(NativeSparseAttention, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  const DeviceInfo& dev = ctx.device().info();
  for (auto [seq, heads, kv, dim, bs] : {std::tuple{4096, 64, 4, 128, 64}, {512, 16, 1, 64, 32}, {7, 2, 2, 16, 5}}) {
    for (bool backward : {false, true}) {
      const std::map<std::string, std::int64_t> sizes{{"batch", 1}, {"seq", seq}, {"heads", heads}, {"kv_heads", kv}, {"head_dim", dim}};
      const nlohmann::json options{{"block_size", bs}};
      const Invocation inv = backward ? nsa::NsaBwdKernel().from_sizes(sizes, DType::f16, options)
                                      : nsa::NsaKernel().from_sizes(sizes, DType::f16, options);
      const auto& impl = Registry::global().implementation(inv, dev);
      const Config h = impl.heuristic(inv, dev);
      EXPECT_EQ(impl.space(inv, dev).mismatch(h), "") << h.canonical();
    }
  }
}

TEST_P(NativeSparseAttention, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Case c{.batch = 1, .seq = 10, .heads = 2, .kv_heads = 1, .selected = 2, .block_size = 4};
  const Inputs in = build(ctx, c, DType::f32, 1);
  auto run = [&](const Inputs& x) { (void)native_sparse_attention(ctx, x.q, x.k, x.v, x.g_cmp, x.g_slc, x.bi, x.options); };
  {
    Inputs x = in;  // block 3 of a 10-token sequence of blocks of 4
    std::vector<double> b = x.bi.read();
    b[2] = 3;
    x.bi = ctx.from(x.bi.shape(), DType::i32, b);
    x.options.block_counts = ctx.from({1, 10, 1}, DType::i32, std::vector<double>(10, 2.0));
    expect_error([&] { run(x); }, "block_indices[0, 1, 0, 0] = 3 is not a block of its sequence of 10 tokens (3 blocks of 4)");
  }
  {
    Inputs x = in;
    x.options.block_counts = ctx.from({1, 10, 1}, DType::i32, std::vector<double>{0, 1, 2, 3, 0, 0, 0, 0, 0, 0});
    expect_error([&] { run(x); }, "block_counts[0, 3, 0] = 3 is outside [0, 2]");
  }
  {
    Inputs x = in;
    x.options.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 6, 9});
    expect_error([&] { run(x); }, "cu_seqlens[2] = 9 must be batch * seq = 10");
    x.options.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 6, 4});
    expect_error([&] { run(x); }, "cu_seqlens[2] = 4 is less than cu_seqlens[1] = 6");
  }
  {
    Inputs x = in;
    x.k = ctx.random({1, 10, 1, 8}, DType::f32, 2);
    expect_error([&] { run(x); }, "k [1, 10, 1, 8] f32 must be f32 [1, 10, 1, 16]");
    x = in;
    x.v = ctx.random({1, 9, 1, 16}, DType::f32, 2);
    expect_error([&] { run(x); }, "v [1, 9, 1, 16] f32 must be f32 [1, 10, 1, 16]");
    x = in;
    x.k = ctx.random({1, 10, 3, 16}, DType::f32, 2);
    expect_error([&] { run(x); }, "kv_heads dividing the 2 query heads");
    x = in;
    x.g_slc = ctx.random({1, 10, 2}, DType::f16, 2);
    expect_error([&] { run(x); }, "g_slc [1, 10, 2] f16 must be f32 [1, 10, 2]");
    x = in;
    x.bi = ctx.random({1, 10, 1, 2}, DType::f32, 2);
    expect_error([&] { run(x); }, "block_indices [1, 10, 1, 2] f32 must be i32 [1, 10, 1, 2]");
    x = in;
    x.options.block_counts = ctx.from({1, 10, 2}, DType::i32, std::vector<double>(20, 1.0));
    expect_error([&] { run(x); }, "block_counts [1, 10, 2] i32 must be i32 [1, 10, 1]");
    x = in;
    x.options.block_count = 3;
    x.options.block_counts = Tensor{};
    expect_error([&] { run(x); }, "block_count 3 is outside [0, 2]");
    x = in;
    x.options.block_size = 0;
    expect_error([&] { run(x); }, "option 'block_size' must be a positive integer");
  }
  NsaOutput f = native_sparse_attention(ctx, in.q, in.k, in.v, in.g_cmp, in.g_slc, in.bi, in.options);
  NsaOutput bad = f;
  bad.lse = ctx.random({1, 10, 2}, DType::f32, 3);
  expect_error([&] { (void)native_sparse_attention_bwd(ctx, in.q, in.k, in.v, in.g_cmp, in.g_slc, in.bi, bad, in.dout, in.options); },
               "lse [1, 10, 2] f32 must be f32 [1, 10, 2, 2]");
}

INSTANTIATE_TEST_SUITE_P(Devices, NativeSparseAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

}  // namespace
}  // namespace ejk
