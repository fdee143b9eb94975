#pragma once
// native_sparse_attention (NSA, DeepSeek) and native_sparse_attention_bwd: the semantics every
// backend implements. They follow flash-linear-attention's fla/ops/nsa (naive.py, parallel.py,
// compression.py) with the sliding-window branch off and block_indices given.
//
// Tokens. q [batch, seq, heads, head_dim_k], k [batch, seq, kv_heads, head_dim_k], v [batch,
// seq, kv_heads, head_dim_v]; heads = kv_heads * group and query head h*group + i reads kv head
// h (GQA). The batch * seq tokens are cut into sequences by cu_seqlens i32 [num_seqs + 1]
// (0, non-decreasing prefix sums, batch * seq): sequence n holds the flattened tokens
// cu_seqlens[n] .. cu_seqlens[n+1]-1 and every position below is relative to its start. Not
// packed, cu_seqlens is 0, seq, 2 seq, ... (the API builds it).
//
// Blocks. Position p of a sequence lies in block p / block_size. block_size (an option, in the
// key) is a semantic input: no config changes it.
//
// Per token at position p, kv head h and query head i of its group (hq = h * group + i), with
// s(x) = scale * q[hq] . x (scale default 1/sqrt(head_dim_k)):
//   compression  k_cmp[c], v_cmp[c] = mean of k, v over the block_size tokens of block c.
//                Block c is visible when it lies wholly in the past: (c + 1) * block_size - 1
//                <= p, i.e. c < (p + 1) / block_size. o_cmp = softmax over visible c of s(k_cmp)
//                times v_cmp, lse_cmp its log-sum-exp; no visible block: o_cmp 0, lse -inf.
//   selection    entries e = block_indices[token, h, 0 .. block_counts[token, h] - 1]; an entry
//                is valid when 0 <= e and e * block_size <= p (negative entries are the padding
//                marker, later blocks are ignored, as FLA). Each valid entry adds the keys
//                e * block_size + j, j < block_size, that are <= p (causal in the own block) to
//                one softmax: o_slc, lse_slc (an entry given twice adds its keys twice, as FLA's
//                forward). No valid entry: o_slc 0, lse -inf (FLA divides 0 by 0 there).
//   output       o = g_cmp[token, hq] * o_cmp + g_slc[token, hq] * o_slc.
// Entries of block_indices past block_counts are never read. An entry at or past the number of
// blocks of its sequence, a block count outside [0, selected], and cu_seqlens that are not
// prefix sums ending at batch * seq are errors (check_indices; the API runs it).
//
// Forward  (native_sparse_attention):     q k v g_cmp g_slc block_indices block_counts
//                                         cu_seqlens | o o_cmp o_slc lse
// Backward (native_sparse_attention_bwd): q k v g_cmp g_slc block_indices block_counts
//                                         cu_seqlens o_cmp o_slc lse do | dq dk dv dg_cmp dg_slc
//   g_cmp, g_slc [batch, seq, heads]; block_indices i32 [batch, seq, kv_heads, selected];
//   block_counts i32 [batch, seq, kv_heads]; o, o_cmp, o_slc, do [batch, seq, heads,
//   head_dim_v]; lse f32 [batch, seq, heads, 2] (compression, selection). Floating arrays other
//   than lse share one dtype (f32, f16, bf16); accumulation is f32.
// Backward: exact gradients of o for the same selection, through the mean pooling (a key of a
// visible block gets 1/block_size of its block's compressed gradient):
//   dg_cmp = do . o_cmp, dg_slc = do . o_slc; per branch with do_b = g_b * do, D = do_b . o_b,
//   P the branch's probabilities: dv_j += P_j do_b, dS_j = P_j (do_b . v_j - D), dq += scale dS_j
//   k_j, dk_j += scale dS_j q.
#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::native_sparse_attention {

namespace fwd {
constexpr std::size_t q = 0, k = 1, v = 2, g_cmp = 3, g_slc = 4, block_indices = 5, block_counts = 6, cu_seqlens = 7,
                      o = 8, o_cmp = 9, o_slc = 10, lse = 11, count = 12;
}
namespace bwd {
constexpr std::size_t q = 0, k = 1, v = 2, g_cmp = 3, g_slc = 4, block_indices = 5, block_counts = 6, cu_seqlens = 7,
                      o_cmp = 8, o_slc = 9, lse = 10, dout = 11, dq = 12, dk = 13, dv = 14, dg_cmp = 15, dg_slc = 16,
                      count = 17;
}

std::vector<ArgDef> forward_args();
std::vector<ArgDef> backward_args();

struct Problem {
  bool backward = false;
  std::int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, group = 0;
  std::int64_t dk = 0, dv = 0;        // head_dim_k, head_dim_v
  std::int64_t selected = 0;          // block_indices' last dimension
  std::int64_t num_seqs = 0;          // cu_seqlens has num_seqs + 1 entries
  std::int64_t block_size = 0;
  DType dtype = DType::f32;
  double scale = 0.0;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument
  std::int64_t tokens() const { return batch * seq; }
};

Invocation forward_invocation(std::span<const TensorSpec> args, std::int64_t block_size, double scale = 0.0);
Invocation backward_invocation(std::span<const TensorSpec> args, std::int64_t block_size, double scale = 0.0);

// Throws InvalidArgument naming the entry when cu_seqlens are not prefix sums from 0 to the
// token count, a block count is outside [0, selected], or an entry within the count is at or
// past the number of blocks of its sequence.
void check_indices(const Problem& p, std::span<const std::int64_t> block_indices,
                   std::span<const std::int64_t> block_counts, std::span<const std::int64_t> cu_seqlens);
// Its parts: cu_seqlens alone; one (token t, kv head h)'s block count and its first `count`
// entries, in a sequence of `len` tokens.
void check_cu_seqlens(const Problem& p, std::span<const std::int64_t> cu_seqlens);
void check_selection(const Problem& p, std::int64_t t, std::int64_t h, std::int64_t count,
                     std::span<const std::int64_t> entries, std::int64_t len);

// Recipes: sizes batch, seq, heads (required), kv_heads (1), head_dim (64), head_dim_v
// (head_dim), selected (16); options block_size (64), sequences (1: packed sequences of
// nearly equal length when more), scale.
std::vector<std::string> recipe_sizes();

class NsaKernel final : public Kernel {
 public:
  std::string_view name() const override { return "native_sparse_attention"; }
  std::string_view host_version() const override { return "native_sparse_attention/1"; }
  std::vector<ArgDef> args() const override { return forward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // Counted for every token at full selection (selected whole blocks) and seq / block_size / 2
  // compressed keys on average.
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 4 (sequence, kv head) pairs, 8 query rows each (over the pair's tokens and query heads): o,
  // o_cmp, o_slc rows and lse, from each row of q, the gates and the selection, and the pair's
  // keys and values (a stretch of tokens at a time).
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Floats uniform in [-1, 1); block_indices a random draw of distinct blocks per token, -1
  // markers and later blocks among them; counts random in [1, selected].
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 1}, {"seq", 4096}, {"heads", 16}, {"kv_heads", 1}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 1}, {"seq", 9}, {"heads", 4}, {"kv_heads", 1}, {"head_dim", 16}, {"selected", 2}}; }
  nlohmann::json smallest_options() const override { return {{"block_size", 4}}; }
};

class NsaBwdKernel final : public Kernel {
 public:
  std::string_view name() const override { return "native_sparse_attention_bwd"; }
  std::string_view host_version() const override { return "native_sparse_attention_bwd/1"; }
  std::vector<ArgDef> args() const override { return backward_args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 2 (sequence, kv head) pairs, each's backward computed whole (a key's gradient sums over
  // every later query of its sequence) from its rows of q, k, v, the gates, the selection and
  // dout: 8 key rows of dk and dv, 8 query rows of dq, dg_cmp and dg_slc.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // As the forward's; o_cmp, o_slc and lse from derive().
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // o_cmp, o_slc and lse: the forward on the same device, so they agree with q, k, v.
  void derive(const Invocation& inv, std::span<const Tensor> args) const override;
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override { return NsaKernel().example_sizes(); }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 1}, {"seq", 9}, {"heads", 4}, {"kv_heads", 1}, {"head_dim", 16}, {"selected", 2}}; }
  nlohmann::json smallest_options() const override { return {{"block_size", 4}}; }
};

// The backward's inverse of the selection on the GPU backends: per (block, kv head) a bitmap of the
// queries listing it, `per_block` 32-bit words (a query's bit: its offset from the block's first
// token), for every slot a block can take (a block starting at token j of sequence s: j /
// block_size + s). The memory grows with tokens^2 / block_size, and the bitmap replaces a scan
// of every later query's index list for every tile of keys, which grew with tokens^2 * selected.
struct SelectionBitmap {
  std::int64_t per_block = 0, words = 0;
};
inline SelectionBitmap selection_bitmap(const Problem& p) {
  const std::int64_t per_block = (p.tokens() + 31) / 32, slots = p.tokens() / p.block_size + p.num_seqs;
  return {per_block, std::max<std::int64_t>(1, slots * p.kv_heads * per_block)};
}

// Where a flattened token lies: its sequence's first token and its position in it.
struct Place {
  std::int64_t bos = 0, eos = 0, pos = 0;
};
std::vector<Place> places(const Problem& p, std::span<const std::int64_t> cu_seqlens);

}  // namespace ejk::kernels::native_sparse_attention
