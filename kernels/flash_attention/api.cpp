// ejk::flash_attention and ejk::flash_attention_bwd: options to invocations, through the executor.
#include <cmath>

#include "common/sequences.hpp"
#include "ejk/attention.hpp"
#include "ejk/error.hpp"
#include "flash_attention/flash_attention.hpp"

namespace ejk {
namespace {

namespace fa = kernels::flash_attention;

// An absent optional array: a zero-element placeholder, so every argument binds to a buffer.
Tensor placeholder(const Context& ctx) { return ctx.empty(Shape{0}, DType::f32); }
Tensor or_placeholder(const Context& ctx, const Tensor& t) { return t.defined() ? t : placeholder(ctx); }

std::int64_t longest(const std::vector<double>& cu) {
  double m = 0;
  for (std::size_t i = 1; i < cu.size(); ++i) m = std::max(m, cu[i] - cu[i - 1]);
  return static_cast<std::int64_t>(m);
}

fa::Options options_of(const Tensor& q, const Tensor& k, const AttentionOptions& o) {
  fa::Options f;
  f.causal = o.causal;
  f.window_left = o.sliding_window.left;
  f.window_right = o.sliding_window.right;
  f.logits_soft_cap = o.logits_soft_cap;
  f.dropout = o.dropout;
  f.dropout_seed = o.dropout_seed;
  f.deterministic = o.deterministic;
  f.diagonal_offset = o.diagonal_offset;
  if (o.softmax_scale) {
    if (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0)
      throw InvalidArgument("flash_attention: softmax_scale " + std::to_string(*o.softmax_scale) +
                            " must be finite and non-zero");
    f.softmax_scale = *o.softmax_scale;
  }
  const bool packed = o.cu_seqlens_q.defined() || o.cu_seqlens_k.defined();
  if (packed && (o.max_seqlen_q <= 0 || o.max_seqlen_k <= 0) && o.cu_seqlens_q.defined() && o.cu_seqlens_k.defined()) {
    // Checked here because device kernels cannot report bad offsets; the CPU checks again.
    for (const Tensor* t : {&o.cu_seqlens_q, &o.cu_seqlens_k})
      if (t->rank() != 1 || t->dtype() != DType::i32 || t->dim(0) < 2)
        throw InvalidArgument(std::string("flash_attention: ") + (t == &o.cu_seqlens_q ? "cu_seqlens_q " : "cu_seqlens_k ") +
                              to_string(t->shape()) + " " + std::string(to_string(t->dtype())) +
                              " must be i32 [batch + 1] with batch >= 1");
    auto cq = o.cu_seqlens_q.read(), ck = o.cu_seqlens_k.read();
    std::vector<std::int64_t> iq(cq.begin(), cq.end()), ik(ck.begin(), ck.end());
    // Other layouts are refused with their shapes by the kernel's validation.
    if (q.rank() == 3 && k.rank() == 3) {
      kernels::check_cu_seqlens(iq, "cu_seqlens_q", q.dim(0));
      kernels::check_cu_seqlens(ik, "cu_seqlens_k", k.dim(0));
    }
    f.max_seqlen_q = longest(cq);
    f.max_seqlen_k = longest(ck);
  } else if (packed) {
    f.max_seqlen_q = o.max_seqlen_q;
    f.max_seqlen_k = o.max_seqlen_k;
  }
  return f;
}

}  // namespace

void flash_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                     const Tensor& lse, const AttentionOptions& o) {
  fa::Options f = options_of(q, k, o);
  const Tensor args[fa::fwd::count] = {q,
                                       k,
                                       v,
                                       or_placeholder(ctx, o.bias),
                                       or_placeholder(ctx, o.softmax_aux),
                                       or_placeholder(ctx, o.cu_seqlens_q),
                                       or_placeholder(ctx, o.cu_seqlens_k),
                                       or_placeholder(ctx, o.q_segment_ids),
                                       or_placeholder(ctx, o.kv_segment_ids),
                                       out,
                                       lse};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  ctx.executor().run(fa::forward_invocation(specs, f), args, o.config);
}

AttentionOutput flash_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                const AttentionOptions& o) {
  if (q.rank() != 4 && q.rank() != 3)
    throw InvalidArgument("flash_attention: q " + to_string(q.shape()) +
                          " must be [batch, seq_q, heads, head_dim] or, packed, [total_q, heads, head_dim]");
  const bool packed = o.cu_seqlens_q.defined();
  Shape lse_shape = packed ? Shape{q.dim(-2), q.dim(0)} : Shape{q.dim(0), q.dim(-2), q.rank() == 4 ? q.dim(1) : 0};
  AttentionOutput r{ctx.empty(q.shape(), q.dtype()), ctx.empty(lse_shape, DType::f32)};
  flash_attention(ctx, q, k, v, r.out, r.lse, o);
  return r;
}

void flash_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& dout, const Tensor& lse, const AttentionGrads& g, const AttentionOptions& o) {
  fa::Options f = options_of(q, k, o);
  if (!g.dq.defined() || !g.dk.defined() || !g.dv.defined())
    throw InvalidArgument("flash_attention_bwd: dq, dk and dv must be given");
  const Tensor args[fa::bwd::count] = {q,
                                       k,
                                       v,
                                       out,
                                       dout,
                                       lse,
                                       or_placeholder(ctx, o.bias),
                                       or_placeholder(ctx, o.softmax_aux),
                                       or_placeholder(ctx, o.cu_seqlens_q),
                                       or_placeholder(ctx, o.cu_seqlens_k),
                                       or_placeholder(ctx, o.q_segment_ids),
                                       or_placeholder(ctx, o.kv_segment_ids),
                                       g.dq,
                                       g.dk,
                                       g.dv,
                                       or_placeholder(ctx, g.dbias),
                                       or_placeholder(ctx, g.dsoftmax_aux)};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  ctx.executor().run(fa::backward_invocation(specs, f), args, o.config);
}

AttentionGrads flash_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& out, const Tensor& dout, const Tensor& lse,
                                   const AttentionOptions& o) {
  AttentionGrads g{ctx.empty(q.shape(), q.dtype()), ctx.empty(k.shape(), k.dtype()), ctx.empty(v.shape(), v.dtype()),
                   {}, {}};
  if (o.bias.defined()) g.dbias = ctx.empty(o.bias.shape(), o.bias.dtype());
  if (o.softmax_aux.defined()) g.dsoftmax_aux = ctx.empty(o.softmax_aux.shape(), o.softmax_aux.dtype());
  flash_attention_bwd(ctx, q, k, v, out, dout, lse, g, o);
  return g;
}

}  // namespace ejk
