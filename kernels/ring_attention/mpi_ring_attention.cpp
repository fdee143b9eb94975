// ejk::ring_attention and ejk::ring_attention_bwd: flash attention over a sequence sharded
// across MPI ranks. Key/value blocks circulate rank -> rank + 1 through host memory (GPU-aware
// MPI is not assumed); each step posts the next block's receive and this block's send, then
// attends the block in hand on a worker thread while this thread drives MPI's progress, so the
// transfer hides behind the compute. Partial results merge through the log-sum-exp on the device
// (attention_merge, forward); dk/dv travel with their block and reach its owner after a full
// turn, summed in f32 on the host (backward).
#include "ejk/ring_attention.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ejk/error.hpp"
#include "flash_attention/flash_attention.hpp"

namespace ejk {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int kv_tag = 7301, grad_tag = 7302, error_text = 240;

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    MPI_Error_string(rc, text, &n);
    throw Error(std::string("ring_attention: ") + what + " failed: " + std::string(text, static_cast<std::size_t>(n)));
  }
}

std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + to_string(t.shape()) + " " + std::string(to_string(t.dtype()));
}

// What every rank states about its arguments; all but seq must agree across ranks.
struct Claim {
  std::int64_t ok = 1, batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0, dtype = 0;
  std::int64_t causal = 0, left = -1, right = -1, softcap_bits = 0, scale_bits = 0;
  char error[error_text] = {};
  char shapes[error_text] = {};
};

std::int64_t bits(double d) {
  std::int64_t b = 0;
  std::memcpy(&b, &d, sizeof b);
  return b;
}

// Local checks: a message naming the argument and its shape, empty when fine. Never throws, so
// that every rank reaches the collective check below.
std::string local_error(const char* k, const Tensor& q, const Tensor& kk, const Tensor& v, const Tensor* out,
                        const Tensor* dout, const Tensor* lse, const RingAttentionOptions& o) {
  for (auto [name, t] : {std::pair{"q", &q}, std::pair{"k", &kk}, std::pair{"v", &v}}) {
    if (!t->defined()) return std::string(k) + ": " + name + " is undefined";
    if (t->rank() != 4) return std::string(k) + ": " + describe(name, *t) + " must be [batch, seq_shard, heads, head_dim]";
    for (auto d : t->shape())
      if (d <= 0) return std::string(k) + ": " + describe(name, *t) + " has an empty dimension";
  }
  if (q.dtype() != DType::f32 && q.dtype() != DType::f16 && q.dtype() != DType::bf16)
    return std::string(k) + ": " + describe("q", q) + ": dtype is not supported (f32, f16, bf16)";
  if (kk.dtype() != q.dtype() || v.dtype() != q.dtype())
    return std::string(k) + ": dtypes differ: " + describe("q", q) + ", " + describe("k", kk) + ", " + describe("v", v);
  if (v.shape() != kk.shape()) return std::string(k) + ": " + describe("v", v) + " must have the shape of " + describe("k", kk);
  if (kk.dim(0) != q.dim(0) || kk.dim(1) != q.dim(1) || kk.dim(3) != q.dim(3))
    return std::string(k) + ": " + describe("k", kk) + " must match " + describe("q", q) +
           " in batch, seq_shard (a shard holds the queries and keys of the same tokens) and head_dim";
  if (q.dim(2) % kk.dim(2) != 0)
    return std::string(k) + ": kv_heads of " + describe("k", kk) + " does not divide heads of " + describe("q", q);
  if (q.dim(3) > kernels::flash_attention::max_head_dim)
    return std::string(k) + ": " + describe("q", q) + ": head_dim is not supported (1 to " +
           std::to_string(kernels::flash_attention::max_head_dim) + ")";
  if (out && (out->shape() != q.shape() || out->dtype() != q.dtype()))
    return std::string(k) + ": " + describe("out", *out) + " must be like " + describe("q", q);
  if (dout && (dout->shape() != q.shape() || dout->dtype() != q.dtype()))
    return std::string(k) + ": " + describe("dout", *dout) + " must be like " + describe("q", q);
  if (lse && (lse->shape() != Shape{q.dim(0), q.dim(2), q.dim(1)} || lse->dtype() != DType::f32))
    return std::string(k) + ": " + describe("lse", *lse) + " must be f32 " + to_string(Shape{q.dim(0), q.dim(2), q.dim(1)}) +
           " (the forward's)";
  for (auto [name, w] : {std::pair{"left", o.sliding_window.left}, std::pair{"right", o.sliding_window.right}})
    if (w < -1)
      return std::string(k) + ": sliding window " + name + " = " + std::to_string(w) + " is negative (a size >= 0, or -1)";
  if (!(o.logits_soft_cap >= 0) || !std::isfinite(o.logits_soft_cap))
    return std::string(k) + ": logits_soft_cap = " + std::to_string(o.logits_soft_cap) + " must be finite and >= 0";
  if (o.softmax_scale && (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0))
    return std::string(k) + ": softmax_scale " + std::to_string(*o.softmax_scale) + " must be finite and non-zero";
  return {};
}

void copy_text(char (&to)[error_text], const std::string& s) {
  const std::size_t n = std::min(s.size(), sizeof to - 1);
  std::memcpy(to, s.data(), n);
  to[n] = 0;
}

// The sharding every rank agreed on.
struct Ring {
  MPI_Comm comm;
  int size = 1, rank = 0;
  std::int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  std::vector<std::int64_t> len, start;  // per rank
  RingAttentionOptions o;

  int left() const { return (rank + size - 1) % size; }
  int right() const { return (rank + 1) % size; }
  int src(int step) const { return (rank - step % size + size) % size; }  // whose block step `step` holds
  std::size_t esize() const { return dtype_size(dtype); }
  std::int64_t kv_elems(int r) const { return batch * len[static_cast<std::size_t>(r)] * kv_heads * head_dim; }

  // Global key bounds of the global query position i (flash_attention.hpp's lo/hi, d = 0).
  std::int64_t lo(std::int64_t i) const { return o.sliding_window.left < 0 ? INT64_MIN / 4 : i - o.sliding_window.left; }
  std::int64_t hi(std::int64_t i) const {
    std::int64_t h = o.sliding_window.right < 0 ? INT64_MAX / 4 : i + o.sliding_window.right;
    return o.causal ? std::min(h, i) : h;
  }
  // Unmasked (query, key) pairs between this rank's queries and rank s's keys; 0: skip the block.
  std::int64_t pairs(int s) const {
    const std::int64_t q0 = start[static_cast<std::size_t>(rank)], lq = len[static_cast<std::size_t>(rank)];
    const std::int64_t k0 = start[static_cast<std::size_t>(s)], k1 = k0 + len[static_cast<std::size_t>(s)] - 1;
    if (hi(q0 + lq - 1) < k0 || lo(q0) > k1) return 0;
    std::int64_t n = 0;
    for (std::int64_t i = q0; i < q0 + lq; ++i) n += std::max<std::int64_t>(0, std::min(hi(i), k1) - std::max(lo(i), k0) + 1);
    return n;
  }
  // Local queries end this many positions after block s's keys end: flash attention's
  // diagonal_offset that gives the block the masks of the whole sequence.
  std::int64_t offset(int s) const {
    return (start[static_cast<std::size_t>(rank)] + len[static_cast<std::size_t>(rank)]) -
           (start[static_cast<std::size_t>(s)] + len[static_cast<std::size_t>(s)]);
  }
  AttentionOptions block_options(int s) const {
    AttentionOptions a;
    a.causal = o.causal;
    a.sliding_window = o.sliding_window;
    a.logits_soft_cap = o.logits_soft_cap;
    a.softmax_scale = o.softmax_scale;
    a.diagonal_offset = offset(s);
    return a;
  }
};

// The collective check: every rank states its shard; every rank throws the same error when
// any rank's arguments are wrong or the shards do not fit together.
Ring agree(const char* k, const Tensor& q, const Tensor& kk, const Tensor& v, const Tensor* out, const Tensor* dout,
           const Tensor* lse, MPI_Comm comm, const RingAttentionOptions& o) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) throw InvalidArgument(std::string(k) + ": MPI is not initialized (or already finalized)");
  if (comm == MPI_COMM_NULL) throw InvalidArgument(std::string(k) + ": the communicator is MPI_COMM_NULL");
  Ring ring;
  ring.comm = comm;
  ring.o = o;
  check_mpi(MPI_Comm_size(comm, &ring.size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(comm, &ring.rank), "MPI_Comm_rank");

  Claim mine;
  const std::string err = local_error(k, q, kk, v, out, dout, lse, o);
  if (!err.empty()) {
    mine.ok = 0;
    copy_text(mine.error, err);
  } else {
    mine.batch = q.dim(0), mine.seq = q.dim(1), mine.heads = q.dim(2), mine.kv_heads = kk.dim(2), mine.head_dim = q.dim(3);
    mine.dtype = static_cast<std::int64_t>(q.dtype());
    copy_text(mine.shapes, describe("q", q) + ", " + describe("k", kk));
  }
  mine.causal = o.causal, mine.left = o.sliding_window.left, mine.right = o.sliding_window.right;
  mine.softcap_bits = bits(o.logits_soft_cap);
  mine.scale_bits = o.softmax_scale ? bits(*o.softmax_scale) : 0;
  std::vector<Claim> all(static_cast<std::size_t>(ring.size));
  check_mpi(MPI_Allgather(&mine, sizeof(Claim), MPI_BYTE, all.data(), sizeof(Claim), MPI_BYTE, comm), "MPI_Allgather");

  if (!mine.ok) throw InvalidArgument(err);
  for (int r = 0; r < ring.size; ++r)
    if (!all[static_cast<std::size_t>(r)].ok)
      throw InvalidArgument(std::string(k) + ": rank " + std::to_string(r) + " of " + std::to_string(ring.size) +
                            " refused its arguments: " + all[static_cast<std::size_t>(r)].error);
  const Claim& c0 = all[0];
  for (int r = 1; r < ring.size; ++r) {
    const Claim& c = all[static_cast<std::size_t>(r)];
    if (c.batch != c0.batch || c.heads != c0.heads || c.kv_heads != c0.kv_heads || c.head_dim != c0.head_dim ||
        c.dtype != c0.dtype)
      throw InvalidArgument(std::string(k) + ": shards differ across ranks: rank 0 has " + c0.shapes + ", rank " +
                            std::to_string(r) + " has " + c.shapes +
                            "; every rank needs the same batch, heads, kv_heads, head_dim and dtype (only seq_shard may differ)");
    if (c.causal != c0.causal || c.left != c0.left || c.right != c0.right || c.softcap_bits != c0.softcap_bits ||
        c.scale_bits != c0.scale_bits)
      throw InvalidArgument(std::string(k) + ": options differ across ranks (rank 0 and rank " + std::to_string(r) +
                            "): causal, sliding_window, logits_soft_cap and softmax_scale must be the same on every rank");
  }
  ring.batch = c0.batch, ring.heads = c0.heads, ring.kv_heads = c0.kv_heads, ring.head_dim = c0.head_dim;
  ring.dtype = q.dtype();
  std::int64_t at = 0;
  for (const Claim& c : all) {
    ring.len.push_back(c.seq);
    ring.start.push_back(at);
    at += c.seq;
  }
  // Messages carry one block of k and v in the storage dtype, or its dk and dv in f32.
  for (int r = 0; r < ring.size; ++r) {
    const double most = 2.0 * static_cast<double>(ring.kv_elems(r)) * static_cast<double>(std::max<std::size_t>(4, ring.esize()));
    if (most > static_cast<double>(INT_MAX))
      throw InvalidArgument(std::string(k) + ": the shard of rank " + std::to_string(r) + " (" + std::to_string(ring.len[static_cast<std::size_t>(r)]) +
                            " tokens) makes messages of " + std::to_string(most) + " bytes, more than one MPI message of INT_MAX bytes");
  }
  return ring;
}

// Outstanding requests of one step; completed by wait() or test(). Open MPI moves a large
// shared-memory message a fragment per call, so the calls' rate sets the transfer's: with a
// discrete GPU doing the compute, the polls spin (`spin`); with devices that compute on the host's
// cores (the CPU backend, PoCL, lavapipe), they pause between tests.
struct Requests {
  bool spin = false;
  std::vector<MPI_Request> r;
  void add(MPI_Request q) { r.push_back(q); }
  bool test() {
    if (r.empty()) return true;
    int done = 0;
    check_mpi(MPI_Testall(static_cast<int>(r.size()), r.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (done) r.clear();
    return done != 0;
  }
  // Polls rather than MPI_Waitall, which spins a core at full speed in Open MPI: ranks that
  // share cores with each other or with a CPU device's threads would take them from the compute
  // that the wait is for. A short burst of tests first keeps the latency of quick messages low.
  void wait() {
    for (int i = 0; !test(); ++i)
      if (i >= 64 && !spin) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  // On the way out of an error: the buffers these requests use are about to go.
  ~Requests() {
    if (!r.empty()) MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE);
  }
};

// Runs `work` on a worker thread while this thread lets MPI progress the messages in flight, and
// returns the worker's duration. MPI is called from this thread only.
template <class Work>
double overlapped(Requests& reqs, Work work) {
  auto task = std::async(std::launch::async, [&] {
    const auto t0 = Clock::now();
    work();
    return since(t0);
  });
  bool comm_done = reqs.r.empty();
  while (task.wait_for(std::chrono::microseconds(comm_done ? 1000 : reqs.spin ? 0 : 50)) != std::future_status::ready)
    if (!comm_done) comm_done = reqs.test();
  return task.get();
}

// Device tensors for key/value blocks, one pair per distinct shard length.
struct BlockTensors {
  const Context& ctx;
  const Ring& ring;
  std::map<std::int64_t, std::pair<Tensor, Tensor>> cache;
  std::pair<Tensor, Tensor>& of(int s) {
    const std::int64_t n = ring.len[static_cast<std::size_t>(s)];
    auto it = cache.find(n);
    if (it == cache.end()) {
      const Shape shape{ring.batch, n, ring.kv_heads, ring.head_dim};
      it = cache.emplace(n, std::pair{ctx.empty(shape, ring.dtype), ctx.empty(shape, ring.dtype)}).first;
    }
    return it->second;
  }
};

// A failure in the middle of the ring (a device error on one rank) must not leave the other
// ranks waiting: the failing rank keeps passing messages, and every rank learns of it at the end.
void settle(const Ring& ring, const char* k, const std::string& failure) {
  int mine = failure.empty() ? 0 : 1, any = 0;
  check_mpi(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, ring.comm), "MPI_Allreduce");
  if (!any) return;
  char text[error_text] = {};
  const std::size_t n = std::min(failure.size(), sizeof text - 1);
  std::memcpy(text, failure.data(), n);
  std::vector<char> all(static_cast<std::size_t>(ring.size) * error_text);
  check_mpi(MPI_Allgather(text, error_text, MPI_CHAR, all.data(), error_text, MPI_CHAR, ring.comm), "MPI_Allgather");
  if (!failure.empty()) throw Error(failure);
  for (int r = 0; r < ring.size; ++r)
    if (all[static_cast<std::size_t>(r) * error_text] != 0)
      throw Error(std::string(k) + ": rank " + std::to_string(r) + " failed: " + &all[static_cast<std::size_t>(r) * error_text]);
}

// Host buffers of one thread's calls, kept between calls: fresh allocations of these sizes
// (hundreds of MB at long shards) cost their page faults again on every call.
struct Scratch {
  std::vector<std::byte> msg[2];  // key/value blocks: the one in hand and the next
  std::vector<std::byte> raw;     // a tensor's bytes on their way to or from the device
  std::vector<float> dq, grad_in, grad_out;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// This rank's k and v, back to back in message buffers sized for the longest shard; nothing on a
// ring of one, where nothing travels.
void host_block(const Ring& ring, const Tensor& k, const Tensor& v, std::vector<std::byte> (&buf)[2]) {
  if (ring.size == 1) return;
  const std::size_t half = static_cast<std::size_t>(ring.kv_elems(ring.rank)) * ring.esize();
  const std::size_t most = 2 * static_cast<std::size_t>(*std::max_element(ring.len.begin(), ring.len.end())) *
                           static_cast<std::size_t>(ring.batch * ring.kv_heads * ring.head_dim) * ring.esize();
  buf[0].resize(most);
  buf[1].resize(most);
  k.device().read(k.buffer(), 0, buf[0].data(), half);
  v.device().read(v.buffer(), 0, buf[0].data() + half, half);
}

// t's bytes in its storage dtype, read into `into`.
const std::vector<std::byte>& read_raw(const Tensor& t, std::vector<std::byte>& into) {
  into.resize(t.bytes());
  t.device().read(t.buffer(), 0, into.data(), t.bytes());
  return into;
}

void upload(const Ring& ring, int s, const std::vector<std::byte>& buf, std::pair<Tensor, Tensor>& kv) {
  const std::size_t half = static_cast<std::size_t>(ring.kv_elems(s)) * ring.esize();
  kv.first.write_bytes(std::span<const std::byte>(buf.data(), half));
  kv.second.write_bytes(std::span<const std::byte>(buf.data() + half, half));
}

// Step s's key/value block on the device: this rank's own tensors, or the received one uploaded.
std::pair<Tensor, Tensor> block(const Ring& ring, int s, const Tensor& k, const Tensor& v, const std::vector<std::byte>& buf,
                                BlockTensors& blocks) {
  if (s == ring.rank) return {k, v};
  auto& kv = blocks.of(s);
  upload(ring, s, buf, kv);
  return kv;
}

// Posts this step's key/value transfer: the block in hand to the right, the next from the left.
void pass_block(const Ring& ring, int step, std::vector<std::byte> (&buf)[2], Requests& reqs) {
  if (step + 1 >= ring.size) return;
  const int s = ring.src(step), next = ring.src(step + 1);
  auto& cur = buf[step % 2];
  auto& nxt = buf[(step + 1) % 2];
  MPI_Request a, b;
  check_mpi(MPI_Irecv(nxt.data(), static_cast<int>(2 * ring.kv_elems(next) * static_cast<std::int64_t>(ring.esize())), MPI_BYTE,
                      ring.left(), kv_tag, ring.comm, &a),
            "MPI_Irecv");
  reqs.add(a);
  check_mpi(MPI_Isend(cur.data(), static_cast<int>(2 * ring.kv_elems(s) * static_cast<std::int64_t>(ring.esize())), MPI_BYTE,
                      ring.right(), kv_tag, ring.comm, &b),
            "MPI_Isend");
  reqs.add(b);
}

// Runs fn(i) for i in [0, n) in contiguous chunks on a few threads: the backward's host sums of a GPU
// rank are the ring's largest host cost. Half the cores (a host usually runs a rank per GPU), at
// most 8; one thread, inline, on small machines or for small n.
template <class Fn>
void host_parallel(std::int64_t n, Fn fn) {
  static const std::int64_t threads = std::clamp<std::int64_t>(std::thread::hardware_concurrency() / 2, 1, 8);
  const std::int64_t chunks = std::min(threads, n / 16384 + 1);
  auto run = [&](std::int64_t c) {
    for (std::int64_t i = n * c / chunks, e = n * (c + 1) / chunks; i < e; ++i) fn(i);
  };
  if (chunks <= 1) return run(0);
  std::vector<std::future<void>> rest;
  for (std::int64_t c = 1; c < chunks; ++c) rest.push_back(std::async(std::launch::async, run, c));
  run(0);
  for (auto& f : rest) f.get();
}

// out[i] = base[i] + x[i] (base null: 0) over the n elements of a tensor's raw bytes x in its
// storage dtype: the backward's sums stay f32 on the host, and the device's partial gradients
// come back without conversion.
void add_raw(float* out, const float* base, const std::vector<std::byte>& x, DType t, std::int64_t n) {
  host_parallel(n, [&](std::int64_t j) {
    const auto i = static_cast<std::size_t>(j);
    float v;
    if (t == DType::f32) {
      std::memcpy(&v, x.data() + 4 * i, 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, x.data() + 2 * i, 2);
      v = t == DType::f16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    out[i] = base ? base[i] + v : v;
  });
}

// t = x (t.numel() f32 values), converted to t's dtype on a few threads.
void write_raw(const Tensor& t, const float* x) {
  const DType dt = t.dtype();
  std::vector<std::byte>& raw = scratch().raw;
  raw.resize(t.bytes());
  host_parallel(t.numel(), [&](std::int64_t j) {
    const auto i = static_cast<std::size_t>(j);
    if (dt == DType::f32) {
      std::memcpy(raw.data() + 4 * i, x + i, 4);
    } else {
      const std::uint16_t h = dt == DType::f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]);
      std::memcpy(raw.data() + 2 * i, &h, 2);
    }
  });
  t.write_bytes(raw);
}

// Forward FLOPs per unmasked (query, key) pair over all batches and heads: q.k and p.v, 2 * D each.
double head_flops(const Ring& ring) { return 4.0 * static_cast<double>(ring.batch * ring.heads * ring.head_dim); }

}  // namespace

AttentionOutput ring_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, MPI_Comm comm,
                               const RingAttentionOptions& options, RingAttentionStats* stats) {
  constexpr const char* name = "ring_attention";
  const auto t_call = Clock::now();
  const Ring ring = agree(name, q, k, v, nullptr, nullptr, nullptr, comm, options);
  const bool spin = ctx.device().info().discrete;  // the compute leaves the host's cores free
  RingAttentionStats st;
  st.wait_s = since(t_call);  // the collective check waits for the slowest rank to arrive
  st.steps = ring.size;
  const std::int64_t lq = ring.len[static_cast<std::size_t>(ring.rank)];
  const std::size_t rows = static_cast<std::size_t>(ring.batch * ring.heads * lq);

  // Running output (f32) and log-sum-exp of this shard's queries, on the device: attention_merge
  // folds in each block's result. Rows start at -inf, which it reads as "nothing yet".
  const Shape lse_shape{ring.batch, ring.heads, lq};
  auto minus_inf = [&] {
    Tensor t = ctx.empty(lse_shape, DType::f32);
    t.write(std::vector<float>(rows, -std::numeric_limits<float>::infinity()));
    return t;
  };
  const Tensor acc = ctx.empty(q.shape(), DType::f32), acc_lse = minus_inf();
  AttentionOutput part{ctx.empty(q.shape(), q.dtype()), ctx.empty(lse_shape, DType::f32)};
  BlockTensors blocks{ctx, ring, {}};
  std::string failure;

  auto t0 = Clock::now();
  auto& buf = scratch().msg;
  host_block(ring, k, v, buf);
  st.host_s += since(t0);

  for (int step = 0; step < ring.size; ++step) {
    const int s = ring.src(step);
    Requests reqs{.spin = spin, .r = {}};
    pass_block(ring, step, buf, reqs);
    const std::int64_t pairs = failure.empty() ? ring.pairs(s) : 0;
    if (pairs > 0) {
      try {
        t0 = Clock::now();
        const std::pair<Tensor, Tensor> kv = block(ring, s, k, v, buf[step % 2], blocks);
        st.host_s += since(t0);
        const AttentionOptions bo = ring.block_options(s);
        st.compute_s += overlapped(reqs, [&] {
          flash_attention(ctx, q, kv.first, kv.second, part.out, part.lse, bo);
          attention_merge(ctx, acc, acc_lse, part.out, part.lse);
          ctx.device().synchronize();
        });
        ++st.blocks;
        st.flops += head_flops(ring) * static_cast<double>(pairs);
      } catch (const std::exception& e) {
        failure = std::string(name) + ": rank " + std::to_string(ring.rank) + ": " + e.what();
      }
    }
    t0 = Clock::now();
    reqs.wait();
    st.wait_s += since(t0);
  }
  t0 = Clock::now();
  settle(ring, name, failure);
  st.wait_s += since(t0);

  // The result in q's dtype: merged into an empty output whose rows are all -inf, acc comes out
  // rounded once, with its lse. Every row was written: its own block holds its diagonal key.
  t0 = Clock::now();
  AttentionOutput r{acc, acc_lse};
  if (q.dtype() != DType::f32) {
    r = {ctx.empty(q.shape(), q.dtype()), minus_inf()};
    attention_merge(ctx, r.out, r.lse, acc, acc_lse);
    ctx.device().synchronize();
  }
  st.compute_s += since(t0);
  st.total_s = since(t_call);
  if (stats) *stats = st;
  return r;
}

AttentionGrads ring_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& dout, const Tensor& lse, MPI_Comm comm,
                                  const RingAttentionOptions& options, RingAttentionStats* stats) {
  constexpr const char* name = "ring_attention_bwd";
  const auto t_call = Clock::now();
  const Ring ring = agree(name, q, k, v, &out, &dout, &lse, comm, options);
  const bool spin = ctx.device().info().discrete;  // the compute leaves the host's cores free
  RingAttentionStats st;
  st.wait_s = since(t_call);  // the collective check waits for the slowest rank to arrive
  st.steps = ring.size;
  const std::int64_t most = *std::max_element(ring.len.begin(), ring.len.end());
  const std::size_t block_floats = static_cast<std::size_t>(ring.batch * most * ring.kv_heads * ring.head_dim);

  // Every element of these is written before it is read: dq by the first block's sum, grad_out
  // each step, grad_in by its message.
  std::vector<float>& dq = scratch().dq;
  dq.resize(static_cast<std::size_t>(q.numel()));
  bool dq_seen = false;
  // dk then dv of the block in hand, summed over the ranks it has visited (f32 on the wire).
  std::vector<float>&grad_in = scratch().grad_in, &grad_out = scratch().grad_out;
  grad_in.resize(2 * block_floats);
  grad_out.resize(2 * block_floats);
  AttentionGrads part{ctx.empty(q.shape(), q.dtype()), {}, {}, {}, {}};
  std::map<std::int64_t, std::pair<Tensor, Tensor>> dkv;  // per shard length
  BlockTensors blocks{ctx, ring, {}};
  std::string failure;

  auto t0 = Clock::now();
  auto& buf = scratch().msg;
  host_block(ring, k, v, buf);
  st.host_s += since(t0);

  auto grad_count = [&](int s) { return static_cast<int>(2 * ring.kv_elems(s)); };
  for (int step = 0; step < ring.size; ++step) {
    const int s = ring.src(step);
    Requests reqs{.spin = spin, .r = {}};
    pass_block(ring, step, buf, reqs);
    if (step > 0) {
      // The left neighbour's sums for this block arrive while we compute; ours for the block of
      // the previous step go right.
      MPI_Request a, b;
      check_mpi(MPI_Irecv(grad_in.data(), grad_count(s), MPI_FLOAT, ring.left(), grad_tag, ring.comm, &a), "MPI_Irecv");
      reqs.add(a);
      check_mpi(MPI_Isend(grad_out.data(), grad_count(ring.src(step - 1)), MPI_FLOAT, ring.right(), grad_tag, ring.comm, &b),
                "MPI_Isend");
      reqs.add(b);
    }
    const std::int64_t pairs = failure.empty() ? ring.pairs(s) : 0;
    bool computed = false;
    if (pairs > 0) {
      try {
        t0 = Clock::now();
        const std::pair<Tensor, Tensor> kv = block(ring, s, k, v, buf[step % 2], blocks);
        auto it = dkv.find(ring.len[static_cast<std::size_t>(s)]);
        if (it == dkv.end())
          it = dkv.emplace(ring.len[static_cast<std::size_t>(s)], std::pair{ctx.empty(kv.first.shape(), ring.dtype),
                                                                             ctx.empty(kv.first.shape(), ring.dtype)})
                   .first;
        part.dk = it->second.first;
        part.dv = it->second.second;
        st.host_s += since(t0);
        const AttentionOptions bo = ring.block_options(s);
        st.compute_s += overlapped(reqs, [&] {
          flash_attention_bwd(ctx, q, kv.first, kv.second, out, dout, lse, part, bo);
          ctx.device().synchronize();
        });
        ++st.blocks;
        st.flops += 2.5 * head_flops(ring) * static_cast<double>(pairs);
        t0 = Clock::now();
        add_raw(dq.data(), dq_seen ? dq.data() : nullptr, read_raw(part.dq, scratch().raw), ring.dtype, q.numel());
        dq_seen = true;
        st.host_s += since(t0);
        computed = true;
      } catch (const std::exception& e) {
        failure = std::string(name) + ": rank " + std::to_string(ring.rank) + ": " + e.what();
      }
    }
    t0 = Clock::now();
    reqs.wait();
    st.wait_s += since(t0);
    t0 = Clock::now();
    const std::size_t n = static_cast<std::size_t>(ring.kv_elems(s));
    // This block's sums so far: none at step 0, else what the left neighbour sent.
    const float* base = step == 0 ? nullptr : grad_in.data();
    if (computed) {
      add_raw(grad_out.data(), base, read_raw(part.dk, scratch().raw), ring.dtype, static_cast<std::int64_t>(n));
      add_raw(grad_out.data() + n, base ? base + n : nullptr, read_raw(part.dv, scratch().raw), ring.dtype, static_cast<std::int64_t>(n));
    } else if (base) {
      std::copy(grad_in.begin(), grad_in.begin() + static_cast<std::ptrdiff_t>(2 * n), grad_out.begin());
    } else {
      std::fill(grad_out.begin(), grad_out.begin() + static_cast<std::ptrdiff_t>(2 * n), 0.f);
    }
    st.host_s += since(t0);
  }
  // The last block handled is the right neighbour's, now complete; ours comes from the left.
  if (ring.size > 1) {
    Requests reqs{.spin = spin, .r = {}};
    MPI_Request a, b;
    check_mpi(MPI_Irecv(grad_in.data(), grad_count(ring.rank), MPI_FLOAT, ring.left(), grad_tag, ring.comm, &a), "MPI_Irecv");
    reqs.add(a);
    check_mpi(MPI_Isend(grad_out.data(), grad_count(ring.right()), MPI_FLOAT, ring.right(), grad_tag, ring.comm, &b),
              "MPI_Isend");
    reqs.add(b);
    t0 = Clock::now();
    reqs.wait();
    st.wait_s += since(t0);
  } else {
    grad_in.swap(grad_out);
  }
  t0 = Clock::now();
  settle(ring, name, failure);
  st.wait_s += since(t0);

  t0 = Clock::now();
  const std::size_t n = static_cast<std::size_t>(ring.kv_elems(ring.rank));
  AttentionGrads r{ctx.empty(q.shape(), q.dtype()), ctx.empty(k.shape(), k.dtype()), ctx.empty(v.shape(), v.dtype()), {}, {}};
  write_raw(r.dq, dq.data());
  write_raw(r.dk, grad_in.data());
  write_raw(r.dv, grad_in.data() + n);
  st.host_s += since(t0);
  st.total_s = since(t_call);
  if (stats) *stats = st;
  return r;
}

}  // namespace ejk
