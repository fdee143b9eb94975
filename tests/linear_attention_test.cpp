// Linear attention: recurrent, gla and lightning_attention, forward and backward, against the
// double-precision token loop (and its reverse-mode gradient) on random inputs, on every device:
// each gate alone and all together, initial and final states, reverse, packed and padded
// sequences, lengths that are no multiple of the chunk, every dtype, every config of a small
// space, and errors that name the argument.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "linear_attention/linear_attention.hpp"
#include "support.hpp"

namespace ejk {
namespace {

namespace la = kernels::linear_attention;

std::vector<double> uniform(std::mt19937_64& rng, std::int64_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) {
    do x = d(rng);
    while (x == 0.0);
  }
  return v;
}

struct Case {
  std::int64_t batch = 2, seq = 37, heads = 2, K = 16, V = 24;
  bool g = false, gamma = false, gk = false, gv = false;
  bool h0 = false, ht = false, reverse = false;
  std::vector<double> cu{};  // packed: batch must be 1
  double gate_lo = -0.4, gate_hi = -0.01;
  std::string label() const {
    std::string s = std::string(g ? "g " : "") + (gamma ? "g_gamma " : "") + (gk ? "gk " : "") + (gv ? "gv " : "") +
                    (h0 ? "h0 " : "") + (ht ? "ht " : "") + (reverse ? "reverse " : "") + (cu.empty() ? "" : "packed ");
    return s.empty() ? "plain" : s;
  }
};

struct Inputs {
  Case c;
  DType t;
  Tensor q, k, v, dout, dht;
  LinearAttentionOptions o;
  std::int64_t states() const { return c.cu.empty() ? c.batch : static_cast<std::int64_t>(c.cu.size()) - 1; }
};

Inputs make(const Context& ctx, const Case& c, DType t, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in{c, t, {}, {}, {}, {}, {}, {}};
  const std::int64_t B = c.batch, T = c.seq, H = c.heads, K = c.K, V = c.V;
  const std::int64_t N = c.cu.empty() ? B : static_cast<std::int64_t>(c.cu.size()) - 1;
  in.q = ctx.from({B, T, H, K}, t, uniform(rng, B * T * H * K, -1, 1));
  in.k = ctx.from({B, T, H, K}, t, uniform(rng, B * T * H * K, -1, 1));
  in.v = ctx.from({B, T, H, V}, t, uniform(rng, B * T * H * V, -1, 1));
  in.dout = ctx.from({B, T, H, V}, t, uniform(rng, B * T * H * V, -1, 1));
  if (c.g) in.o.g = ctx.from({B, T, H}, t, uniform(rng, B * T * H, c.gate_lo, c.gate_hi));
  if (c.gamma) in.o.g_gamma = ctx.from({H}, t, uniform(rng, H, c.gate_lo, c.gate_hi));
  if (c.gk) in.o.gk = ctx.from({B, T, H, K}, t, uniform(rng, B * T * H * K, c.gate_lo, c.gate_hi));
  if (c.gv) in.o.gv = ctx.from({B, T, H, V}, t, uniform(rng, B * T * H * V, c.gate_lo, c.gate_hi));
  if (c.h0) in.o.initial_state = ctx.from({N, H, K, V}, t, uniform(rng, N * H * K * V, -1, 1));
  if (c.ht) in.dht = ctx.from({N, H, K, V}, t, uniform(rng, N * H * K * V, -1, 1));
  if (!c.cu.empty()) in.o.cu_seqlens = ctx.from({N + 1}, DType::i32, c.cu);
  in.o.reverse = c.reverse;
  in.o.return_state = c.ht;
  return in;
}

std::vector<double> read_or_empty(const Tensor& t) { return t.defined() ? t.read() : std::vector<double>{}; }

// The full argument list's values (outputs empty), for the references.
HostArrays host_args(const Inputs& in, bool backward) {
  HostArrays a{in.q.read(),
               in.k.read(),
               in.v.read(),
               read_or_empty(in.o.g),
               read_or_empty(in.o.g_gamma),
               read_or_empty(in.o.gk),
               read_or_empty(in.o.gv),
               read_or_empty(in.o.initial_state),
               read_or_empty(in.o.cu_seqlens)};
  if (!backward) {
    a.resize(la::fwd::count);
  } else {
    a.push_back(in.dout.read());
    a.push_back(read_or_empty(in.dht));
    a.resize(la::bwd::count);
  }
  return a;
}

la::Problem problem(const Inputs& in, la::Variant var, bool backward) {
  la::Problem p;
  p.variant = var;
  p.backward = backward;
  p.varlen = !in.c.cu.empty();
  p.batch = in.c.batch;
  p.seq = in.c.seq;
  p.heads = in.c.heads;
  p.K = in.c.K;
  p.V = in.c.V;
  p.num_seqs = in.states();
  p.dtype = in.t;
  p.has_g = in.c.g;
  p.has_gamma = in.c.gamma || var == la::Variant::lightning;
  p.has_gk = in.c.gk;
  p.has_gv = in.c.gv;
  p.has_h0 = in.c.h0;
  p.has_ht = in.c.ht;
  p.reverse = in.c.reverse;
  p.scale = in.o.scale ? *in.o.scale : 1.0 / std::sqrt(static_cast<double>(in.c.K));
  p.layer_idx = in.o.layer_idx;
  p.num_layers = in.o.num_layers;
  p.slopes = in.o.slopes;
  return p;
}

double tolerance(const Inputs& in, bool backward) {
  const double longest = static_cast<double>(in.c.seq * std::max(in.c.K, in.c.V));
  const double t = default_tolerance(in.t) * std::max(1.0, std::sqrt(longest / 1024.0));
  return backward ? t * la::gradient_tolerance_factor : t;
}

LinearAttentionResult forward(const Context& ctx, la::Variant var, const Inputs& in) {
  switch (var) {
    case la::Variant::recurrent: return recurrent(ctx, in.q, in.k, in.v, in.o);
    case la::Variant::gla: return gla(ctx, in.q, in.k, in.v, in.o);
    default: return lightning_attention(ctx, in.q, in.k, in.v, in.o);
  }
}

LinearAttentionGrads backward(const Context& ctx, la::Variant var, const Inputs& in) {
  switch (var) {
    case la::Variant::recurrent: return recurrent_bwd(ctx, in.q, in.k, in.v, in.dout, in.o, in.dht);
    case la::Variant::gla: return gla_bwd(ctx, in.q, in.k, in.v, in.dout, in.o, in.dht);
    default: return lightning_attention_bwd(ctx, in.q, in.k, in.v, in.dout, in.o, in.dht);
  }
}

std::vector<double> gamma_of(const la::Problem& p, const HostArrays& full) { return p.gamma(full); }

// Forward of `var` against the reference; returns o's values.
std::vector<double> check_forward(const Context& ctx, la::Variant var, const Inputs& in, const std::string& what) {
  const auto r = forward(ctx, var, in);
  const la::Problem p = problem(in, var, false);
  const HostArrays full = host_args(in, false);
  const HostArrays want = la::reference_forward(p, full, gamma_of(p, full));
  const double tol = tolerance(in, false);
  const auto o = r.o.read();
  EXPECT_LE(test::relative_error(o, want[0]), tol) << what << " o";
  if (in.c.ht) EXPECT_LE(test::relative_error(r.final_state.read(), want[1]), tol) << what << " final_state";
  else EXPECT_FALSE(r.final_state.defined());
  return o;
}

void check_backward(const Context& ctx, la::Variant var, const Inputs& in, const std::string& what) {
  const auto g = backward(ctx, var, in);
  const la::Problem p = problem(in, var, true);
  const HostArrays full = host_args(in, true);
  HostArrays want = la::reference_backward(p, full, gamma_of(p, full));
  if (var == la::Variant::lightning) want.insert(want.begin() + 3, 3, std::vector<double>{});
  const double tol = tolerance(in, true);
  const Tensor got[] = {g.dq, g.dk, g.dv, g.dg, g.dgk, g.dgv, g.dh0};
  const char* names[] = {"dq", "dk", "dv", "dg", "dgk", "dgv", "dh0"};
  for (int i = 0; i < 7; ++i) {
    if (want[static_cast<std::size_t>(i)].empty()) {
      EXPECT_FALSE(got[i].defined()) << what << " " << names[i];
      continue;
    }
    ASSERT_TRUE(got[i].defined()) << what << " " << names[i];
    EXPECT_LE(test::relative_error(got[i].read(), want[static_cast<std::size_t>(i)]), tol) << what << " " << names[i];
  }
}

std::vector<Case> gate_cases() {
  std::vector<Case> cs;
  cs.push_back({});
  cs.push_back({.g = true});
  cs.push_back({.gamma = true, .h0 = true});
  cs.push_back({.gk = true, .ht = true, .reverse = true});
  cs.push_back({.gv = true, .h0 = true, .ht = true});
  cs.push_back({.g = true, .gamma = true, .gk = true, .gv = true, .h0 = true, .ht = true});
  cs.push_back({.g = true, .gamma = true, .gk = true, .gv = true, .h0 = true, .ht = true, .reverse = true});
  return cs;
}

class LinearAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearAttention, ForwardMatchesReferenceForEveryGate) {
  Context ctx(GetParam());
  for (auto var : {la::Variant::recurrent, la::Variant::gla})
    for (const Case& c : gate_cases())
      check_forward(ctx, var, make(ctx, c, DType::f32, 3), std::string(la::kernel_name(var, false)) + " " + c.label());
}

TEST_P(LinearAttention, BackwardMatchesReferenceForEveryGate) {
  Context ctx(GetParam());
  for (auto var : {la::Variant::recurrent, la::Variant::gla})
    for (const Case& c : gate_cases())
      check_backward(ctx, var, make(ctx, c, DType::f32, 4), std::string(la::kernel_name(var, true)) + " " + c.label());
}

TEST_P(LinearAttention, SixteenBitDtypes) {
  Context ctx(GetParam());
  const Case c{.g = true, .gamma = true, .gk = true, .gv = true, .h0 = true, .ht = true};
  for (DType t : {DType::f16, DType::bf16})
    for (auto var : {la::Variant::recurrent, la::Variant::gla}) {
      const Inputs in = make(ctx, c, t, 5);
      const std::string what = std::string(la::kernel_name(var, false)) + " " + std::string(to_string(t));
      check_forward(ctx, var, in, what);
      check_backward(ctx, var, in, what + " bwd");
    }
}

TEST_P(LinearAttention, PackedSequences) {
  Context ctx(GetParam());
  // An empty sequence, one shorter than a chunk, one longer than two.
  for (bool reverse : {false, true}) {
    const Case c{.batch = 1, .seq = 60, .g = true, .gk = true, .gv = true, .h0 = true, .ht = true, .reverse = reverse,
                 .cu = {0, 7, 7, 60}};
    for (auto var : {la::Variant::recurrent, la::Variant::gla}) {
      const Inputs in = make(ctx, c, DType::f32, 6);
      check_forward(ctx, var, in, std::string(la::kernel_name(var, false)) + " " + c.label());
      check_backward(ctx, var, in, std::string(la::kernel_name(var, true)) + " " + c.label());
    }
  }
}

TEST_P(LinearAttention, ChunkedEqualsTokenLoopWithStrongDecays) {
  Context ctx(GetParam());
  // Decays down to e^-6 a token: the chunk's relative decays span far more than f32's range
  // if taken from one reference point.
  const Case c{.seq = 70, .g = true, .gk = true, .gv = true, .h0 = true, .ht = true, .gate_lo = -6.0, .gate_hi = -0.001};
  const Inputs in = make(ctx, c, DType::f32, 8);
  const auto a = check_forward(ctx, la::Variant::recurrent, in, "recurrent strong");
  const auto b = check_forward(ctx, la::Variant::gla, in, "gla strong");
  EXPECT_LE(test::relative_error(b, a), tolerance(in, false));
  check_backward(ctx, la::Variant::gla, in, "gla_bwd strong");
}

TEST_P(LinearAttention, LightningMatchesReference) {
  Context ctx(GetParam());
  for (const std::string slopes : {"linear", "alibi"})
    for (bool reverse : {false, true}) {
      Case c{.heads = 3, .h0 = true, .ht = true, .reverse = reverse};
      Inputs in = make(ctx, c, DType::f32, 9);
      in.o.layer_idx = 2;
      in.o.num_layers = 5;
      in.o.slopes = slopes;
      check_forward(ctx, la::Variant::lightning, in, "lightning " + slopes);
      check_backward(ctx, la::Variant::lightning, in, "lightning_bwd " + slopes);
    }
  Inputs in = make(ctx, {}, DType::bf16, 10);
  in.o.layer_idx = 0;
  in.o.num_layers = 2;
  check_forward(ctx, la::Variant::lightning, in, "lightning bf16");
}

TEST_P(LinearAttention, EveryConfigOfEachSpaceAgrees) {
  Context ctx(GetParam());
  // Narrow heads and a short sequence keep the spaces small; V = 12 splits into slices of 8.
  const Case c{.batch = 2, .seq = 20, .heads = 2, .K = 8, .V = 12, .g = true, .gk = true, .gv = true, .h0 = true, .ht = true};
  const Inputs in = make(ctx, c, DType::f32, 12);
  for (auto var : {la::Variant::recurrent, la::Variant::gla, la::Variant::lightning})
    for (bool bwd : {false, true}) {
      Inputs x = in;
      if (var == la::Variant::lightning) {
        x.o.g = x.o.gk = x.o.gv = Tensor{};
        x.c.g = x.c.gk = x.c.gv = false;
      }
      // Specs of this kernel's arguments, from one run with the heuristic.
      std::vector<TensorSpec> specs;
      {
        const Tensor ph = ctx.empty(Shape{0}, DType::f32);
        auto spec = [&](const Tensor& t) { return t.defined() ? t.spec() : ph.spec(); };
        std::vector<TensorSpec> full{spec(x.q), spec(x.k), spec(x.v), spec(x.o.g), spec(x.o.g_gamma), spec(x.o.gk),
                                     spec(x.o.gv), spec(x.o.initial_state), spec(x.o.cu_seqlens)};
        if (!bwd) {
          full.push_back(x.v.spec());
          full.push_back(x.o.initial_state.spec());
        } else {
          full.push_back(x.dout.spec());
          full.push_back(spec(x.dht));
          for (const Tensor* t : {&x.q, &x.k, &x.v, &x.o.g, &x.o.gk, &x.o.gv, &x.o.initial_state}) full.push_back(spec(*t));
        }
        la::Problem p;
        p.variant = var;
        p.backward = bwd;
        for (std::size_t i = 0; i < la::kernel_args(var, bwd).size(); ++i) specs.push_back(full[p.full_index(i)]);
      }
      const Invocation inv = la::make_invocation(var, bwd, specs, false, 0.0);
      const auto& impl = Registry::global().implementation(inv, ctx.device().info());
      const auto configs = impl.space(inv, ctx.device().info()).enumerate();
      ASSERT_FALSE(configs.empty());
      for (const Config& config : configs) {
        x.o.config = config;
        const std::string what = std::string(la::kernel_name(var, bwd)) + " " + config.canonical();
        if (bwd) check_backward(ctx, var, x, what);
        else check_forward(ctx, var, x, what);
      }
    }
}

TEST_P(LinearAttention, HeuristicIsInTheSpace) {
  Context ctx(GetParam());
  for (auto var : {la::Variant::recurrent, la::Variant::gla, la::Variant::lightning})
    for (bool bwd : {false, true})
      for (auto [seq, heads, dim] : {std::tuple{4096, 8, 128}, {7, 2, 16}, {512, 4, 64}, {100, 1, 256}}) {
        const la::LinearAttentionKernel k(var, bwd);
        const Invocation inv = k.from_sizes({{"seq", seq}, {"heads", heads}, {"head_dim", dim}}, DType::f16,
                                            nlohmann::json::object());
        const auto& impl = Registry::global().implementation(inv, ctx.device().info());
        const Config h = impl.heuristic(inv, ctx.device().info());
        EXPECT_EQ(impl.space(inv, ctx.device().info()).mismatch(h), "") << inv.kernel << " " << h.canonical();
      }
}

TEST_P(LinearAttention, BadInputNamesTheArgument) {
  Context ctx(GetParam());
  using test::expect_error;
  const Case c{.batch = 2, .seq = 5, .heads = 2, .K = 8, .V = 4};
  const Inputs in = make(ctx, c, DType::f32, 1);
  auto run_gla = [&](const LinearAttentionOptions& o) { (void)gla(ctx, in.q, in.k, in.v, o); };
  {
    LinearAttentionOptions o = in.o;
    o.gk = ctx.random({2, 5, 2, 4}, DType::f32, 2);
    expect_error([&] { run_gla(o); }, "gk [2, 5, 2, 4] f32 must be f32 [2, 5, 2, 8]");
  }
  {
    LinearAttentionOptions o = in.o;
    o.g = ctx.random({2, 5, 2}, DType::f16, 2);
    expect_error([&] { run_gla(o); }, "g [2, 5, 2] f16 must be f32 [2, 5, 2]");
  }
  {
    LinearAttentionOptions o = in.o;
    o.initial_state = ctx.random({2, 2, 4, 8}, DType::f32, 2);
    expect_error([&] { run_gla(o); }, "initial_state [2, 2, 4, 8] f32 must be f32 [2, 2, 8, 4]");
  }
  {
    LinearAttentionOptions o = in.o;  // packed input needs batch 1
    o.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 2, 5});
    expect_error([&] { run_gla(o); }, "must have batch 1");
  }
  {
    const Inputs p = make(ctx, {.batch = 1, .seq = 5, .heads = 2, .K = 8, .V = 4}, DType::f32, 2);
    LinearAttentionOptions o = p.o;
    o.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 4, 3});
    expect_error([&] { (void)recurrent(ctx, p.q, p.k, p.v, o); }, "cu_seqlens decreases at entry 2");
    o.cu_seqlens = ctx.from({3}, DType::i32, std::vector<double>{0, 2, 4});
    expect_error([&] { (void)recurrent(ctx, p.q, p.k, p.v, o); }, "cu_seqlens must run from 0 to the token count 5");
  }
  expect_error([&] { (void)gla(ctx, in.q, ctx.random({2, 5, 2, 7}, DType::f32, 3), in.v, in.o); },
               "k [2, 5, 2, 7] f32 must be f32 [2, 5, 2, 8]");
  expect_error([&] { (void)gla(ctx, in.q, in.k, ctx.random({2, 4, 2, 4}, DType::f32, 3), in.o); },
               "v [2, 4, 2, 4] f32 must be f32 [2, 5, 2, 4]");
  {
    LinearAttentionOptions o = in.o;
    o.g = ctx.random({2, 5, 2}, DType::f32, 2);
    expect_error([&] { (void)lightning_attention(ctx, in.q, in.k, in.v, o); }, "takes no gate arrays");
    o = in.o;
    o.layer_idx = 4;
    o.num_layers = 4;
    expect_error([&] { (void)lightning_attention(ctx, in.q, in.k, in.v, o); }, "layer_idx 4 must lie in [0, num_layers 4)");
  }
  {
    LinearAttentionOptions o = in.o;
    o.scale = 0.0;
    expect_error([&] { run_gla(o); }, "scale");
  }
  expect_error([&] { (void)gla_bwd(ctx, in.q, in.k, in.v, in.q, in.o); }, "do [2, 5, 2, 8] f32 must be f32 [2, 5, 2, 4]");
}

INSTANTIATE_TEST_SUITE_P(All, LinearAttention, ::testing::ValuesIn(test::devices()),
                         [](const auto& p) { return test::test_name(p.param); });

// ---- device-independent ---------------------------------------------------------------------

TEST(LinearAttentionHost, LightningDecays) {
  // ejKernel's: -(8 / heads) * (1 - layer_idx / num_layers) * h.
  const auto lin = la::lightning_gamma(4, 1, 4, "linear");
  for (int h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(lin[static_cast<std::size_t>(h)], -2.0 * 0.75 * h);
  // MiniMax's: ALiBi slopes 2^-1 .. 2^-8 for 8 heads, scaled by 1 - layer_idx / (num_layers - 1) + 1e-5.
  const auto ali = la::lightning_gamma(8, 0, 3, "alibi");
  for (int h = 0; h < 8; ++h) EXPECT_NEAR(ali[static_cast<std::size_t>(h)], -std::pow(2.0, -(h + 1)) * (1.0 + 1e-5), 1e-15);
  // Not a power of two: the 4 of 4 heads (2^-2, 2^-4, ...), then every other of 8 (2^-1, 2^-3).
  const auto six = la::lightning_gamma(6, 2, 3, "alibi");
  EXPECT_NEAR(six[0], -0.25 * 1e-5, 1e-18);
  EXPECT_NEAR(six[4], -0.5 * 1e-5, 1e-18);
  EXPECT_NEAR(six[5], -0.125 * 1e-5, 1e-18);
}

TEST(LinearAttentionHost, RecipeSizesAndInputs) {
  const la::LinearAttentionKernel k(la::Variant::gla, true);
  const Invocation inv = k.from_sizes({{"seq", 50}, {"heads", 2}, {"head_dim", 8}, {"num_seqs", 3}}, DType::f32,
                                      {{"gates", {"g", "gk"}}, {"initial_state", true}, {"dht", true}, {"reverse", true}});
  const la::Problem p = la::Problem::of(inv);
  EXPECT_TRUE(p.varlen && p.has_g && p.has_gk && !p.has_gv && p.has_h0 && p.has_ht && p.reverse);
  EXPECT_EQ(p.num_seqs, 3);
  const HostArrays a = k.inputs(inv, 3);
  EXPECT_EQ(a[la::fwd::cu_seqlens].back(), 50.0);
  for (double x : a[la::fwd::gk]) EXPECT_LT(x, 0.0);
  EXPECT_NO_THROW((void)k.reference(inv, a));
  test::expect_error([&] { (void)k.from_sizes({{"seq", 5}, {"heads", 2}}, DType::f32, nlohmann::json::object()); },
                     "needs size 'head_dim'");
  test::expect_error([&] {
    (void)k.from_sizes({{"seq", 5}, {"heads", 2}, {"head_dim", 4}}, DType::f32, {{"gates", {"gz"}}});
  }, "names 'gz'");
}

}  // namespace
}  // namespace ejk
