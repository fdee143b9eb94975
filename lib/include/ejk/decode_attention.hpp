#pragma once
// Serving-side decode attention of the C++ API: few query tokens per sequence over a KV cache,
// through the context's executor. Semantics, conventions and shapes: docs/kernels/decode_attention.md
// and the kernels' headers (kernels/page_attention/page_attention.hpp, ...).
//
//   auto out = ejk::page_attention(ctx, query, key_cache, value_cache, context_lens, block_tables);
#include <cstdint>
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct PageAttentionOptions {
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  double logits_soft_cap = 0.0;           // cap * tanh(logit / cap) when > 0
  // Read the index arrays back and check them (block table entries, context lengths) before
  // launching; device kernels clamp what they read instead of reporting it. Costs a small
  // device-to-host copy and a wait.
  bool check_indices = true;
  std::optional<Config> config{};  // override the selector chain
};

// query [batch, heads, head_dim]; key_cache, value_cache [num_blocks, kv_heads, block_size,
// head_dim]; context_lens i32 [batch]; block_tables i32 [batch, max_blocks_per_seq].
// Returns out [batch, heads, head_dim] (query's dtype); a sequence with context 0 gives 0.
EJK_API Tensor page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache,
                              const Tensor& value_cache, const Tensor& context_lens, const Tensor& block_tables,
                              const PageAttentionOptions& options = {});
// Into a given tensor.
EJK_API void page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                            const Tensor& context_lens, const Tensor& block_tables, const Tensor& out,
                            const PageAttentionOptions& options = {});

struct RaggedDecodeAttentionOptions {
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  std::int64_t sliding_window = 0;        // > 0: only the last sliding_window keys of each range
  double logits_soft_cap = 0.0;           // cap * tanh(logit / cap) when > 0
  Tensor softmax_aux{};                   // [heads]: one sink logit per head; undefined: none
  bool check_indices = true;              // as PageAttentionOptions::check_indices
  std::optional<Config> config{};
};

// query [batch, heads, head_dim]; key, value [batch, seq, kv_heads, head_dim]; sequence_start,
// sequence_end i32 [batch]: sequence b attends keys [start, end) of its row, its query sitting
// at end - 1. Returns out like query; an empty range gives 0.
EJK_API Tensor ragged_decode_attention(const Context& ctx, const Tensor& query, const Tensor& key, const Tensor& value,
                                       const Tensor& sequence_start, const Tensor& sequence_end,
                                       const RaggedDecodeAttentionOptions& options = {});
EJK_API void ragged_decode_attention(const Context& ctx, const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& sequence_start, const Tensor& sequence_end, const Tensor& out,
                                     const RaggedDecodeAttentionOptions& options = {});

struct RaggedPageAttentionOptions {
  std::optional<double> softmax_scale{};  // default 1 / sqrt(head_dim)
  std::int64_t sliding_window = 0;        // > 0: a query sees only the sliding_window keys up to its own
  double logits_soft_cap = 0.0;           // cap * tanh(logit / cap) when > 0
  Tensor softmax_aux{};                   // [heads]: one sink logit per head; undefined: none
  // Sequences attended: the first num_seqs entries of kv_lens / block_tables / query_start_loc
  // (-1: all of them). Tokens past query_start_loc[num_seqs] are left as they are in out.
  std::int64_t num_seqs = -1;
  // The longest run of query tokens of a sequence, a hint for the config (0: unknown, taken as
  // the token count); a sequence with more is an error.
  std::int64_t max_q_len = 0;
  bool check_indices = true;  // as PageAttentionOptions::check_indices
  std::optional<Config> config{};
};

// A mixed batch of prefill and decode sequences packed as tokens: queries [tokens, heads,
// head_dim]; key_cache, value_cache [num_blocks, kv_heads, block_size, head_dim]; kv_lens i32
// [max_num_seqs]; block_tables i32 [max_num_seqs, max_blocks_per_seq]; query_start_loc i32
// [max_num_seqs + 1]. Sequence s owns query tokens [query_start_loc[s], query_start_loc[s+1]),
// the last q_len of its kv_lens[s] keys, attended causally. Returns out like queries.
EJK_API Tensor ragged_page_attention(const Context& ctx, const Tensor& queries, const Tensor& key_cache,
                                     const Tensor& value_cache, const Tensor& kv_lens, const Tensor& block_tables,
                                     const Tensor& query_start_loc, const RaggedPageAttentionOptions& options = {});
EJK_API void ragged_page_attention(const Context& ctx, const Tensor& queries, const Tensor& key_cache,
                                   const Tensor& value_cache, const Tensor& kv_lens, const Tensor& block_tables,
                                   const Tensor& query_start_loc, const Tensor& out,
                                   const RaggedPageAttentionOptions& options = {});

}  // namespace ejk
