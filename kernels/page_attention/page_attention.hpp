#pragma once
// page_attention: one query token per sequence over a paged KV cache (vLLM's PagedAttention),
// run by the split-K decode engine (decode_attention/engine.hpp).
//
// Arguments: query [batch, heads, head_dim]; key_cache, value_cache [num_blocks, kv_heads,
// block_size, head_dim] (query's dtype: f32, f16 or bf16); context_lens i32 [batch];
// block_tables i32 [batch, max_blocks_per_seq] | out [batch, heads, head_dim] (query's dtype).
// Sequence b attends its keys 0 .. context_lens[b]-1; key t lies in page block_tables[b, t /
// block_size] at row t % block_size. kv_heads divides heads (GQA; MQA with 1): query head h
// reads kv head h / (heads / kv_heads). A sequence with context 0 gives out 0.
//
// Options (static, in the key): logits_soft_cap (0: off; z = cap * tanh(u / cap)).
// Scalars: softmax_scale (default 1/sqrt(head_dim)).
#include <map>
#include <span>
#include <string>
#include <vector>

#include "decode_attention/engine.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::page_attention {

namespace arg {
constexpr int query = 0, key_cache = 1, value_cache = 2, context_lens = 3, block_tables = 4, out = 5, count = 6;
}

std::vector<ArgDef> args();

struct Options {
  double logits_soft_cap = 0.0;
  double softmax_scale = 0.0;  // 0: 1/sqrt(head_dim)
};

Invocation invocation(std::span<const TensorSpec> args, const Options& o);

// Validates an invocation (shapes, dtypes, options) into the engine's terms.
decode_attention::Engine engine(const Invocation& inv);

class PageAttentionKernel final : public Kernel {
 public:
  std::string_view name() const override { return "page_attention"; }
  std::string_view host_version() const override { return "page_attention/1"; }
  std::vector<ArgDef> args() const override { return page_attention::args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // 4 batch heads keys head_dim, every sequence taken to fill its block table.
  double flops(const Invocation& inv) const override;
  // query, out, and the keys and values of full block tables read once.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Floats uniform in [-1, 1); every context fills its block table (max_blocks_per_seq *
  // block_size keys: the recipe's context rounded up to whole blocks); block tables shuffled.
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes batch, heads, head_dim, context; optional kv_heads (heads), block_size (16),
  // num_blocks (enough for every sequence). Options logits_soft_cap, softmax_scale.
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override;
  std::map<std::string, std::int64_t> example_sizes() const override;
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 2}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}, {"context", 9}, {"block_size", 4}}; }
};

}  // namespace ejk::kernels::page_attention
