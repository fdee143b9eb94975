// ejk::block_sparse_layout (host), ejk::block_sparse_attention and its backward (the kernels,
// through the executor).
#include <cmath>
#include <string>
#include <vector>

#include "block_sparse_attention/block_sparse_attention.hpp"
#include "ejk/block_sparse_attention.hpp"
#include "ejk/error.hpp"

namespace ejk {
namespace {

namespace bsa = kernels::block_sparse_attention;

std::vector<double> doubles(const std::vector<std::int32_t>& v) { return {v.begin(), v.end()}; }

std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + to_string(t.shape()) + " " + std::string(to_string(t.dtype()));
}

bsa::Options kernel_options(const BlockSparseLayout& l, const BlockSparseAttentionOptions& o, const char* fn) {
  bsa::Options k;
  k.block_q = l.pattern.block_q;
  k.block_k = l.pattern.block_k;
  k.causal = l.pattern.causal;
  k.local_blocks = l.pattern.local_blocks;
  k.stride = l.pattern.stride;
  k.mask = l.mask;
  k.density = l.density;
  k.logits_soft_cap = o.logits_soft_cap;
  if (o.softmax_scale) {
    if (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0)
      throw InvalidArgument(std::string(fn) + ": softmax_scale " + std::to_string(*o.softmax_scale) +
                            " must be finite and non-zero");
    k.softmax_scale = *o.softmax_scale;
  }
  return k;
}

void check_layout(const BlockSparseLayout& l, const Tensor& q, const Tensor& k, const char* fn) {
  if (!l.kv_block_counts.defined()) throw InvalidArgument(std::string(fn) + ": the layout was not built (use block_sparse_layout)");
  if (q.rank() != 4 || k.rank() != 4 || q.dim(0) != l.batch || q.dim(1) != l.seq_q || q.dim(2) != l.heads ||
      k.dim(1) != l.seq_k)
    throw InvalidArgument(std::string(fn) + ": the layout was built for batch " + std::to_string(l.batch) + ", heads " +
                          std::to_string(l.heads) + ", seq_q " + std::to_string(l.seq_q) + ", seq_k " +
                          std::to_string(l.seq_k) + ", but " + describe("q", q) + " and " + describe("k", k));
}

}  // namespace

BlockSparseLayout block_sparse_layout(const Context& ctx, std::int64_t batch, std::int64_t heads, std::int64_t seq_q,
                                      std::int64_t seq_k, const BlockSparseLayoutOptions& o) {
  const bsa::Pattern pt{o.block_q, o.block_k, o.causal, o.local_blocks, o.stride};
  const bool device_mask = o.block_mask.defined(), host_mask = !o.block_mask_u8.empty() || !o.block_mask_shape.empty();
  if (device_mask && host_mask)
    throw InvalidArgument("block_sparse_layout: give block_mask (i32) or block_mask_u8 with block_mask_shape, not both");
  bsa::Layout l;
  if (device_mask) {
    if (o.block_mask.dtype() != DType::i32)
      throw InvalidArgument("block_sparse_layout: " + describe("block_mask", o.block_mask) + " must be i32 (or pass u8 "
                            "values on the host as block_mask_u8)");
    const auto values = o.block_mask.read();
    const std::vector<std::int64_t> m(values.begin(), values.end());
    l = bsa::build_layout(batch, heads, seq_q, seq_k, pt, &o.block_mask.shape(), m);
  } else if (host_mask) {
    const std::vector<std::int64_t> m(o.block_mask_u8.begin(), o.block_mask_u8.end());
    l = bsa::build_layout(batch, heads, seq_q, seq_k, pt, &o.block_mask_shape, m);
  } else {
    l = bsa::build_layout(batch, heads, seq_q, seq_k, pt);
  }
  BlockSparseLayout r;
  r.batch = batch;
  r.heads = heads;
  r.seq_q = seq_q;
  r.seq_k = seq_k;
  r.pattern = o;
  r.pattern.block_mask = Tensor{};
  r.pattern.block_mask_u8.clear();
  r.pattern.block_mask_shape.clear();
  r.mask = device_mask || host_mask;
  const double all = static_cast<double>(batch * heads) * static_cast<double>(seq_q) * static_cast<double>(seq_k);
  r.density = all > 0 ? l.pairs / all : 1.0;
  r.kv_block_counts = ctx.from({l.lb, l.lh, l.nbq}, DType::i32, doubles(l.kv_counts));
  r.kv_block_indices = ctx.from({l.lb, l.lh, l.nbq, l.nbk}, DType::i32, doubles(l.kv_indices));
  r.q_block_counts = ctx.from({l.lb, l.lh, l.nbk}, DType::i32, doubles(l.q_counts));
  r.q_block_indices = ctx.from({l.lb, l.lh, l.nbk, l.nbq}, DType::i32, doubles(l.q_indices));
  return r;
}

void block_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                            const BlockSparseLayout& layout, const Tensor& out, const Tensor& lse,
                            const BlockSparseAttentionOptions& o) {
  const char* fn = "block_sparse_attention";
  check_layout(layout, q, k, fn);
  const Tensor none = ctx.empty({0}, DType::f32);
  const Tensor qs = o.q_segment_ids.defined() ? o.q_segment_ids : none;
  const Tensor ks = o.kv_segment_ids.defined() ? o.kv_segment_ids : none;
  const Tensor args[bsa::fwd::count] = {q, k, v, layout.kv_block_counts, layout.kv_block_indices, qs, ks, out, lse};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  ctx.executor().run(bsa::forward_invocation(specs, kernel_options(layout, o, fn)), args, o.config);
}

BlockSparseAttentionResult block_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const BlockSparseLayout& layout, const BlockSparseAttentionOptions& o) {
  if (q.rank() != 4)
    throw InvalidArgument("block_sparse_attention: " + describe("q", q) + " must be [batch, seq_q, heads, head_dim]");
  BlockSparseAttentionResult r{ctx.empty(q.shape(), q.dtype()), ctx.empty({q.dim(0), q.dim(2), q.dim(1)}, DType::f32)};
  block_sparse_attention(ctx, q, k, v, layout, r.out, r.lse, o);
  return r;
}

void block_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& dout, const Tensor& lse, const BlockSparseLayout& layout,
                                const BlockSparseGradients& g, const BlockSparseAttentionOptions& o) {
  const char* fn = "block_sparse_attention_bwd";
  check_layout(layout, q, k, fn);
  const Tensor none = ctx.empty({0}, DType::f32);
  const Tensor qs = o.q_segment_ids.defined() ? o.q_segment_ids : none;
  const Tensor ks = o.kv_segment_ids.defined() ? o.kv_segment_ids : none;
  const Tensor args[bsa::bwd::count] = {q,  k,   v, out, dout, lse, layout.kv_block_counts, layout.kv_block_indices,
                                        layout.q_block_counts, layout.q_block_indices, qs, ks, g.dq, g.dk, g.dv};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  ctx.executor().run(bsa::backward_invocation(specs, kernel_options(layout, o, fn)), args, o.config);
}

BlockSparseGradients block_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                                const Tensor& out, const Tensor& dout, const Tensor& lse,
                                                const BlockSparseLayout& layout, const BlockSparseAttentionOptions& o) {
  BlockSparseGradients g{ctx.empty(q.shape(), q.dtype()), ctx.empty(k.shape(), k.dtype()), ctx.empty(v.shape(), v.dtype())};
  block_sparse_attention_bwd(ctx, q, k, v, out, dout, lse, layout, g, o);
  return g;
}

}  // namespace ejk
