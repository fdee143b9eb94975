#pragma once
// block_sparse_attention and block_sparse_attention_bwd: attention restricted to a layout of
// (query block, key block) pairs. The semantics every backend implements.
//
// Layout. q [batch, seq_q, heads, head_dim]; k, v [batch, seq_k, kv_heads, head_dim]; kv_heads
// divides heads and query head h reads kv head h / (heads / kv_heads) (GQA), as flash_attention.
// The sequences are cut into blocks of block_q queries and block_k keys (options; the last
// block of each may be short): nbq = ceil(seq_q / block_q), nbk = ceil(seq_k / block_k).
//
// The block layout reaches the kernels as lists of live blocks (built on the host by
// build_layout below, from a block mask and/or patterns), broadcast over batch and heads where
// their first two dimensions are 1 (lb in {1, batch}, lh in {1, heads}):
//   kv_block_counts   i32 [lb, lh, nbq]        live key blocks of query block bi
//   kv_block_indices  i32 [lb, lh, nbq, nbk]   their indices, the first count entries of a row
//   q_block_counts    i32 [lb, lh, nbk]        (backward) the same layout transposed: live query
//   q_block_indices   i32 [lb, lh, nbk, nbq]   blocks of key block bj
// Every kernel loops over these lists only: a block absent from them is never loaded.
//
// Arguments (q, k, v, out, dout, dq, dk, dv share one float dtype; f32 accumulation):
//   Forward  (block_sparse_attention):     q k v kv_block_counts kv_block_indices q_segment_ids
//                                          kv_segment_ids | out (like q) lse (f32 [batch, heads, seq_q])
//   Backward (block_sparse_attention_bwd): q k v out dout lse kv_block_counts kv_block_indices
//                                          q_block_counts q_block_indices q_segment_ids
//                                          kv_segment_ids | dq dk dv
//   q_segment_ids i32 [batch, seq_q], kv_segment_ids i32 [batch, seq_k], or both absent ([0]).
//
// Options (static, in the key): block_q, block_k (the layout's block size, > 0), causal,
// logits_soft_cap (0: off), and what the layout was built from, for workloads and keys:
// local_blocks (-1: none), stride (0: none), mask (a block mask took part). Scalars (not in the
// key): softmax_scale (default 1/sqrt(head_dim)); density (the fraction of the seq_q x seq_k
// pairs the layout computes, for flops(); default 1).
//
// Computation, per batch b, head h, query i (block bi = i / block_q), key j (bj = j / block_k),
// with d = seq_k - seq_q (the causal diagonal bottom-right aligned, as flash_attention):
//   live(i, j)    bj is in the list of (b, h, bi)
//   allowed(i, j) live(i, j) and (not causal or j <= i + d) and segment ids equal (when given)
//   u = softmax_scale * q_i.k_j;  z = logits_soft_cap * tanh(u / logits_soft_cap) when capped
//   lse_i = log(sum_{allowed j} exp(z_ij));  out_i = sum_{allowed j} exp(z_ij - lse_i) v_j
// A row with no allowed key gives out 0 and lse -inf (and zero gradients); never NaN.
// Backward: the exact gradients of out with respect to q, k, v (FlashAttention-2:
// D_i = dout_i.out_i, dz = P (dP - D), through the cap's derivative 1 - tanh^2).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::block_sparse_attention {

// Argument positions.
namespace fwd {
constexpr std::size_t q = 0, k = 1, v = 2, kv_block_counts = 3, kv_block_indices = 4, q_segment_ids = 5,
                      kv_segment_ids = 6, out = 7, lse = 8, count = 9;
}
namespace bwd {
constexpr std::size_t q = 0, k = 1, v = 2, out = 3, dout = 4, lse = 5, kv_block_counts = 6, kv_block_indices = 7,
                      q_block_counts = 8, q_block_indices = 9, q_segment_ids = 10, kv_segment_ids = 11, dq = 12,
                      dk = 13, dv = 14, count = 15;
}

std::vector<ArgDef> forward_args();
std::vector<ArgDef> backward_args();

TensorSpec absent();
inline bool is_absent(const TensorSpec& s) { return s.shape == Shape{0}; }

constexpr std::int64_t max_head_dim = 256;

// How a layout is made: patterns over blocks, optionally intersected with a block mask.
// diag(bi) is the key block holding the diagonal key of bi's last query,
// (min((bi + 1) * block_q, seq_q) - 1 + seq_k - seq_q) / block_k (floor; < 0: none).
//   local_blocks = N >= 0: key blocks diag - N .. diag (the diagonal block and N back)
//   stride = s >= 1:       key blocks bj <= diag with (diag - bj) % s == 0 (every s-th back)
//   causal:                key blocks bj <= diag only (blocks wholly above the diagonal)
// Live = (local or strided, whichever are set; every block when neither) and causal's bound,
// and the mask's entry (non-zero) where a mask is given.
struct Pattern {
  std::int64_t block_q = 0, block_k = 0;
  bool causal = false;
  std::int64_t local_blocks = -1;  // -1: off
  std::int64_t stride = 0;         // 0: off
};

struct Layout {
  std::int64_t lb = 1, lh = 1, nbq = 0, nbk = 0;
  std::vector<std::int32_t> kv_counts, kv_indices, q_counts, q_indices;
  // Query-key pairs inside live blocks (clipped to the sequences, below the diagonal when
  // causal), summed over batch and heads: the useful work.
  double pairs = 0;
};

// Throws InvalidArgument naming the size or the mask (shape, values' count) when they do not
// fit: block sizes must be positive, patterns' numbers in range, mask [batch|1, heads|1, nbq, nbk].
Layout build_layout(std::int64_t batch, std::int64_t heads, std::int64_t seq_q, std::int64_t seq_k, const Pattern& pattern,
                    const Shape* mask_shape = nullptr, std::span<const std::int64_t> mask = {});

struct Options {
  std::int64_t block_q = 0, block_k = 0;
  bool causal = false;
  double logits_soft_cap = 0.0;
  std::int64_t local_blocks = -1, stride = 0;
  bool mask = false;
  double softmax_scale = 0.0;  // 0: 1/sqrt(head_dim)
  double density = 1.0;
};

Invocation forward_invocation(std::span<const TensorSpec> args, const Options& o);
Invocation backward_invocation(std::span<const TensorSpec> args, const Options& o);

struct Problem {
  bool backward = false;
  std::int64_t batch = 0, seq_q = 0, seq_k = 0, heads = 0, kv_heads = 0, head_dim = 0;
  std::int64_t block_q = 0, block_k = 0, nbq = 0, nbk = 0, lb = 1, lh = 1;
  DType dtype = DType::f32;
  bool causal = false, has_segments = false, mask = false;
  std::int64_t local_blocks = -1, stride = 0;
  double softcap = 0.0, scale = 0.0, density = 1.0;

  static Problem of(const Invocation& inv);  // throws InvalidArgument

  std::int64_t group() const { return heads / kv_heads; }
  // Row of the lists for (b, h, block): index into counts (times the row length for indices).
  std::int64_t list_row(std::int64_t b, std::int64_t h, std::int64_t blocks, std::int64_t block) const {
    return ((lb == 1 ? 0 : b) * lh + (lh == 1 ? 0 : h)) * blocks + block;
  }
  Pattern pattern() const { return {block_q, block_k, causal, local_blocks, stride}; }
};

// Throws InvalidArgument naming the entry when a count or an index of the lists is out of
// range (device kernels cannot report bad indices); the CPU implementation checks every run.
void check_lists(const Problem& p, std::span<const std::int64_t> counts, std::span<const std::int64_t> indices,
                 bool transposed);

// Recipes: sizes seq (or seq_q and seq_k), heads, head_dim, and optionally batch (1), kv_heads
// (heads); options block_q and block_k (64), causal, local_blocks, stride, mask (a fixed random
// block mask per batch and head, half the blocks live), logits_soft_cap, softmax_scale, segments.
std::vector<std::string> recipe_sizes();
Invocation recipe_invocation(bool backward, const std::map<std::string, std::int64_t>& sizes, DType dtype,
                             const nlohmann::json& options);
// The layout a workload of these options uses (the random mask included): what inputs() passes.
// Its block lists are built on the host, so a layout of more than max_layout_blocks block pairs
// (lb x lh x nbq x nbk: 2^24, a 262144-token square at 64-token blocks) is refused naming them.
inline constexpr std::int64_t max_layout_blocks = std::int64_t{1} << 24;
Layout workload_layout(const Problem& p);

class BlockSparseAttentionKernel final : public Kernel {
 public:
  std::string_view name() const override { return "block_sparse_attention"; }
  std::string_view host_version() const override { return "block_sparse_attention/1"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // 4 * head_dim per useful pair: batch * heads * seq_q * seq_k * density.
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 4 (sequence, kv head) pairs, 8 query rows each (over the pair's query heads and positions):
  // out rows and lse, from each row of q, the pair's keys and values (a stretch of tokens at a
  // time), the sequence's segment ids and the row's block list.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 1}, {"seq", 4096}, {"heads", 16}, {"head_dim", 64}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 19}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}}; }
};

class BlockSparseAttentionBwdKernel final : public Kernel {
 public:
  std::string_view name() const override { return "block_sparse_attention_bwd"; }
  std::string_view host_version() const override { return "block_sparse_attention_bwd/1"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;  // 2.5 times the forward's
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 2 (sequence, kv head) pairs: 8 key rows of dk and dv and 8 query rows of dq (over the
  // pair's query heads and positions), from the pair's q, dout, keys and values (a stretch of
  // tokens at a time), segment ids and block lists; every query row's logit gradient is
  // computed exactly from those, on every core, never taken from the saved out and lse.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // out and lse: the forward on the same device, so they agree with q, k, v.
  void derive(const Invocation& inv, std::span<const Tensor> args) const override;
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 1}, {"seq", 4096}, {"heads", 16}, {"head_dim", 64}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 19}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}}; }
};

}  // namespace ejk::kernels::block_sparse_attention
