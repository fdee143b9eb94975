#pragma once
// Multi-head latent attention (DeepSeek-V2/V3) of the C++ API, through the context's executor.
// Semantics in kernels/mla_attention/mla_attention.hpp and docs/kernels/mla_attention.md.
//
// Decode, over a paged latent cache in the absorbed form (what FlashMLA computes):
//   Tensor out = ejk::mla_decode(ctx, q_nope, q_pe, kv_cache, block_tables, context_lens, w_kc, w_vc);
// Prefill, the latent expanded to per-head keys and values and attended by flash_attention:
//   auto w = ejk::mla_prefill_weights(ctx, w_kc, w_vc, 64);      // once per layer
//   Tensor out = ejk::mla_prefill(ctx, q_nope, q_pe, c_kv, k_pe, w, {.cu_seqlens = cu});
#include <cstdint>
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct MlaDecodeOptions {
  std::optional<double> softmax_scale{};  // default 1 / sqrt(qk_nope_head_dim + rope_dim)
  // Read block_tables and context_lens back to the host and check them (pages in range,
  // contexts within the table) before launching: device kernels cannot report bad indices.
  // Turn off only for tables known to be valid (a serving loop, a benchmark).
  bool check_tables = true;
  std::optional<Config> config{};  // override the selector chain
};

// q_nope [batch, heads, qk_nope_head_dim], q_pe [batch, heads, rope_dim],
// kv_cache [num_blocks, block_size, kv_lora_rank + rope_dim] (each row c_kv | k_pe),
// block_tables i32 [batch, max_blocks], context_lens i32 [batch],
// w_kc [heads, qk_nope_head_dim, kv_lora_rank], w_vc [heads, kv_lora_rank, v_head_dim]
// -> out [batch, heads, v_head_dim]. A sequence of context 0 gives 0.
EJK_API void mla_decode(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& kv_cache,
                        const Tensor& block_tables, const Tensor& context_lens, const Tensor& w_kc, const Tensor& w_vc,
                        const Tensor& out, const MlaDecodeOptions& options = {});
EJK_API Tensor mla_decode(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& kv_cache,
                          const Tensor& block_tables, const Tensor& context_lens, const Tensor& w_kc,
                          const Tensor& w_vc, const MlaDecodeOptions& options = {});

// The up-projections rearranged for prefill (built once per layer on the host from w_kc,
// w_vc and rope_dim, stored in their dtype on ctx's device), so that expanding the latent and assembling the
// per-head query, key and value rows are plain matmuls:
//   k = c_kv . k_from_ckv + k_pe . k_from_kpe     [tokens, heads * qk_head_dim]
//   v = c_kv . v_from_ckv                          [tokens, heads * qk_head_dim] (zero beyond v_head_dim)
//   q = q_nope . q_from_nope + q_pe . q_from_pe    [tokens * heads, qk_head_dim]
//   out = o . out_from_o                           [tokens * heads, v_head_dim]
// with qk_head_dim = qk_nope_head_dim + rope_dim (flash_attention takes one head_dim for q, k, v).
struct MlaPrefillWeights {
  std::int64_t heads = 0, nope_dim = 0, rope_dim = 0, rank = 0, v_dim = 0;
  Tensor k_from_ckv;   // [kv_lora_rank, heads * qk_head_dim]
  Tensor k_from_kpe;   // [rope_dim, heads * qk_head_dim]
  Tensor v_from_ckv;   // [kv_lora_rank, heads * qk_head_dim]
  Tensor q_from_nope;  // [qk_nope_head_dim, qk_head_dim]
  Tensor q_from_pe;    // [rope_dim, qk_head_dim]
  Tensor out_from_o;   // [qk_head_dim, v_head_dim]
};
EJK_API MlaPrefillWeights mla_prefill_weights(const Context& ctx, const Tensor& w_kc, const Tensor& w_vc,
                                              std::int64_t rope_dim);

struct MlaPrefillOptions {
  bool causal = true;                     // bottom-right aligned, as flash_attention
  std::optional<double> softmax_scale{};  // default 1 / sqrt(qk_nope_head_dim + rope_dim)
  // i32 [batch + 1]: packed sequences (0, prefix sums, tokens); the same offsets for queries
  // and keys. Undefined: all tokens are one sequence.
  Tensor cu_seqlens{};
  std::int64_t max_seqlen = 0;  // with cu_seqlens: the longest sequence; 0 reads cu_seqlens back
};

// q_nope [tokens, heads, qk_nope_head_dim], q_pe [tokens, heads, rope_dim], c_kv [tokens,
// kv_lora_rank], k_pe [tokens, rope_dim] -> out [tokens, heads, v_head_dim]. Every tensor of
// one dtype; runs matmul and flash_attention through ctx's executor (each tuned on its own).
EJK_API Tensor mla_prefill(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& c_kv,
                           const Tensor& k_pe, const MlaPrefillWeights& weights, const MlaPrefillOptions& options = {});

}  // namespace ejk
