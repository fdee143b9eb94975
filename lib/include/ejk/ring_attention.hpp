#pragma once
// Ring attention: attention over a sequence sharded across the ranks of an MPI communicator
// (sequence parallelism). Each rank holds a contiguous shard of the tokens and computes with
// flash attention on its own Context; key/value blocks travel around the ring while the block
// in hand is attended. In libejk_mpi (ejk::mpi), built with EJK_WITH_MPI; it links MPI publicly.
// Semantics, limits and figures: docs/kernels/ring_attention.md.
//
//   MPI_Init(&argc, &argv);
//   ejk::Context ctx("opencl:" + std::to_string(local_rank));
//   auto [out, lse] = ejk::ring_attention(ctx, q, k, v, MPI_COMM_WORLD, {.causal = true});
//   auto g = ejk::ring_attention_bwd(ctx, q, k, v, out, dout, lse, MPI_COMM_WORLD, {.causal = true});
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>

#include "ejk/attention.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// Which tokens of the whole sequence each rank holds.
enum class RingLayout : std::uint8_t {
  // Rank i holds a run of tokens right after rank i - 1's; shards may differ in length.
  contiguous,
  // Rank i of P holds tokens i, i + P, i + 2P, ... (every shard the same length): under a causal
  // mask or a window every rank then does the same work, where contiguous shards leave rank 0
  // one block and rank P - 1 all P.
  striped,
};

// How key/value blocks and gradients travel between ranks.
enum class RingTransport : std::uint8_t {
  // Device to device when every rank's device has a transport (peer_transport) and no two ranks
  // share a device; else through host memory.
  automatic,
  host,  // device -> host -> MPI -> host -> device, always
};

// The options of flash attention that ring attention supports, with the same meaning for the
// whole (gathered) sequence: positions are global, so a window or the causal mask spans shards.
struct RingAttentionOptions {
  bool causal = false;
  AttentionWindow sliding_window{};
  double logits_soft_cap = 0.0;
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  RingLayout layout = RingLayout::contiguous;
  RingTransport transport = RingTransport::automatic;
};

// Where one rank's time went in one call (seconds). Asking for them times each step's compute on
// the device's clock, which waits for it before the next step is queued (a few microseconds a
// step on a GPU).
struct RingAttentionStats {
  int steps = 0;            // ring steps: the communicator's size
  int blocks = 0;           // key/value blocks this rank attended; blocks masked whole are skipped
  double flops = 0;         // of the attended blocks, counting only the unmasked (query, key) pairs
  double total_s = 0;       // the whole call
  double compute_s = 0;     // flash attention, merges and gradient sums on the device's clock,
                            // overlapped with the transfers in flight
  double wait_s = 0;        // waiting for transfers not hidden by the compute, for the device to finish
                            // at the end, and for the other ranks at the collective checks
  double host_s = 0;        // host transport: queuing the blocks' device copies and waiting for a
                            // download a message could not leave without (devices with a transfer
                            // queue), or the copies themselves (the CPU, EJK_RING_HOST_COPIES=inline)
  std::string transport;    // "host", "none" (one rank), or the device transport's ("nccl 2.28.9 (path)")
};

// q [batch, seq_shard, heads, head_dim], k and v [batch, seq_shard, kv_heads, head_dim] (GQA);
// rank i holds the tokens options.layout gives it, in order (contiguous: start_i .. start_i +
// seq_shard_i - 1, shards may differ in length; striped: i, i + P, ...). Everything else must
// agree on every rank, which is checked
// collectively: a mismatch throws InvalidArgument on every rank. Returns this shard's out (like
// q) and lse (f32 [batch, heads, seq_shard]), as flash attention on the gathered sequence.
// Collective: every rank of `comm` calls it.
EJK_API AttentionOutput ring_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                       MPI_Comm comm, const RingAttentionOptions& options = {},
                                       RingAttentionStats* stats = nullptr);

// Gradients of this shard's q, k, v from the forward's out and lse (the whole sequence's, as
// ring_attention returns them) and dout; options must be those of the forward call.
EJK_API AttentionGrads ring_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& out, const Tensor& dout, const Tensor& lse, MPI_Comm comm,
                                          const RingAttentionOptions& options = {},
                                          RingAttentionStats* stats = nullptr);

}  // namespace ejk
