#pragma once
// flash_attention and flash_attention_bwd: the semantics every backend implements.
//
// Layout. q [batch, seq_q, heads, head_dim]; k, v [batch, seq_k, kv_heads, head_dim]; kv_heads
// divides heads and query head h reads kv head h / (heads / kv_heads) (GQA, MQA when 1).
// Packed variable-length input (both cu_seqlens given): q [total_q, heads, head_dim], k, v
// [total_k, kv_heads, head_dim], cu_seqlens_q/k i32 [batch + 1] (0, prefix sums, total);
// sequence b holds tokens cu_seqlens[b] .. cu_seqlens[b+1]-1 and is attended on its own.
//
// Arguments. Every kernel takes a fixed argument list; an optional array that is absent is
// passed as a zero-element tensor of shape [0] (absent() below), so which arrays are present
// shows in the invocation's signature (and key). Present arrays:
//   bias            [batch|1, heads|1, seq_q, seq_k], any float dtype, added to the scaled logits
//                   (not with packed variable-length input)
//   softmax_aux     [heads], any float dtype: one sink logit per head that joins the softmax
//                   denominator and has no value
//   q_segment_ids   i32, q's token dims ([batch, seq_q] or [total_q]); kv_segment_ids likewise
//                   for k: query i attends key j only where their ids are equal (both or neither)
//   lse             f32 [batch, heads, seq_q], or [heads, total_q] for packed input
// Forward  (flash_attention):     q k v bias softmax_aux cu_seqlens_q cu_seqlens_k q_segment_ids
//                                 kv_segment_ids | out (like q) lse
// Backward (flash_attention_bwd): q k v out dout lse bias softmax_aux cu_seqlens_q cu_seqlens_k
//                                 q_segment_ids kv_segment_ids | dq dk dv dbias dsoftmax_aux
//   dbias has bias's shape and dtype (summed over broadcast dimensions), dsoftmax_aux
//   softmax_aux's; both are absent ([0]) when bias / softmax_aux are.
//
// Options (static, in the key): causal, window_left, window_right, logits_soft_cap (0: off),
// dropout (probability in [0, 1)). Scalars (not in the key): softmax_scale (default
// 1/sqrt(head_dim)), dropout_seed, diagonal_offset (default 0, below), and for packed input
// max_seqlen_q / max_seqlen_k (upper bounds of the sequence lengths; launch sizes for device
// kernels).
//
// Computation, per sequence b (lengths Lq, Lk), query head h, query i, key j:
//   u = softmax_scale * q_i.k_j + bias[b, h, i, j]
//   z = logits_soft_cap * tanh(u / logits_soft_cap)            (when logits_soft_cap > 0)
//   allowed(i, j): lo(i) <= j <= hi(i) and segment ids equal, where with d = Lk - Lq (the
//     diagonal is aligned to the bottom-right, as in FlashAttention-2 from 2.1: the last query
//     sees the last key) lo(i) = i + d - window_left (unbounded when window_left = -1) and
//     hi(i) = i + d + window_right (unbounded when -1); causal sets hi(i) = min(hi(i), i + d).
//     The scalar diagonal_offset (default 0) is added to d: a block of a longer sequence whose
//     queries end diagonal_offset positions after its keys end (ring attention's shards) gets
//     the masks the whole sequence would give it.
//   lse_i = log(sum_{allowed j} exp(z_ij) + exp(softmax_aux[h]))   (the sink term only when given)
//   out_i = sum_{allowed j} exp(z_ij - lse_i) * keep_ij / (1 - p) * v_j
//   keep_ij from philox.h (p = 0: always 1). A row with no allowed key gives out 0 and lse -inf
//   (lse = softmax_aux[h] when a sink is given).
// Backward gives the exact gradients of out with respect to q, k, v, bias, softmax_aux for the
// same mask and dropout draw (FlashAttention-2: D_i = dout_i.out_i, dz = P (dP - D)).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <span>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::flash_attention {

// Argument positions.
namespace fwd {
constexpr std::size_t q = 0, k = 1, v = 2, bias = 3, softmax_aux = 4, cu_seqlens_q = 5, cu_seqlens_k = 6,
                      q_segment_ids = 7, kv_segment_ids = 8, out = 9, lse = 10, count = 11;
}
namespace bwd {
constexpr std::size_t q = 0, k = 1, v = 2, out = 3, dout = 4, lse = 5, bias = 6, softmax_aux = 7, cu_seqlens_q = 8,
                      cu_seqlens_k = 9, q_segment_ids = 10, kv_segment_ids = 11, dq = 12, dk = 13, dv = 14,
                      dbias = 15, dsoftmax_aux = 16, count = 17;
}

std::vector<ArgDef> forward_args();
std::vector<ArgDef> backward_args();

// The placeholder of an absent optional array.
TensorSpec absent();
inline bool is_absent(const TensorSpec& s) { return s.shape == Shape{0}; }

// Largest head_dim any implementation must accept.
constexpr std::int64_t max_head_dim = 256;

struct Options {
  bool causal = false;
  std::int64_t window_left = -1, window_right = -1;  // -1: unbounded on that side
  double logits_soft_cap = 0.0;                      // 0: off
  double dropout = 0.0;                              // probability of dropping
  // Scalars.
  double softmax_scale = 0.0;  // 0: 1/sqrt(head_dim)
  std::uint64_t dropout_seed = 0;
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;  // packed input; 0: unknown (taken as the totals)
  std::int64_t diagonal_offset = 0;  // shifts the mask diagonal (see Computation above)
  bool deterministic = false;        // option: the backward's gradients bitwise repeatable
};

// Invocations from argument specs in the order of fwd:: / bwd::.
Invocation forward_invocation(std::span<const TensorSpec> args, const Options& o);
Invocation backward_invocation(std::span<const TensorSpec> args, const Options& o);

// The dropout threshold of philox.h: kept iff word >= threshold.
std::uint32_t dropout_threshold(double p);

// Everything an implementation needs about one invocation; built by validating it.
struct Problem {
  bool backward = false;
  bool varlen = false;
  std::int64_t batch = 0;         // sequences
  std::int64_t seq_q = 0, seq_k = 0;  // padded: the lengths; packed: max_seqlen_q/k
  std::int64_t total_q = 0, total_k = 0;  // tokens
  std::int64_t heads = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::f32;  // of q, k, v, out (and dout, dq, dk, dv)
  bool has_bias = false;
  std::int64_t bias_batch = 0, bias_heads = 0;  // 1 where broadcast
  DType bias_dtype = DType::f32;
  bool has_sinks = false;
  DType sinks_dtype = DType::f32;
  bool has_segments = false;
  bool causal = false;
  bool deterministic = false;  // the backward's gradients bitwise repeatable (the forward's always are)
  std::int64_t window_left = -1, window_right = -1;  // as given
  std::int64_t diagonal_offset = 0;
  double softcap = 0.0, dropout = 0.0, scale = 0.0;
  std::uint64_t seed = 0;
  std::uint32_t threshold = 0;  // dropout_threshold(dropout)

  static Problem of(const Invocation& inv);  // throws InvalidArgument

  std::int64_t group() const { return heads / kv_heads; }
  // Bounds of the keys query i may see (before segment ids), as signed positions; may lie
  // outside [0, lk) or be empty (lo > hi).
  std::int64_t key_lo(std::int64_t i, std::int64_t lq, std::int64_t lk) const {
    return window_left < 0 ? INT64_MIN / 4 : i + diagonal(lq, lk) - window_left;
  }
  std::int64_t key_hi(std::int64_t i, std::int64_t lq, std::int64_t lk) const {
    std::int64_t hi = window_right < 0 ? INT64_MAX / 4 : i + diagonal(lq, lk) + window_right;
    return causal ? std::min(hi, i + diagonal(lq, lk)) : hi;
  }
  std::int64_t diagonal(std::int64_t lq, std::int64_t lk) const { return lk - lq + diagonal_offset; }
  // Index of lse for sequence b, head h, query i (token t = its packed index).
  std::int64_t lse_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t t) const {
    return varlen ? h * total_q + t : (b * heads + h) * seq_q + i;
  }
  std::int64_t bias_index(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    return (((bias_batch == 1 ? 0 : b) * bias_heads + (bias_heads == 1 ? 0 : h)) * seq_q + i) * seq_k + j;
  }
};

// Per-sequence token ranges. Packed input: from the cu_seqlens values, which are checked here
// (start at 0, never decrease, end at the token count, within max_seqlen); padded: uniform.
struct Sequences {
  std::vector<std::int64_t> q_start, q_len, k_start, k_len;
};
Sequences sequences(const Problem& p, std::span<const std::int64_t> cu_q, std::span<const std::int64_t> cu_k);

// Recipes: sizes seq (or seq_q and seq_k), heads, head_dim, and optionally batch (1), kv_heads
// (heads), seq_q, seq_k; options causal, window_left, window_right, logits_soft_cap, dropout,
// softmax_scale, dropout_seed, and the optional arrays to pass: bias ("full", "batch", "heads",
// "shared" for [B, H], [B, 1], [1, H], [1, 1]; true = "full"), sinks (bool), segments (bool).
// Packed variable-length input is not described by sizes.
std::vector<std::string> recipe_sizes();
// One sequence of a mid-sized decoder layer, for tools that show a workload nobody sized.
std::map<std::string, std::int64_t> example_sizes();
Invocation recipe_invocation(bool backward, const std::map<std::string, std::int64_t>& sizes, DType dtype,
                             const nlohmann::json& options);

class FlashAttentionKernel final : public Kernel {
 public:
  std::string_view name() const override { return "flash_attention"; }
  std::string_view host_version() const override { return "flash_attention/1"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  double tolerance(const Invocation& inv) const override;
  // Query rows (out and lse) of 4 (sequence, kv head) pairs, 8 rows each.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // q, k, v uniform in [-1, 1); packed offsets split the tokens evenly; segment ids in runs.
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Recipe sizes and options: see recipe_invocation.
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override { return flash_attention::example_sizes(); }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 9}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}}; }
  nlohmann::json smallest_options() const override { return {{"causal", true}}; }
};

class FlashAttentionBwdKernel final : public Kernel {
 public:
  std::string_view name() const override { return "flash_attention_bwd"; }
  std::string_view host_version() const override { return "flash_attention_bwd/1"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  double tolerance(const Invocation& inv) const override;
  // Of 2 (sequence, kv head) pairs: 8 query rows of dq, 8 key rows of dk and dv, and where
  // dbias is not broadcast, those query rows at those keys. dsoftmax_aux sums over every
  // sequence and is left to the trusted config.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // As the forward's, dout too; out and lse from derive().
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // out and lse: the forward on the same device, so they agree with q, k, v.
  void derive(const Invocation& inv, std::span<const Tensor> args) const override;
  // Recipe sizes and options: see recipe_invocation.
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override { return flash_attention::example_sizes(); }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 9}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}}; }
  nlohmann::json smallest_options() const override { return {{"causal", true}}; }
};

// Gradients are checked with this multiple of the forward tolerance: dz = P (dP - D) cancels
// where dP is close to its row mean, and the saved out/lse enter D and P already rounded.
constexpr double gradient_tolerance_factor = 4.0;

}  // namespace ejk::kernels::flash_attention
