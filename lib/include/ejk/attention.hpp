#pragma once
// Flash attention of the C++ API, forward and backward, and the merge of partial attention
// results, through the context's executor.
// Semantics (masks, alignment, dropout, sinks, packed input) are defined in
// kernels/flash_attention/flash_attention.hpp and described in docs/kernels/flash_attention.md.
//
//   auto [out, lse] = ejk::flash_attention(ctx, q, k, v, {.causal = true});
//   auto g = ejk::flash_attention_bwd(ctx, q, k, v, out, dout, lse, {.causal = true});
#include <cstdint>
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// Keys a query may see around the diagonal: `left` before it and `right` after it; -1 is
// unbounded on that side.
struct AttentionWindow {
  std::int64_t left = -1, right = -1;
};

struct AttentionOptions {
  // Bottom-right aligned: with seq_q < seq_k the last query sees every key.
  bool causal = false;
  AttentionWindow sliding_window{};
  double logits_soft_cap = 0.0;         // cap * tanh(logit / cap) when > 0
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  // Added to the mask diagonal Lk - Lq: a block of a longer sequence whose queries end this many
  // positions after its keys end gets the causal and window masks the whole sequence gives it.
  std::int64_t diagonal_offset = 0;
  double dropout = 0.0;                 // probability of dropping an attention weight
  std::uint64_t dropout_seed = 0;       // same seed, same mask: on every backend and in backward
  // Optional arrays; an undefined Tensor is absent.
  Tensor bias{};            // [batch|1, heads|1, seq_q, seq_k], added to the scaled logits
  Tensor softmax_aux{};     // [heads]: one sink logit per head, no value
  Tensor cu_seqlens_q{};    // i32 [batch + 1]: packed variable-length input (with cu_seqlens_k);
  Tensor cu_seqlens_k{};    //   q is then [total_q, heads, head_dim], k and v [total_k, kv_heads, head_dim]
  Tensor q_segment_ids{};   // i32 [batch, seq_q] ([total_q] packed): attend only where equal
  Tensor kv_segment_ids{};  // i32 [batch, seq_k] ([total_k] packed)
  // Packed input: the longest sequences. When both are 0 the cu_seqlens are read back to the
  // host once, checked and measured; when both are given they are trusted as bounds.
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;
  std::optional<Config> config{};  // override the selector chain
  // Backward: gradients bitwise repeatable, run to run. Off, the fastest passes may sum dq in f32
  // atomically (rounding then varies between runs, as FlashAttention-2's atomic dq).
  bool deterministic = false;
};

struct AttentionOutput {
  Tensor out;  // like q
  Tensor lse;  // f32 [batch, heads, seq_q] ([heads, total_q] packed); -inf for a row that sees nothing
};

struct AttentionGrads {
  Tensor dq, dk, dv;
  Tensor dbias;         // like bias; undefined without a bias
  Tensor dsoftmax_aux;  // like softmax_aux; undefined without sinks
};

EJK_API AttentionOutput flash_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const AttentionOptions& options = {});
// Into given tensors.
EJK_API void flash_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, const AttentionOptions& options = {});

// Gradients from the forward's out and lse; options must be those of the forward call.
EJK_API AttentionGrads flash_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& out, const Tensor& dout, const Tensor& lse,
                                           const AttentionOptions& options = {});
// Into given tensors (dbias / dsoftmax_aux defined exactly when bias / softmax_aux are).
EJK_API void flash_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& out, const Tensor& dout, const Tensor& lse, const AttentionGrads& grads,
                                 const AttentionOptions& options = {});

// Merges a partial attention result (part, part_lse), computed over another set of keys, into
// the accumulator (out, lse) in place by log-sum-exp: out = out * exp(lse - m) + part *
// exp(part_lse - m), lse = m = log(exp(lse) + exp(part_lse)). out and part are [batch, seq, heads,
// head_dim] (or packed [total, heads, head_dim]) of f32, f16 or bf16, their dtypes may differ;
// lse and part_lse f32 [batch, heads, seq] ([heads, total]), as flash_attention returns them.
// Rows whose lse is -inf take part as it is and never read out (which may be uninitialised):
// merging into an f16 out with lse -inf converts. docs/kernels/attention_merge.md.
EJK_API void attention_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& part,
                             const Tensor& part_lse, const std::optional<Config>& config = {});

}  // namespace ejk
