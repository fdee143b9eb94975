// ring_attention and ring_attention_bwd under mpirun: every rank builds the same full sequence,
// attends its shard through the ring, and compares with flash attention of the whole sequence
// on the same device (forward, lse and gradients); then the collective errors. Usage:
//   mpirun -n N ejk_ring_attention_test --device cpu|opencl:0|vulkan:0|cuda [gtest flags]
// A backend without an index (cuda) gives each rank of a host its own device where there are
// enough (local rank modulo the count), so that GPU ranks move their blocks device to device.
// Failures of any rank fail the run (mpirun's exit status); ranks other than 0 print only failures.
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ejk/peer.hpp"
#include "ejk/ring_attention.hpp"
#include "support.hpp"
#ifdef EJK_HAVE_VULKAN
#include "vulkan_validation.hpp"
#endif

namespace ejk {
namespace {

std::string g_device = "cpu";
int g_rank = 0, g_size = 1;

struct Case {
  std::string name;
  std::int64_t batch = 2, shard = 12, heads = 4, kv_heads = 2, dim = 32;
  bool uneven = false;  // shards of shard, shard + 5, shard, shard + 5, ... tokens
  RingAttentionOptions o{};
};

std::vector<std::int64_t> shard_lengths(const Case& c) {
  std::vector<std::int64_t> len;
  for (int r = 0; r < g_size; ++r) len.push_back(c.shard + (c.uneven && r % 2 ? 5 : 0));
  return len;
}

std::vector<double> uniform(std::uint64_t seed, std::int64_t n, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// The tokens of this rank's shard: [t0, t0 + n), or t0, t0 + stride, ... (n of them) of a
// [batch, seq, heads, dim] array (or of the last dim of [batch, heads, seq]).
struct Shard {
  std::int64_t t0 = 0, n = 0, stride = 1;
};
std::vector<double> tokens(const std::vector<double>& a, std::int64_t batch, std::int64_t seq, std::int64_t row, Shard sh) {
  std::vector<double> out;
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < sh.n; ++i) {
      const auto at = a.begin() + (b * seq + sh.t0 + i * sh.stride) * row;
      out.insert(out.end(), at, at + row);
    }
  return out;
}
std::vector<double> lse_tokens(const std::vector<double>& a, std::int64_t bh, std::int64_t seq, Shard sh) {
  return tokens(a, bh, seq, 1, sh);
}

double tolerance(DType t) { return t == DType::f32 ? 2e-5 : t == DType::f16 ? 4e-3 : 2.5e-2; }

// The ring against flash attention of the gathered sequence, forward and backward.
void expect_matches(const Case& c, DType t) {
  SCOPED_TRACE(c.name + " " + std::string(to_string(t)) + " on " + g_device + ", rank " + std::to_string(g_rank) + " of " +
               std::to_string(g_size));
  Context ctx(g_device);
  const auto len = shard_lengths(c);
  std::int64_t seq = 0, t0 = 0;
  for (int r = 0; r < g_size; ++r) (r < g_rank ? t0 : seq) += len[static_cast<std::size_t>(r)];
  seq += t0;
  const std::int64_t n = len[static_cast<std::size_t>(g_rank)];
  const Shard sh = c.o.layout == RingLayout::striped ? Shard{g_rank, n, g_size} : Shard{t0, n, 1};
  const std::int64_t qrow = c.heads * c.dim, krow = c.kv_heads * c.dim;
  // The same full inputs on every rank; q spans [-3, 3) so that softmax rows are far from uniform.
  const auto q = uniform(1, c.batch * seq * qrow, -3, 3), k = uniform(2, c.batch * seq * krow, -1, 1),
             v = uniform(3, c.batch * seq * krow, -1, 1), dout = uniform(4, c.batch * seq * qrow, -1, 1);
  const Shape qs{c.batch, seq, c.heads, c.dim}, ks{c.batch, seq, c.kv_heads, c.dim};
  AttentionOptions fo;
  fo.causal = c.o.causal;
  fo.sliding_window = c.o.sliding_window;
  fo.logits_soft_cap = c.o.logits_soft_cap;
  fo.softmax_scale = c.o.softmax_scale;
  const Tensor qf = ctx.from(qs, t, q), kf = ctx.from(ks, t, k), vf = ctx.from(ks, t, v), df = ctx.from(qs, t, dout);
  const auto full = flash_attention(ctx, qf, kf, vf, fo);
  const auto gfull = flash_attention_bwd(ctx, qf, kf, vf, full.out, df, full.lse, fo);

  const Shape qsh{c.batch, n, c.heads, c.dim}, ksh{c.batch, n, c.kv_heads, c.dim};
  const Tensor qr = ctx.from(qsh, t, tokens(q, c.batch, seq, qrow, sh));
  const Tensor kr = ctx.from(ksh, t, tokens(k, c.batch, seq, krow, sh));
  const Tensor vr = ctx.from(ksh, t, tokens(v, c.batch, seq, krow, sh));
  const Tensor dr = ctx.from(qsh, t, tokens(dout, c.batch, seq, qrow, sh));
  RingAttentionStats fs, bs;
  const auto ring = ring_attention(ctx, qr, kr, vr, MPI_COMM_WORLD, c.o, &fs);
  const auto g = ring_attention_bwd(ctx, qr, kr, vr, ring.out, dr, ring.lse, MPI_COMM_WORLD, c.o, &bs);

  const double tol = tolerance(t);
  EXPECT_LE(test::relative_error(ring.out.read(), tokens(full.out.read(), c.batch, seq, qrow, sh)), tol) << "out";
  EXPECT_LE(test::relative_error(ring.lse.read(), lse_tokens(full.lse.read(), c.batch * c.heads, seq, sh)), tol) << "lse";
  EXPECT_LE(test::relative_error(g.dq.read(), tokens(gfull.dq.read(), c.batch, seq, qrow, sh)), 4 * tol) << "dq";
  EXPECT_LE(test::relative_error(g.dk.read(), tokens(gfull.dk.read(), c.batch, seq, krow, sh)), 4 * tol) << "dk";
  EXPECT_LE(test::relative_error(g.dv.read(), tokens(gfull.dv.read(), c.batch, seq, krow, sh)), 4 * tol) << "dv";
  EXPECT_EQ(fs.steps, g_size);
  EXPECT_GE(fs.blocks, 1);
  EXPECT_LE(fs.blocks, g_size);
  EXPECT_EQ(fs.blocks, bs.blocks);
  // The causal mask leaves rank r of contiguous shards blocks 0..r: the skipped ones are never
  // computed. Striped, every rank attends every block.
  if (c.o.causal && c.o.sliding_window.left < 0 && c.o.sliding_window.right < 0) {
    EXPECT_EQ(fs.blocks, c.o.layout == RingLayout::striped ? g_size : g_rank + 1);
  }
  // Every rank agrees on the transport: the host's, or one device-to-device transport.
  if (g_size == 1) {
    EXPECT_EQ(fs.transport, "none");
  } else if (c.o.transport == RingTransport::host) {
    EXPECT_EQ(fs.transport, "host");
  }
  EXPECT_EQ(fs.transport, bs.transport);
  std::vector<char> mine(64, 0), all(static_cast<std::size_t>(g_size) * 64);
  std::snprintf(mine.data(), mine.size(), "%s", fs.transport.c_str());
  MPI_Allgather(mine.data(), 64, MPI_CHAR, all.data(), 64, MPI_CHAR, MPI_COMM_WORLD);
  for (int r = 0; r < g_size; ++r) EXPECT_STREQ(&all[static_cast<std::size_t>(r) * 64], mine.data()) << "rank " << r;
  // Devices with a transport, one per rank, move the blocks with it ($EJK_CUDA_PEER picks which on
  // cuda): a ring that fell back to the host would pass the comparisons above unnoticed.
  if (g_size > 1 && c.o.transport == RingTransport::automatic) {
    const PeerTransport pt = peer_transport(ctx.device());
    std::vector<char> id(256, 0), ids(static_cast<std::size_t>(g_size) * 256);
    std::snprintf(id.data(), id.size(), "%s|%s", pt.identity.c_str(), pt.domain.c_str());
    MPI_Allgather(id.data(), 256, MPI_CHAR, ids.data(), 256, MPI_CHAR, MPI_COMM_WORLD);
    bool distinct = pt.absent.empty();
    for (int r = 0; r < g_size && distinct; ++r)
      for (int u = 0; u < r; ++u)
        if (std::strncmp(&ids[static_cast<std::size_t>(r) * 256], &ids[static_cast<std::size_t>(u) * 256], 256) == 0) distinct = false;
    if (distinct) EXPECT_EQ(fs.transport, pt.name);
  }
}

TEST(RingAttention, EachOption) {
  const std::vector<Case> cases = {
      {.name = "plain gqa"},
      {.name = "mha", .kv_heads = 4},
      {.name = "causal", .o = {.causal = true}},
      {.name = "sliding window", .o = {.sliding_window = {5, 3}}},
      {.name = "causal window", .shard = 9, .o = {.causal = true, .sliding_window = {10, -1}}},
      {.name = "soft cap + scale", .o = {.logits_soft_cap = 2.5, .softmax_scale = 0.3}},
      {.name = "uneven shards causal", .uneven = true, .o = {.causal = true}},
      {.name = "uneven shards window mqa", .kv_heads = 1, .uneven = true, .o = {.sliding_window = {7, 0}}},
      {.name = "head_dim 80", .batch = 1, .shard = 7, .dim = 80, .o = {.causal = true}},
  };
  for (const auto& c : cases) expect_matches(c, DType::f32);
}

// Rank r holds tokens r, r + P, ...: every mask becomes a band of the shards' own indices.
TEST(RingAttention, StripedLayout) {
  constexpr RingLayout striped = RingLayout::striped;
  const std::vector<Case> cases = {
      {.name = "striped causal", .o = {.causal = true, .layout = striped}},
      {.name = "striped plain mha", .kv_heads = 4, .o = {.layout = striped}},
      {.name = "striped causal window", .shard = 9, .o = {.causal = true, .sliding_window = {10, -1}, .layout = striped}},
      {.name = "striped two-sided window", .o = {.sliding_window = {5, 3}, .layout = striped}},
      {.name = "striped right window only", .o = {.sliding_window = {-1, 2}, .layout = striped}},
      {.name = "striped window 0", .o = {.causal = true, .sliding_window = {0, -1}, .layout = striped}},
      {.name = "striped soft cap", .batch = 1, .shard = 7, .dim = 80, .o = {.causal = true, .logits_soft_cap = 2.5, .layout = striped}},
  };
  for (const auto& c : cases) expect_matches(c, DType::f32);
  expect_matches({.name = "striped causal f16", .o = {.causal = true, .layout = striped}}, DType::f16);
}

// Through host memory whatever the devices offer (on GPUs with a transport, the other path).
TEST(RingAttention, HostTransport) {
  expect_matches({.name = "host causal", .uneven = true, .o = {.causal = true, .transport = RingTransport::host}}, DType::f32);
  expect_matches({.name = "host striped", .o = {.causal = true, .layout = RingLayout::striped, .transport = RingTransport::host}},
                 DType::bf16);
}

TEST(RingAttention, HalfPrecision) {
  const Case c{.name = "causal window cap gqa", .uneven = true, .o = {.causal = true, .sliding_window = {14, -1}, .logits_soft_cap = 4.0}};
  expect_matches(c, DType::f16);
  expect_matches(c, DType::bf16);
}

// Every rank reaches the collective check, so a rank's bad arguments throw on all ranks, and
// nobody waits for a message that never comes.
TEST(RingAttention, ErrorsOnEveryRank) {
  Context ctx(g_device);
  const Tensor q = ctx.random({1, 8, 4, 16}, DType::f32, 1), k = ctx.random({1, 8, 2, 16}, DType::f32, 2);
  const Tensor v = ctx.random({1, 8, 2, 16}, DType::f32, 3);
  if (g_size > 1) {
    // The last rank's shard has another head_dim.
    const bool odd = g_rank == g_size - 1;
    const Tensor q2 = odd ? ctx.random({1, 8, 4, 8}, DType::f32, 1) : q;
    const Tensor k2 = odd ? ctx.random({1, 8, 2, 8}, DType::f32, 2) : k;
    test::expect_error([&] { (void)ring_attention(ctx, q2, k2, k2, MPI_COMM_WORLD); }, "shards differ across ranks");
    // Options that differ.
    test::expect_error([&] { (void)ring_attention(ctx, q, k, v, MPI_COMM_WORLD, {.causal = odd}); }, "options differ");
    // One rank's k has a wrong rank: it names its own argument, the others name that rank.
    const Tensor k3 = odd ? ctx.random({8, 2, 16}, DType::f32, 2) : k;
    test::expect_error([&] { (void)ring_attention(ctx, q, k3, k3, MPI_COMM_WORLD); },
                       odd ? "k [8, 2, 16] f32 must be [batch, seq_shard, heads, head_dim]"
                           : "rank " + std::to_string(g_size - 1) + " of " + std::to_string(g_size) + " refused its arguments");
  }
  test::expect_error([&] { (void)ring_attention(ctx, q, k, v, MPI_COMM_WORLD, {.sliding_window = {-3, -1}}); },
                     "sliding window left = -3");
  test::expect_error([&] { (void)ring_attention(ctx, q, ctx.random({1, 5, 2, 16}, DType::f32, 2), ctx.random({1, 5, 2, 16}, DType::f32, 3), MPI_COMM_WORLD); },
                     "must match q [1, 8, 4, 16] f32");
  const auto fwd = ring_attention(ctx, q, k, v, MPI_COMM_WORLD);
  test::expect_error([&] { (void)ring_attention_bwd(ctx, q, k, v, fwd.out, fwd.out, ctx.empty({1, 8, 4}, DType::f32), MPI_COMM_WORLD); },
                     "lse [1, 8, 4] f32 must be f32 [1, 4, 8]");
  test::expect_error([&] { (void)ring_attention(ctx, q, k, v, MPI_COMM_NULL); }, "MPI_COMM_NULL");
  if (g_size > 1) {
    // Striped shards of different lengths.
    const Tensor q5 = g_rank == 0 ? ctx.random({1, 5, 4, 16}, DType::f32, 1) : q;
    const Tensor k5 = g_rank == 0 ? ctx.random({1, 5, 2, 16}, DType::f32, 2) : k;
    test::expect_error([&] { (void)ring_attention(ctx, q5, k5, k5, MPI_COMM_WORLD, {.layout = RingLayout::striped}); },
                       "a striped layout needs shards of one length");
  }
  // Still in step after all that: a correct call works.
  const auto again = ring_attention(ctx, q, k, v, MPI_COMM_WORLD);
  EXPECT_EQ(again.out.shape(), q.shape());
}

// Ranks other than 0 report failures only, each line marked with its rank.
class FailuresOnly : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", g_rank, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }
};

}  // namespace
}  // namespace ejk

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &ejk::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ejk::g_size);
  ::testing::InitGoogleTest(&argc, argv);
#ifdef EJK_HAVE_VULKAN
  ejk::test::install_vulkan_validation_listener();  // each rank fails on its own messages
#endif
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) ejk::g_device = argv[++i];
  if (ejk::g_device != "cpu" && ejk::g_device.find(':') == std::string::npos) {
    MPI_Comm node;
    int local = 0, count = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, ejk::g_rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);
    for (const auto& d : ejk::list_devices()) count += ejk::to_string(d.backend) == ejk::g_device;
    ejk::g_device += ":" + std::to_string(count ? local % count : 0);
  }
  if (ejk::g_rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ejk::FailuresOnly);
  }
  int rc = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
