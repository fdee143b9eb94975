#pragma once
// Native sparse attention (NSA, DeepSeek) of the C++ API, through the context's executor:
// a compression branch over mean-pooled key blocks and a selection branch over chosen key
// blocks, mixed by per-head gates. Semantics in kernels/native_sparse_attention/nsa.hpp and
// docs/kernels/native_sparse_attention.md.
//
//   auto f = ejk::native_sparse_attention(ctx, q, k, v, g_cmp, g_slc, block_indices, {.block_size = 64});
//   auto g = ejk::native_sparse_attention_bwd(ctx, q, k, v, g_cmp, g_slc, block_indices, f, dout, {.block_size = 64});
#include <cstdint>
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct NsaOptions {
  std::int64_t block_size = 64;      // the sparse block size: part of the semantics, never tuned
  std::optional<double> scale{};     // default 1 / sqrt(head_dim_k)
  // i32 [batch, seq, kv_heads]: blocks read per (token, kv head); undefined: block_count for all.
  Tensor block_counts{};
  std::int64_t block_count = -1;     // with block_counts undefined; -1: every selected entry
  // i32 [num_seqs + 1] over the batch * seq flattened tokens (0, prefix sums, batch * seq):
  // packed sequences. Undefined: each batch row is one sequence.
  Tensor cu_seqlens{};
  // Read block_indices, block_counts and cu_seqlens back and check them before launching
  // (device kernels cannot report bad indices).
  bool check_indices = true;
  std::optional<Config> config{};    // override the selector chain
};

struct NsaOutput {
  Tensor o;      // [batch, seq, heads, head_dim_v] = g_cmp * o_cmp + g_slc * o_slc
  Tensor o_cmp;  // the compression branch
  Tensor o_slc;  // the selection branch
  Tensor lse;    // f32 [batch, seq, heads, 2]: the branches' log-sum-exp (-inf: no key)
};

struct NsaGrads {
  Tensor dq, dk, dv, dg_cmp, dg_slc;
};

// q [batch, seq, heads, head_dim_k], k [batch, seq, kv_heads, head_dim_k], v [batch, seq,
// kv_heads, head_dim_v], g_cmp and g_slc [batch, seq, heads] (one float dtype), block_indices
// i32 [batch, seq, kv_heads, selected].
EJK_API NsaOutput native_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& g_cmp, const Tensor& g_slc, const Tensor& block_indices,
                                          const NsaOptions& options = {});
// The gradients of o given dout [batch, seq, heads, head_dim_v] and the forward's outputs.
EJK_API NsaGrads native_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& g_cmp, const Tensor& g_slc, const Tensor& block_indices,
                                             const NsaOutput& forward, const Tensor& dout,
                                             const NsaOptions& options = {});

}  // namespace ejk
