// ejk::ring_attention and ejk::ring_attention_bwd: flash attention over a sequence sharded
// across MPI ranks. Each step queues the block in hand's transfer to the right neighbour and the
// next block's from the left, then attends the block in hand while they travel (a Link: device to
// device through a PeerGroup, or staged through host memory and MPI). Partial results merge
// through the log-sum-exp on the device (attention_merge); in the backward, dk and dv travel with
// their block, summed in f32 on each device they visit (add), and reach their owner after a full
// turn.
#include "ejk/ring_attention.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/ops.hpp"
#include "ejk/peer.hpp"
#include "flash_attention/flash_attention.hpp"

namespace ejk {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

constexpr int pass_tag = 7301, error_text = 240;

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
  std::int64_t causal = 0, left = -1, right = -1, softcap_bits = 0, scale_bits = 0, layout = 0, transport = 0;
  char error[error_text] = {};
  char shapes[error_text] = {};
  char peer[error_text] = {};    // the device's identity when it has a transport to other processes
  char domain[error_text] = {};  // and the transport's domain (PeerTransport::domain)
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

std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

constexpr std::int64_t unbounded = INT64_MAX / 4;

// The sharding every rank agreed on.
struct Ring {
  MPI_Comm comm;
  int size = 1, rank = 0;
  std::int64_t batch = 0, heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;
  std::vector<std::int64_t> len, start;  // per rank
  RingAttentionOptions o;
  // The device transport's name (peer_transport) when every rank's device has one and no two
  // ranks share a device; empty: blocks go through host memory.
  std::string device_link;

  std::size_t esize() const { return dtype_size(dtype); }
  std::int64_t kv_elems(int r) const { return batch * length(r) * kv_heads * head_dim; }
  int left() const { return (rank + size - 1) % size; }
  int right() const { return (rank + 1) % size; }
  int src(int step) const { return (rank - step % size + size) % size; }  // whose block step `step` holds
  std::int64_t length(int r) const { return len[static_cast<std::size_t>(r)]; }

  // Query i of this shard sees key j of rank s's shard when i - below(s) <= j <= i + above(s), in
  // the shards' own indices (either bound may be `unbounded`).
  //   contiguous: global positions start + i, so the band of the whole sequence shifted by the
  //     shards' offset;
  //   striped: global positions i * P + rank: the whole sequence's band p - left <= p' <= p +
  //     right (causal: right 0) becomes i - j <= floor((left - (rank - s)) / P) and j - i <=
  //     floor((right - (s - rank)) / P).
  std::int64_t below(int s) const {
    const std::int64_t l = o.sliding_window.left;
    if (l < 0) return unbounded;
    if (o.layout == RingLayout::striped) return floor_div(l - (rank - s), size);
    return l - (start[static_cast<std::size_t>(rank)] - start[static_cast<std::size_t>(s)]);
  }
  std::int64_t above(int s) const {
    const std::int64_t r = o.causal ? 0 : o.sliding_window.right;
    if (r < 0) return unbounded;
    if (o.layout == RingLayout::striped) return floor_div(r - (s - rank), size);
    return r + (start[static_cast<std::size_t>(rank)] - start[static_cast<std::size_t>(s)]);
  }
  // Unmasked (query, key) pairs between this rank's queries and rank s's keys; 0: skip the block.
  std::int64_t pairs(int s) const {
    const std::int64_t lq = length(rank), lk = length(s), b = below(s), a = above(s);
    std::int64_t n = 0;
    for (std::int64_t i = 0; i < lq; ++i)
      n += std::max<std::int64_t>(0, std::min(lk - 1, i + std::min(a, unbounded)) - std::max<std::int64_t>(0, i - b) + 1);
    return n;
  }
  // Flash attention's options giving block s that band: its mask reads lo(i) = i + d - left and
  // hi(i) = i + d (causal) with d = lk - lq + diagonal_offset (attention.hpp).
  AttentionOptions block_options(int s) const {
    AttentionOptions a;
    a.logits_soft_cap = o.logits_soft_cap;
    a.softmax_scale = o.softmax_scale;
    const std::int64_t lq = length(rank), lk = length(s), up = above(s), down = below(s);
    if (up != unbounded) {
      a.causal = true;
      a.diagonal_offset = up - (lk - lq);
      a.sliding_window = {down == unbounded ? -1 : down + up, -1};
    } else {
      a.diagonal_offset = -(lk - lq);
      a.sliding_window = {down == unbounded ? -1 : down, -1};
    }
    return a;
  }
};

// The collective check: every rank states its shard; every rank throws the same error when
// any rank's arguments are wrong or the shards do not fit together.
Ring agree(const char* k, const Context& ctx, const Tensor& q, const Tensor& kk, const Tensor& v, const Tensor* out,
           const Tensor* dout, const Tensor* lse, MPI_Comm comm, const RingAttentionOptions& o) {
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
  mine.layout = static_cast<std::int64_t>(o.layout), mine.transport = static_cast<std::int64_t>(o.transport);
  PeerTransport pt;
  if (o.transport == RingTransport::automatic && mine.ok) {
    pt = peer_transport(ctx.device());
    if (pt.absent.empty()) {
      copy_text(mine.peer, pt.identity);
      copy_text(mine.domain, pt.domain);
    }
  }
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
        c.scale_bits != c0.scale_bits || c.layout != c0.layout || c.transport != c0.transport)
      throw InvalidArgument(std::string(k) + ": options differ across ranks (rank 0 and rank " + std::to_string(r) +
                            "): causal, sliding_window, logits_soft_cap, softmax_scale, layout and transport must be "
                            "the same on every rank");
    if (o.layout == RingLayout::striped && c.seq != c0.seq)
      throw InvalidArgument(std::string(k) + ": a striped layout needs shards of one length: rank 0 has " + c0.shapes +
                            ", rank " + std::to_string(r) + " has " + c.shapes);
  }
  // A device transport when every rank has one of one domain (NCCL everywhere, or CUDA IPC on
  // one host) and no two ranks share a device (NCCL refuses a device twice in a group).
  bool device_link = ring.size > 1;
  for (int r = 0; r < ring.size && device_link; ++r) {
    const char* id = all[static_cast<std::size_t>(r)].peer;
    if (!*id || std::strncmp(all[static_cast<std::size_t>(r)].domain, c0.domain, error_text) != 0) device_link = false;
    for (int u = 0; u < r && device_link; ++u)
      if (std::strncmp(id, all[static_cast<std::size_t>(u)].peer, error_text) == 0) device_link = false;
  }
  if (device_link) ring.device_link = pt.name;
  ring.batch = c0.batch, ring.heads = c0.heads, ring.kv_heads = c0.kv_heads, ring.head_dim = c0.head_dim;
  ring.dtype = q.dtype();
  std::int64_t at = 0;
  for (const Claim& c : all) {
    ring.len.push_back(c.seq);
    ring.start.push_back(at);
    at += c.seq;
  }
  // MPI messages carry one block's k or v in the storage dtype, or its dk or dv in f32.
  for (int r = 0; r < ring.size && ring.device_link.empty(); ++r) {
    const double most = static_cast<double>(ring.kv_elems(r)) * static_cast<double>(std::max<std::size_t>(4, ring.esize()));
    if (most > static_cast<double>(INT_MAX))
      throw InvalidArgument(std::string(k) + ": the shard of rank " + std::to_string(r) + " (" + std::to_string(ring.len[static_cast<std::size_t>(r)]) +
                            " tokens) makes messages of " + std::to_string(most) + " bytes, more than one MPI message of INT_MAX bytes");
  }
  return ring;
}

// One tensor's bytes to the right neighbour and another's from the left, as one step's transfer.
// `forwarded`: send holds what the previous step's pass of the same index received, unchanged.
struct Pass {
  Tensor send, recv;
  bool forwarded = false;
};

// How a step's passes travel. post() queues them after the work submitted so far; overlap()
// runs a step's compute (which submits device work) while they are in flight; land() orders the
// work submitted after it after their arrival. With `timed`, each step's compute is timed on the
// device's clock into compute_s (Device::time_ns, which waits for it).
class Link {
 public:
  virtual ~Link() = default;
  virtual void post(std::vector<Pass> passes) = 0;
  virtual void overlap(const std::function<void()>& work) = 0;
  virtual void land() = 0;
  // Waits for the device's work, at the end of the ring.
  virtual void finish() = 0;
};

// Device to device through a PeerGroup (none on a ring of one, where nothing travels): every
// call returns at once and the device orders the rest, so the host runs ahead and the transfers
// overlap the compute on the device's own queues.
class DeviceLink final : public Link {
 public:
  DeviceLink(const Ring& ring, Device& device, PeerGroup* group, RingAttentionStats* st)
      : ring_(ring), device_(device), group_(group), st_(st) {}
  void post(std::vector<Pass> passes) override {
    std::vector<PeerGroup::Move> moves;
    for (const Pass& p : passes) {
      moves.push_back({&p.send.buffer(), nullptr, p.send.bytes(), ring_.right()});
      moves.push_back({nullptr, &p.recv.buffer(), p.recv.bytes(), ring_.left()});
    }
    group_->exchange(moves);
    held_.push_back(std::move(passes));  // the buffers stay alive until the device is done
  }
  void overlap(const std::function<void()>& work) override {
    if (st_) st_->compute_s += device_.time_ns(work) * 1e-9;
    else work();
  }
  void land() override {
    if (group_) group_->join();
  }
  void finish() override {
    device_.synchronize();
    held_.clear();
  }

 private:
  const Ring& ring_;
  Device& device_;
  PeerGroup* group_;
  RingAttentionStats* st_;
  std::vector<std::vector<Pass>> held_;
};

// A host buffer of the host path and the last device copy to or from it.
struct HostSlot {
  std::shared_ptr<HostBuffer> buffer;
  FencePtr busy;
  // Ready for `bytes` new bytes: the copy that last used it has completed, and it is large enough.
  void reuse(Device& device, std::size_t bytes) {
    if (busy) busy->wait();
    busy = nullptr;
    if (!buffer || buffer->bytes() < bytes) {
      buffer.reset();
      buffer = device.allocate_host(bytes);
    }
  }
};

// One pass's host buffers: what arrives from the left, what goes right.
struct Staging {
  HostSlot in, out;
};

// Host buffers of one thread's calls on one device, kept between calls: fresh allocations of
// these sizes (hundreds of MB at long shards) cost their page faults, or their pinning, again on
// every call.
std::vector<Staging>& staging(const std::shared_ptr<Device>& device, std::size_t passes) {
  struct Kept {
    std::weak_ptr<Device> device;
    std::vector<Staging> passes;
  };
  thread_local std::vector<Kept> kept;
  std::erase_if(kept, [](const Kept& k) { return k.device.expired(); });
  auto it = std::find_if(kept.begin(), kept.end(), [&](const Kept& k) {
    return !k.device.owner_before(device) && !device.owner_before(k.device);
  });
  if (it == kept.end()) it = kept.insert(kept.end(), Kept{device, {}});
  if (it->passes.size() < passes) it->passes.resize(passes);
  return it->passes;
}

// Whether the host path's device copies use the device's transfer queue: $EJK_RING_HOST_COPIES
// `queue` (the default) or `inline` (on the calling thread, as on devices without one), for
// measuring the one against the other.
bool copies_on_transfer_queue() {
  const char* v = std::getenv("EJK_RING_HOST_COPIES");
  if (!v || !*v || std::string_view(v) == "queue") return true;
  if (std::string_view(v) == "inline") return false;
  throw InvalidArgument("EJK_RING_HOST_COPIES=" + std::string(v) + ": expected queue or inline");
}

// Through host memory (Device::allocate_host: pinned where the backend has it) and MPI. On a
// device with a transfer queue (OpenCL, Vulkan) the copies run there beside the compute: a send
// is downloaded as soon as post() is called, after the compute that made it, and its message
// leaves once the download is done; an arrival is uploaded as soon as MPI delivers it, under the
// step's compute, and the next step's compute waits for it on the device. Elsewhere the copies
// are made on this thread, sends in post() and arrivals in land(). Either way the messages
// overlap the compute: a worker thread computes while this one drives MPI.
class HostLink final : public Link {
 public:
  HostLink(const Ring& ring, std::shared_ptr<Device> device, RingAttentionStats& st)
      : ring_(ring), device_(std::move(device)), st_(st), spin_(device_->info().discrete),
        async_(device_->has_transfer_queue() && copies_on_transfer_queue()) {}
  HostLink(const HostLink&) = delete;
  HostLink& operator=(const HostLink&) = delete;

  // On the way out of an error: no neighbour is left waiting for a message, and no request or
  // copy still uses the host buffers.
  ~HostLink() override {
    std::vector<MPI_Request> open;
    for (std::size_t i = 0; i < flights_.size(); ++i) {
      Flight& f = flights_[i];
      if (!f.sent && i < pending_.size() && stage_->at(i).out.buffer) {
        try {
          if (stage_->at(i).out.busy) stage_->at(i).out.busy->wait();
        } catch (...) {
          // The bytes are lost either way; the message still goes so that the neighbour goes on.
        }
        MPI_Isend(stage_->at(i).out.buffer->data(), static_cast<int>(pending_[i].send.bytes()), MPI_BYTE, ring_.right(),
                  pass_tag + static_cast<int>(i), ring_.comm, &f.send);
      }
      for (MPI_Request r : {f.send, f.recv})
        if (r != MPI_REQUEST_NULL) open.push_back(r);
    }
    if (!open.empty()) MPI_Waitall(static_cast<int>(open.size()), open.data(), MPI_STATUSES_IGNORE);
    try {
      device_->synchronize();
    } catch (...) {
      // A failed device has nothing left in flight.
    }
  }

  // The host path always times (its worker waits for the device anyway).
  void post(std::vector<Pass> passes) override {
    const auto t0 = Clock::now();
    stage_ = &staging(device_, passes.size());
    // After the compute that made the blocks sent here and that last read the tensors receiving:
    // the step about to be queued is not part of it, so uploads run under it.
    after_ = device_->mark();
    flights_.assign(passes.size(), Flight{});
    for (std::size_t i = 0; i < passes.size(); ++i) {
      Staging& s = (*stage_)[i];
      const Pass& p = passes[i];
      if (p.forwarded) {
        std::swap(s.in, s.out);  // sent as it arrived; its upload may still be reading it
      } else {
        s.out.reuse(*device_, p.send.bytes());
        s.out.busy = device_->download(p.send.buffer(), 0, *s.out.buffer, 0, p.send.bytes(), after_);
      }
      s.in.reuse(*device_, p.recv.bytes());
      check_mpi(MPI_Irecv(s.in.buffer->data(), static_cast<int>(p.recv.bytes()), MPI_BYTE, ring_.left(),
                          pass_tag + static_cast<int>(i), ring_.comm, &flights_[i].recv),
                "MPI_Irecv");
    }
    pending_ = std::move(passes);
    progress();
    st_.host_s += since(t0);
  }

  void overlap(const std::function<void()>& work) override {
    double device_s = 0;
    auto task = std::async(std::launch::async, [&] { device_s = device_->time_ns(work) * 1e-9; });
    bool done = flights_.empty();
    while (task.wait_for(std::chrono::microseconds(done ? 1000 : spin_ ? 0 : 50)) != std::future_status::ready)
      if (!done) done = progress();
    task.get();
    st_.compute_s += device_s;
  }

  // Waits for the messages (the part spent on downloads not yet done counts as host time), and
  // orders the compute after the uploads.
  void land() override {
    const auto t0 = Clock::now();
    auto sent = t0;
    for (int i = 0; !progress(); ++i) {
      if (unsent_ > 0) sent = Clock::now();
      if (i >= 64 && !spin_) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    const auto t1 = Clock::now();
    st_.host_s += std::chrono::duration<double>(sent - t0).count();
    st_.wait_s += std::chrono::duration<double>(t1 - sent).count();
    for (std::size_t i = 0; i < pending_.size(); ++i) {
      Staging& s = (*stage_)[i];
      if (!async_) s.in.busy = device_->upload(*s.in.buffer, 0, pending_[i].recv.buffer(), 0, pending_[i].recv.bytes());
      device_->order_after(s.in.busy);
    }
    pending_.clear();
    flights_.clear();
    st_.host_s += since(t1);
  }

  void finish() override { device_->synchronize(); }

 private:
  struct Flight {
    MPI_Request recv = MPI_REQUEST_NULL, send = MPI_REQUEST_NULL;
    bool sent = false;      // the send is posted
    bool received = false;  // the receive has completed
  };

  // Takes every pass as far as it goes without waiting: a send whose download is done is
  // posted, an arrival is uploaded (with a transfer queue), finished requests retire. True once
  // every message has left and arrived. Open MPI moves a large shared-memory message a fragment
  // per call, so the rate of these calls sets the transfer's: with a discrete GPU computing,
  // callers poll without pausing (`spin_`); with devices that compute on the host's cores (the
  // CPU backend, PoCL, lavapipe) they pause between polls, and never call MPI_Waitall, which
  // spins a core at full speed in Open MPI and would take it from the compute.
  bool progress() {
    bool done = true;
    unsent_ = 0;
    for (std::size_t i = 0; i < flights_.size(); ++i) {
      Flight& f = flights_[i];
      Staging& s = (*stage_)[i];
      const Pass& p = pending_[i];
      if (!f.sent) {
        if (s.out.busy && !s.out.busy->reached()) {
          ++unsent_;
          done = false;
        } else {
          check_mpi(MPI_Isend(s.out.buffer->data(), static_cast<int>(p.send.bytes()), MPI_BYTE, ring_.right(),
                              pass_tag + static_cast<int>(i), ring_.comm, &f.send),
                    "MPI_Isend");
          f.sent = true;
        }
      }
      int flag = 0;
      if (f.send != MPI_REQUEST_NULL) {
        check_mpi(MPI_Test(&f.send, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (!flag) done = false;
      }
      if (!f.received) {
        check_mpi(MPI_Test(&f.recv, &flag, MPI_STATUS_IGNORE), "MPI_Test");
        if (flag) {
          f.received = true;
          if (async_) s.in.busy = device_->upload(*s.in.buffer, 0, p.recv.buffer(), 0, p.recv.bytes(), after_);
        } else {
          done = false;
        }
      }
    }
    return done;
  }

  const Ring& ring_;
  std::shared_ptr<Device> device_;
  RingAttentionStats& st_;
  bool spin_, async_;
  std::vector<Staging>* stage_ = nullptr;
  FencePtr after_;
  std::vector<Pass> pending_;
  std::vector<Flight> flights_;
  int unsent_ = 0;
};

// Peer groups kept on the communicator (an MPI attribute, freed with it): opening one (NCCL's
// communicator) takes far longer than a ring call.
struct PeerGroups {
  std::vector<std::pair<const Device*, std::unique_ptr<PeerGroup>>> list;
};
int free_groups(MPI_Comm, int, void* attribute, void*) {
  delete static_cast<PeerGroups*>(attribute);
  return MPI_SUCCESS;
}
PeerGroup& peer_group(const Ring& ring, Device& device) {
  static const int keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    check_mpi(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_groups, &k, nullptr), "MPI_Comm_create_keyval");
    return k;
  }();
  void* attribute = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(ring.comm, keyval, &attribute, &found), "MPI_Comm_get_attr");
  auto* groups = static_cast<PeerGroups*>(attribute);
  if (!found) {
    groups = new PeerGroups;
    check_mpi(MPI_Comm_set_attr(ring.comm, keyval, groups), "MPI_Comm_set_attr");
  }
  for (auto& [d, g] : groups->list)
    if (d == &device) return *g;
  PeerGroupKey key;
  if (ring.rank == 0) key = new_peer_group_key(device);
  check_mpi(MPI_Bcast(key.bytes.data(), static_cast<int>(key.bytes.size()), MPI_BYTE, 0, ring.comm), "MPI_Bcast");
  groups->list.emplace_back(&device, open_peer_group(device, key, ring.rank, ring.size));
  return *groups->list.back().second;
}

std::unique_ptr<Link> open_link(const Ring& ring, const std::shared_ptr<Device>& dev, RingAttentionStats& st, bool timed) {
  Device& device = *dev;
  if (ring.size == 1) {
    st.transport = "none";
    return std::make_unique<DeviceLink>(ring, device, nullptr, timed ? &st : nullptr);
  }
  if (!ring.device_link.empty()) {
    PeerGroup& g = peer_group(ring, device);
    st.transport = ring.device_link;
    return std::make_unique<DeviceLink>(ring, device, &g, timed ? &st : nullptr);
  }
  st.transport = "host";
  return std::make_unique<HostLink>(ring, dev, st);
}

// Device tensors of one shape, two of each (the step's and the next step's), per shard length.
struct Slots {
  const Context& ctx;
  DType dtype;
  std::function<Shape(std::int64_t)> shape;
  std::map<std::pair<std::int64_t, int>, Tensor> tensors;
  const Tensor& of(std::int64_t length, int slot) {
    auto it = tensors.find({length, slot});
    if (it == tensors.end())
      it = tensors.emplace(std::pair{length, slot}, Tensor::scratch(ctx.device_ptr(), shape(length), dtype)).first;
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

// One rank's side of a collective call: its figures, and the first failure met on the way. A
// failure does not stop the rank (it keeps passing blocks so that no other rank waits for one);
// end() makes every rank throw it.
struct Call {
  explicit Call(const char* n) : name(n) {}
  const char* name;
  Clock::time_point start = Clock::now();
  RingAttentionStats st{};
  std::string failure;

  bool failed() const { return !failure.empty(); }
  template <class Work>
  bool attempt(const Ring& ring, Work work) {
    try {
      work();
      return true;
    } catch (const std::exception& e) {
      if (failure.empty()) failure = std::string(name) + ": rank " + std::to_string(ring.rank) + ": " + e.what();
      return false;
    }
  }
  // Waits for the device, agrees on failures, and hands out the figures.
  void end(const Ring& ring, Link& link, RingAttentionStats* stats) {
    auto t0 = Clock::now();
    attempt(ring, [&] { link.finish(); });
    st.wait_s += since(t0);
    t0 = Clock::now();
    settle(ring, name, failure);
    st.wait_s += since(t0);
    st.total_s = since(start);
    if (stats) *stats = st;
  }
};

// Forward FLOPs per unmasked (query, key) pair over all batches and heads: q.k and p.v, 2 * D each.
double head_flops(const Ring& ring) { return 4.0 * static_cast<double>(ring.batch * ring.heads * ring.head_dim); }

Shape kv_shape(const Ring& ring, std::int64_t length) { return {ring.batch, length, ring.kv_heads, ring.head_dim}; }

}  // namespace

AttentionOutput ring_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, MPI_Comm comm,
                               const RingAttentionOptions& options, RingAttentionStats* stats) {
  Call call("ring_attention");
  const Ring ring = agree(call.name, ctx, q, k, v, nullptr, nullptr, nullptr, comm, options);
  RingAttentionStats& st = call.st;
  st.wait_s = since(call.start);  // the collective check waits for the slowest rank to arrive
  st.steps = ring.size;
  const Shape lse_shape{ring.batch, ring.heads, ring.length(ring.rank)};
  const auto& dev = ctx.device_ptr();

  // Running output (f32) and log-sum-exp of this shard's queries, on the device: the first block
  // (this rank's own, never masked whole: it holds every query's diagonal key) starts them, and
  // attention_merge folds in each later block's result.
  const bool f32 = ring.dtype == DType::f32;
  const Tensor acc = Tensor::scratch(dev, q.shape(), DType::f32), acc_lse = Tensor::scratch(dev, lse_shape, DType::f32);
  const AttentionOutput part{Tensor::scratch(dev, q.shape(), q.dtype()), Tensor::scratch(dev, lse_shape, DType::f32)};
  Slots ks{ctx, ring.dtype, [&](std::int64_t n) { return kv_shape(ring, n); }, {}}, vs = ks;
  std::unique_ptr<Link> link = open_link(ring, ctx.device_ptr(), st, stats != nullptr);

  // Step t attends rank src(t)'s block: its own at step 0, then what arrived from the left.
  Tensor kc = k, vc = v;
  for (int step = 0; step < ring.size; ++step) {
    const int s = ring.src(step);
    Tensor kn, vn;
    if (step + 1 < ring.size) {
      const std::int64_t next = ring.length(ring.src(step + 1));
      kn = ks.of(next, (step + 1) % 2), vn = vs.of(next, (step + 1) % 2);
      link->post({{kc, kn, step > 0}, {vc, vn, step > 0}});
    }
    const std::int64_t pairs = call.failed() ? 0 : ring.pairs(s);
    if (pairs > 0 && call.attempt(ring, [&] {
          const AttentionOptions bo = ring.block_options(s);
          link->overlap([&] {
            if (step == 0 && f32) {
              flash_attention(ctx, q, kc, vc, acc, acc_lse, bo);
            } else if (step == 0) {
              flash_attention(ctx, q, kc, vc, part.out, acc_lse, bo);
              add(ctx, part.out, part.out, acc, 0.0);
            } else {
              flash_attention(ctx, q, kc, vc, part.out, part.lse, bo);
              attention_merge(ctx, acc, acc_lse, part.out, part.lse);
            }
          });
        })) {
      ++st.blocks;
      st.flops += head_flops(ring) * static_cast<double>(pairs);
    }
    if (step + 1 < ring.size) link->land();
    kc = kn, vc = vn;
  }

  // The result in q's dtype, rounded once; the log-sum-exp is the running one.
  AttentionOutput r{acc, acc_lse};
  if (!f32 && !call.failed())
    call.attempt(ring, [&] {
      r.out = ctx.empty(q.shape(), q.dtype());
      add(ctx, acc, acc, r.out, 0.0);
    });
  call.end(ring, *link, stats);
  return r;
}

AttentionGrads ring_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& dout, const Tensor& lse, MPI_Comm comm,
                                  const RingAttentionOptions& options, RingAttentionStats* stats) {
  Call call("ring_attention_bwd");
  const Ring ring = agree(call.name, ctx, q, k, v, &out, &dout, &lse, comm, options);
  RingAttentionStats& st = call.st;
  st.wait_s = since(call.start);  // the collective check waits for the slowest rank to arrive
  st.steps = ring.size;

  // dq summed in f32 over the blocks; each block's dk and dv (f32, g*) summed over the ranks it
  // visits, travelling one step behind the block itself.
  const auto& dev = ctx.device_ptr();
  const Tensor dq = Tensor::scratch(dev, q.shape(), DType::f32);
  Slots ks{ctx, ring.dtype, [&](std::int64_t n) { return kv_shape(ring, n); }, {}}, vs = ks;
  Slots gks{ctx, DType::f32, ks.shape, {}}, gvs = gks;
  Slots pks{ctx, ring.dtype, ks.shape, {}}, pvs = pks;  // a block's own dk and dv (slot 0 only)
  const Tensor part_dq = Tensor::scratch(dev, q.shape(), q.dtype());
  std::unique_ptr<Link> link = open_link(ring, ctx.device_ptr(), st, stats != nullptr);

  Tensor kc = k, vc = v, gk_prev, gv_prev;
  for (int step = 0; step < ring.size; ++step) {
    const int s = ring.src(step);
    const std::int64_t n = ring.length(s);
    // This block's sums so far arrive from the left while it is attended; the previous block's
    // go right.
    const Tensor gk = gks.of(n, step % 2), gv = gvs.of(n, step % 2);
    std::vector<Pass> passes;
    Tensor kn, vn;
    if (step + 1 < ring.size) {
      const std::int64_t next = ring.length(ring.src(step + 1));
      kn = ks.of(next, (step + 1) % 2), vn = vs.of(next, (step + 1) % 2);
      passes.push_back({kc, kn, step > 0});
      passes.push_back({vc, vn, step > 0});
    }
    if (step > 0) {
      passes.push_back({gk_prev, gk, false});
      passes.push_back({gv_prev, gv, false});
    }
    if (!passes.empty()) link->post(std::move(passes));
    const std::int64_t pairs = call.failed() ? 0 : ring.pairs(s);
    AttentionGrads part{part_dq, pks.of(n, 0), pvs.of(n, 0), {}, {}};
    const bool computed = pairs > 0 && call.attempt(ring, [&] {
      const AttentionOptions bo = ring.block_options(s);
      link->overlap([&] {
        flash_attention_bwd(ctx, q, kc, vc, out, dout, lse, part, bo);
        // Step 0 is this rank's own block, never masked whole: the first term of dq.
        add(ctx, step == 0 ? part.dq : dq, part.dq, dq, step == 0 ? 0.0 : 1.0);
      });
    });
    if (computed) {
      ++st.blocks;
      st.flops += 2.5 * head_flops(ring) * static_cast<double>(pairs);
    }
    link->land();
    // At step 0 the block's sums start here; later, what the left neighbour sent grows.
    if (computed)
      call.attempt(ring, [&] {
        link->overlap([&] {
          add(ctx, step == 0 ? part.dk : gk, part.dk, gk, step == 0 ? 0.0 : 1.0);
          add(ctx, step == 0 ? part.dv : gv, part.dv, gv, step == 0 ? 0.0 : 1.0);
        });
      });
    kc = kn, vc = vn, gk_prev = gk, gv_prev = gv;
  }
  // The last block handled is the right neighbour's, now complete; ours comes from the left.
  Tensor gk = gk_prev, gv = gv_prev;
  if (ring.size > 1) {
    const std::int64_t n = ring.length(ring.rank);
    gk = gks.of(n, ring.size % 2), gv = gvs.of(n, ring.size % 2);
    link->post({{gk_prev, gk, false}, {gv_prev, gv, false}});
    link->land();
  }
  AttentionGrads r{ctx.empty(q.shape(), q.dtype()), ctx.empty(k.shape(), k.dtype()), ctx.empty(v.shape(), v.dtype()), {}, {}};
  if (!call.failed())
    call.attempt(ring, [&] {
      add(ctx, dq, dq, r.dq, 0.0);
      add(ctx, gk, gk, r.dk, 0.0);
      add(ctx, gv, gv, r.dv, 0.0);
    });
  call.end(ring, *link, stats);
  return r;
}

}  // namespace ejk
