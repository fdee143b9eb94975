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

#include <optional>

#include "ejk/attention.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// The options of flash attention that ring attention supports, with the same meaning for the
// whole (gathered) sequence: positions are global, so a window or the causal mask spans shards.
struct RingAttentionOptions {
  bool causal = false;
  AttentionWindow sliding_window{};
  double logits_soft_cap = 0.0;
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
};

// Where one rank's time went in one call (seconds).
struct RingAttentionStats {
  int steps = 0;            // ring steps: the communicator's size
  int blocks = 0;           // key/value blocks this rank attended; blocks masked whole are skipped
  double flops = 0;         // of the attended blocks, counting only the unmasked (query, key) pairs
  double total_s = 0;       // the whole call
  double compute_s = 0;     // flash attention and the forward's merges on the device, overlapped
                            // with the messages in flight
  double wait_s = 0;        // waiting for messages once a step's compute was done (communication not
                            // hidden), and for the other ranks at the collective checks on entry and exit
  double host_s = 0;        // host <-> device copies of blocks, and the backward's sums of partial
                            // gradients on the host
};

// q [batch, seq_shard, heads, head_dim], k and v [batch, seq_shard, kv_heads, head_dim] (GQA);
// rank i holds tokens start_i .. start_i + seq_shard_i - 1 of the sequence, in rank order.
// Shards may differ in length; everything else must agree on every rank, which is checked
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
