#pragma once
// ragged_page_attention: a mixed batch of prefill and decode sequences packed as query tokens,
// over a paged KV cache (vLLM / JAX's ragged paged attention), run by the split-K decode engine
// (decode_attention/engine.hpp).
//
// Arguments: queries [tokens, heads, head_dim]; key_cache, value_cache [num_blocks, kv_heads,
// block_size, head_dim] (queries' dtype: f32, f16 or bf16); kv_lens i32 [max_num_seqs];
// block_tables i32 [max_num_seqs, max_blocks_per_seq]; query_start_loc i32 [max_num_seqs + 1];
// softmax_aux [heads] (any float dtype, one sink logit per head) or [0] when absent | out
// [tokens, heads, head_dim] (queries' dtype).
// Sequence s < num_seqs owns query tokens [query_start_loc[s], query_start_loc[s+1]) (q_len of
// them, q_len <= kv_lens[s]) and keys 0 .. kv_lens[s]-1 in its pages (as page_attention). Its
// queries are the last q_len tokens of its context: query i sits at position pos = kv_lens[s] -
// q_len + i and sees keys t <= pos (causal, bottom-right aligned), with a sliding window W > 0
// only t > pos - W. Tokens past query_start_loc[num_seqs] keep out's contents.
//
// Options (static, in the key): sliding_window (0: off), logits_soft_cap (0: off).
// Scalars: softmax_scale (default 1/sqrt(head_dim)), num_seqs (default max_num_seqs),
// max_q_len (a bound on q_len, default tokens; a config hint).
#include <map>
#include <span>
#include <string>
#include <vector>

#include "decode_attention/engine.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::ragged_page_attention {

namespace arg {
constexpr int queries = 0, key_cache = 1, value_cache = 2, kv_lens = 3, block_tables = 4, query_start_loc = 5,
              softmax_aux = 6, out = 7, count = 8;
}

std::vector<ArgDef> args();
TensorSpec absent();

struct Options {
  std::int64_t sliding_window = 0;
  double logits_soft_cap = 0.0;
  double softmax_scale = 0.0;  // 0: 1/sqrt(head_dim)
  std::int64_t num_seqs = -1;  // -1: max_num_seqs
  std::int64_t max_q_len = 0;  // 0: tokens
};

Invocation invocation(std::span<const TensorSpec> args, const Options& o);
decode_attention::Engine engine(const Invocation& inv);

class RaggedPageAttentionKernel final : public Kernel {
 public:
  std::string_view name() const override { return "ragged_page_attention"; }
  std::string_view host_version() const override { return "ragged_page_attention/1"; }
  std::vector<ArgDef> args() const override { return ragged_page_attention::args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // Every query against every key of its table (causality not counted).
  double flops(const Invocation& inv) const override;
  // Keys and values of every sequence's full table once, queries and out, the index arrays.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Tokens split as evenly as possible among the sequences, every context filling its table.
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes num_seqs, q_len (query tokens per sequence), context, heads, head_dim; optional
  // kv_heads (heads), block_size (16). Options sliding_window, logits_soft_cap, softmax_scale,
  // sinks (bool).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override {
    return {"num_seqs", "q_len", "context", "heads", "head_dim", "kv_heads", "block_size"};
  }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"num_seqs", 8}, {"q_len", 16}, {"context", 2048}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"num_seqs", 2}, {"q_len", 2}, {"context", 9}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}, {"block_size", 4}}; }
};

}  // namespace ejk::kernels::ragged_page_attention
