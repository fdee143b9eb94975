#pragma once
// mla_decode: multi-head latent attention (DeepSeek-V2/V3) for decoding, over a paged latent
// cache, in the absorbed form FlashMLA computes. The semantics every backend implements.
//
// Arguments (all floating arguments share one dtype: f32, f16 or bf16; f32 accumulation):
//   q_nope        [batch, heads, qk_nope_head_dim]     the query's part without rotary embedding
//   q_pe          [batch, heads, rope_dim]             the query's rotary part (already rotated)
//   kv_cache      [num_blocks, block_size, kv_lora_rank + rope_dim]
//                                                      pages of the latent cache: each token's c_kv
//                                                      (kv_lora_rank) followed by its k_pe (rope_dim)
//   block_tables  i32 [batch, max_blocks]              page of sequence b's tokens j*block_size ..
//   context_lens  i32 [batch]                          tokens of sequence b in the cache (0 allowed)
//   w_kc          [heads, qk_nope_head_dim, kv_lora_rank]   key up-projection, absorbed into q
//   w_vc          [heads, kv_lora_rank, v_head_dim]         value up-projection, applied to the output
//   out           [batch, heads, v_head_dim]
//
// Computation, per sequence b (context n = context_lens[b]) and head h:
//   q_lat   = q_nope[b, h] . w_kc[h]                                     (kv_lora_rank)
//   s_j     = softmax_scale * (q_lat . c_kv_j + q_pe[b, h] . k_pe_j)     j < n
//   o_lat   = sum_j softmax(s)_j c_kv_j                                  (kv_lora_rank)
//   out     = o_lat . w_vc[h]                                            (v_head_dim)
// where token j of sequence b is row j % block_size of page block_tables[b, j / block_size].
// Every head reads the one latent "key/value head" (MQA in latent space). A sequence with
// context 0 gives out 0. Entries of block_tables past the context are never read.
//
// Options: none. Scalar (not in the key): softmax_scale, default 1/sqrt(qk_nope_head_dim +
// rope_dim) (the un-absorbed model's query/key width).
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::mla_attention {

// Argument positions.
namespace arg {
constexpr std::size_t q_nope = 0, q_pe = 1, kv_cache = 2, block_tables = 3, context_lens = 4, w_kc = 5, w_vc = 6,
                      out = 7, count = 8;
}

std::vector<ArgDef> decode_args();

struct Problem {
  std::int64_t batch = 0, heads = 0;
  std::int64_t nope_dim = 0;   // qk_nope_head_dim
  std::int64_t rope_dim = 0;
  std::int64_t rank = 0;       // kv_lora_rank
  std::int64_t v_dim = 0;      // v_head_dim
  std::int64_t num_blocks = 0, block_size = 0, max_blocks = 0;
  DType dtype = DType::f32;
  double scale = 0.0;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument

  std::int64_t width() const { return rank + rope_dim; }  // a cache row: c_kv | k_pe
  std::int64_t capacity() const { return max_blocks * block_size; }  // tokens a table row covers
};

Invocation decode_invocation(std::span<const TensorSpec> args, double softmax_scale = 0.0);

// Throws InvalidArgument naming the entry when a context length is negative or beyond what the
// table row covers, or when a table entry that the context reaches is not a page index.
void check_tables(const Problem& p, std::span<const std::int64_t> block_tables, std::span<const std::int64_t> context_lens);

// Recipes: sizes batch, heads, context (required), and qk_nope_head_dim (128), rope_dim (64),
// v_head_dim (128), kv_lora_rank (512), block_size (64); the table covers `context` tokens per
// sequence and the cache holds batch * ceil(context / block_size) pages.
std::vector<std::string> recipe_sizes();

class MlaDecodeKernel final : public Kernel {
 public:
  std::string_view name() const override { return "mla_decode"; }
  std::string_view host_version() const override { return "mla_decode/1"; }
  std::vector<ArgDef> args() const override { return decode_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // Counted at full table coverage (every sequence at max_blocks * block_size tokens).
  double flops(const Invocation& inv) const override;
  // The latent cache read once at full coverage, the weights once, q and out.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 8 (sequence, head) pairs spread over both: their out rows, from the pair's q_nope and q_pe
  // rows, the head's w_kc and w_vc, and the sequence's context (a page at a time).
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Floats uniform in [-1, 1); every sequence at full coverage; block tables a shuffled
  // assignment of pages (distinct while the cache has enough of them).
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 32}, {"heads", 16}, {"context", 4096}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 2}, {"heads", 2}, {"context", 9}, {"qk_nope_head_dim", 16}, {"rope_dim", 8}, {"v_head_dim", 16}, {"kv_lora_rank", 16}, {"block_size", 4}}; }
};

// The split of one sequence's context among `splits` parts that every backend uses: parts of
// equal length rounded up to `granule` tokens (the tile), so part s covers
// [s * chunk, min((s + 1) * chunk, n)).
inline std::int64_t split_chunk(std::int64_t n, std::int64_t splits, std::int64_t granule) {
  const std::int64_t per = (n + splits - 1) / splits;
  return (per + granule - 1) / granule * granule;
}

}  // namespace ejk::kernels::mla_attention
