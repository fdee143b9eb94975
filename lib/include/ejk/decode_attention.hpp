#pragma once
// Serving-side decode attention of the C++ API: few query tokens per sequence over a KV cache,
// through the context's executor. Semantics, conventions and shapes: docs/kernels/decode_attention.md
// and the kernels' headers (kernels/page_attention/page_attention.hpp, ...).
//
//   auto out = ejk::page_attention(ctx, query, key_cache, value_cache, context_lens, block_tables);
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
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
Tensor page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                      const Tensor& context_lens, const Tensor& block_tables, const PageAttentionOptions& options = {});
// Into a given tensor.
void page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                    const Tensor& context_lens, const Tensor& block_tables, const Tensor& out,
                    const PageAttentionOptions& options = {});

}  // namespace ejk
