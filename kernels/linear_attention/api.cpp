// ejk::recurrent, ejk::gla, ejk::lightning_attention and their backward, through the executor.
#include <cmath>
#include <string>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/linear_attention.hpp"
#include "linear_attention/linear_attention.hpp"

namespace ejk {
namespace {

namespace la = kernels::linear_attention;

Tensor placeholder(const Context& ctx) { return ctx.empty(Shape{0}, DType::f32); }
Tensor or_placeholder(const Context& ctx, const Tensor& t) { return t.defined() ? t : placeholder(ctx); }

double checked_scale(const LinearAttentionOptions& o, std::string_view fn) {
  if (!o.scale) return 0.0;
  if (!std::isfinite(*o.scale) || *o.scale == 0.0)
    throw InvalidArgument(std::string(fn) + ": scale " + std::to_string(*o.scale) + " must be finite and non-zero");
  return *o.scale;
}

void check_shapes(const Tensor& q, const Tensor& v, std::string_view fn) {
  if (q.rank() != 4 || v.rank() != 4)
    throw InvalidArgument(std::string(fn) + ": q " + to_string(q.shape()) + " and v " + to_string(v.shape()) +
                          " must be [batch, seq, heads, K] and [batch, seq, heads, V]");
}

void no_gates(const LinearAttentionOptions& o, std::string_view fn) {
  if (o.g.defined() || o.g_gamma.defined() || o.gk.defined() || o.gv.defined())
    throw InvalidArgument(std::string(fn) + " takes no gate arrays (g, g_gamma, gk, gv): its decay comes from "
                          "layer_idx and num_layers");
}

std::int64_t states_of(const Tensor& q, const LinearAttentionOptions& o) {
  return o.cu_seqlens.defined() && o.cu_seqlens.rank() == 1 ? o.cu_seqlens.dim(0) - 1 : q.dim(0);
}

std::vector<Tensor> select(la::Variant var, bool backward, const std::vector<Tensor>& full) {
  if (var != la::Variant::lightning) return full;
  la::Problem p;
  p.variant = var;
  p.backward = backward;
  std::vector<Tensor> out;
  for (std::size_t i = 0; i < la::kernel_args(var, backward).size(); ++i) out.push_back(full[p.full_index(i)]);
  return out;
}

void run(const Context& ctx, la::Variant var, bool backward, const std::vector<Tensor>& full,
         const LinearAttentionOptions& o, std::string_view fn) {
  const std::vector<Tensor> args = select(var, backward, full);
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  const Invocation inv = la::make_invocation(var, backward, specs, o.reverse, checked_scale(o, fn), o.layer_idx,
                                             o.num_layers, o.slopes);
  // Device kernels cannot report bad offsets: they are read back and checked here.
  if (o.cu_seqlens.defined() && o.cu_seqlens.rank() == 1) {
    const auto cu = o.cu_seqlens.read();
    (void)la::sequences(la::Problem::of(inv), std::vector<std::int64_t>(cu.begin(), cu.end()));
  }
  ctx.executor().run(inv, args, o.config);
}

LinearAttentionResult forward(const Context& ctx, la::Variant var, const Tensor& q, const Tensor& k, const Tensor& v,
                              const LinearAttentionOptions& o) {
  const std::string_view fn = la::kernel_name(var, false);
  check_shapes(q, v, fn);
  if (var == la::Variant::lightning) no_gates(o, fn);
  LinearAttentionResult r;
  r.o = ctx.empty({q.dim(0), q.dim(1), q.dim(2), v.dim(3)}, q.dtype());
  if (o.return_state) r.final_state = ctx.empty({states_of(q, o), q.dim(2), q.dim(3), v.dim(3)}, q.dtype());
  run(ctx, var, false,
      {q, k, v, or_placeholder(ctx, o.g), or_placeholder(ctx, o.g_gamma), or_placeholder(ctx, o.gk),
       or_placeholder(ctx, o.gv), or_placeholder(ctx, o.initial_state), or_placeholder(ctx, o.cu_seqlens), r.o,
       or_placeholder(ctx, r.final_state)},
      o, fn);
  return r;
}

LinearAttentionGrads backward(const Context& ctx, la::Variant var, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& dout, const Tensor& dht, const LinearAttentionOptions& o) {
  const std::string_view fn = la::kernel_name(var, true);
  check_shapes(q, v, fn);
  if (var == la::Variant::lightning) no_gates(o, fn);
  LinearAttentionGrads g;
  g.dq = ctx.empty(q.shape(), q.dtype());
  g.dk = ctx.empty(k.shape(), k.dtype());
  g.dv = ctx.empty(v.shape(), v.dtype());
  auto like = [&](const Tensor& t) { return t.defined() ? ctx.empty(t.shape(), t.dtype()) : Tensor{}; };
  g.dg = like(o.g);
  g.dgk = like(o.gk);
  g.dgv = like(o.gv);
  g.dh0 = like(o.initial_state);
  run(ctx, var, true,
      {q, k, v, or_placeholder(ctx, o.g), or_placeholder(ctx, o.g_gamma), or_placeholder(ctx, o.gk),
       or_placeholder(ctx, o.gv), or_placeholder(ctx, o.initial_state), or_placeholder(ctx, o.cu_seqlens), dout,
       or_placeholder(ctx, dht), g.dq, g.dk, g.dv, or_placeholder(ctx, g.dg), or_placeholder(ctx, g.dgk),
       or_placeholder(ctx, g.dgv), or_placeholder(ctx, g.dh0)},
      o, fn);
  return g;
}

}  // namespace

LinearAttentionResult recurrent(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                const LinearAttentionOptions& o) {
  return forward(ctx, la::Variant::recurrent, q, k, v, o);
}
LinearAttentionResult gla(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                          const LinearAttentionOptions& o) {
  return forward(ctx, la::Variant::gla, q, k, v, o);
}
LinearAttentionResult lightning_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const LinearAttentionOptions& o) {
  return forward(ctx, la::Variant::lightning, q, k, v, o);
}
LinearAttentionGrads recurrent_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& dout, const LinearAttentionOptions& o, const Tensor& dht) {
  return backward(ctx, la::Variant::recurrent, q, k, v, dout, dht, o);
}
LinearAttentionGrads gla_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                             const LinearAttentionOptions& o, const Tensor& dht) {
  return backward(ctx, la::Variant::gla, q, k, v, dout, dht, o);
}
LinearAttentionGrads lightning_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& dout, const LinearAttentionOptions& o, const Tensor& dht) {
  return backward(ctx, la::Variant::lightning, q, k, v, dout, dht, o);
}

}  // namespace ejk
