#pragma once
// Block-sparse attention of the C++ API, through the context's executor. Semantics in
// kernels/block_sparse_attention/block_sparse_attention.hpp and
// docs/kernels/block_sparse_attention.md.
//
//   auto layout = ejk::block_sparse_layout(ctx, batch, heads, seq_q, seq_k,
//                                          {.block_q = 64, .block_k = 64, .causal = true, .local_blocks = 3, .stride = 8});
//   auto [out, lse] = ejk::block_sparse_attention(ctx, q, k, v, layout);
//   auto [dq, dk, dv] = ejk::block_sparse_attention_bwd(ctx, q, k, v, out, dout, lse, layout);
#include <cstdint>
#include <optional>
#include <vector>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

// Which (query block, key block) pairs are computed. Patterns (diag(bi): the key block holding
// the diagonal key of query block bi's last query, bottom-right aligned as flash_attention):
//   local_blocks = N >= 0   key blocks diag - N .. diag
//   stride = s >= 1         key blocks diag, diag - s, diag - 2s, ...
//   causal                  no key block after diag, and the causal mask inside blocks
// Local and strided together take the union; neither means every block (then causal alone
// gives the causal layout). A block mask, where given, is intersected with the patterns:
// i32 on the device (block_mask) or u8 on the host (block_mask_u8 with block_mask_shape), of
// shape [batch or 1, heads or 1, ceil(seq_q / block_q), ceil(seq_k / block_k)], non-zero = live.
struct BlockSparseLayoutOptions {
  std::int64_t block_q = 64, block_k = 64;  // the layout's block size (not tuned)
  bool causal = false;
  std::int64_t local_blocks = -1;  // -1: off
  std::int64_t stride = 0;         // 0: off
  Tensor block_mask{};
  std::vector<std::uint8_t> block_mask_u8{};
  Shape block_mask_shape{};
};

// Built on the host once, stored on the context's device: the live key blocks of every query
// block (counts and indices) and the transpose the backward walks, broadcast like the mask.
struct BlockSparseLayout {
  std::int64_t batch = 0, heads = 0, seq_q = 0, seq_k = 0;
  BlockSparseLayoutOptions pattern{};  // the options it was built from (masks dropped)
  bool mask = false;
  double density = 1.0;  // useful query-key pairs over batch * heads * seq_q * seq_k
  Tensor kv_block_counts, kv_block_indices, q_block_counts, q_block_indices;
};

EJK_API BlockSparseLayout block_sparse_layout(const Context& ctx, std::int64_t batch, std::int64_t heads,
                                              std::int64_t seq_q, std::int64_t seq_k,
                                              const BlockSparseLayoutOptions& options);

struct BlockSparseAttentionOptions {
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  double logits_soft_cap = 0.0;           // 0: off; z = cap * tanh(u / cap)
  Tensor q_segment_ids{}, kv_segment_ids{};  // i32 [batch, seq_q] / [batch, seq_k]: attend where equal
  std::optional<Config> config{};            // override the selector chain
};

struct BlockSparseAttentionResult {
  Tensor out;  // like q
  Tensor lse;  // f32 [batch, heads, seq_q]; -inf for rows with no allowed key (out 0 there)
};

// q [batch, seq_q, heads, head_dim], k, v [batch, seq_k, kv_heads, head_dim] (heads a multiple
// of kv_heads); the layout built for these batch, heads, seq_q, seq_k.
EJK_API void block_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const BlockSparseLayout& layout, const Tensor& out, const Tensor& lse,
                                    const BlockSparseAttentionOptions& options = {});
EJK_API BlockSparseAttentionResult block_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k,
                                                          const Tensor& v, const BlockSparseLayout& layout,
                                                          const BlockSparseAttentionOptions& options = {});

struct BlockSparseGradients {
  Tensor dq, dk, dv;
};

// The gradients of the forward's out with respect to q, k, v, given dout and the forward's out
// and lse (same layout and options).
EJK_API void block_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& out, const Tensor& dout, const Tensor& lse,
                                        const BlockSparseLayout& layout, const BlockSparseGradients& grads,
                                        const BlockSparseAttentionOptions& options = {});
EJK_API BlockSparseGradients block_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k,
                                                        const Tensor& v, const Tensor& out, const Tensor& dout,
                                                        const Tensor& lse, const BlockSparseLayout& layout,
                                                        const BlockSparseAttentionOptions& options = {});

}  // namespace ejk
