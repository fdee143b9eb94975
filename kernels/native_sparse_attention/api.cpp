// ejk::native_sparse_attention and ejk::native_sparse_attention_bwd through the executor.
#include <cmath>
#include <string>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/native_sparse_attention.hpp"
#include "native_sparse_attention/nsa.hpp"

namespace ejk {
namespace {

namespace nsa = kernels::native_sparse_attention;

std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + to_string(t.shape()) + " " + std::string(to_string(t.dtype()));
}

double checked_scale(const std::optional<double>& s, const char* fn) {
  if (!s) return 0.0;
  if (!std::isfinite(*s) || *s == 0.0)
    throw InvalidArgument(std::string(fn) + ": scale " + std::to_string(*s) + " must be finite and non-zero");
  return *s;
}

std::vector<std::int64_t> ints(const Tensor& t) {
  auto v = t.read();
  return std::vector<std::int64_t>(v.begin(), v.end());
}

// The index arrays the kernels take: block_counts and cu_seqlens built where the options leave
// them out.
struct Indices {
  Tensor counts, cu;
};

Indices indices(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& block_indices, const NsaOptions& o,
                const char* fn) {
  if (q.rank() != 4 || k.rank() != 4 || block_indices.rank() != 4)
    throw InvalidArgument(std::string(fn) + ": " + describe("q", q) + ", " + describe("k", k) + " and " +
                          describe("block_indices", block_indices) +
                          " must be [batch, seq, heads, head_dim_k], [batch, seq, kv_heads, head_dim_k] and "
                          "[batch, seq, kv_heads, selected]");
  Indices r;
  const std::int64_t B = q.dim(0), T = q.dim(1), H = k.dim(2), S = block_indices.dim(3);
  if (o.block_counts.defined()) {
    r.counts = o.block_counts;
  } else {
    if (o.block_count < -1 || o.block_count > S)
      throw InvalidArgument(std::string(fn) + ": block_count " + std::to_string(o.block_count) + " is outside [0, " +
                            std::to_string(S) + "] (selected of block_indices)");
    const double c = static_cast<double>(o.block_count < 0 ? S : o.block_count);
    r.counts = ctx.from({B, T, H}, DType::i32, std::vector<double>(static_cast<std::size_t>(B * T * H), c));
  }
  if (o.cu_seqlens.defined()) {
    r.cu = o.cu_seqlens;
  } else {
    std::vector<double> cu(static_cast<std::size_t>(B + 1));
    for (std::int64_t b = 0; b <= B; ++b) cu[static_cast<std::size_t>(b)] = static_cast<double>(b * T);
    r.cu = ctx.from({B + 1}, DType::i32, cu);
  }
  return r;
}

void run(const Context& ctx, const Invocation& inv, std::span<const Tensor> args, const NsaOptions& o) {
  if (o.check_indices)
    nsa::check_indices(nsa::Problem::of(inv), ints(args[nsa::fwd::block_indices]), ints(args[nsa::fwd::block_counts]),
                       ints(args[nsa::fwd::cu_seqlens]));
  ctx.executor().run(inv, args, o.config);
}

}  // namespace

NsaOutput native_sparse_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& g_cmp, const Tensor& g_slc, const Tensor& block_indices,
                                  const NsaOptions& o) {
  const Indices ix = indices(ctx, q, k, block_indices, o, "native_sparse_attention");
  if (v.rank() != 4) throw InvalidArgument("native_sparse_attention: " + describe("v", v) + " must be [batch, seq, kv_heads, head_dim_v]");
  const Shape os{q.dim(0), q.dim(1), q.dim(2), v.dim(3)};
  NsaOutput r{ctx.empty(os, q.dtype()), ctx.empty(os, q.dtype()), ctx.empty(os, q.dtype()),
              ctx.empty({q.dim(0), q.dim(1), q.dim(2), 2}, DType::f32)};
  const Tensor args[nsa::fwd::count] = {q, k, v, g_cmp, g_slc, block_indices, ix.counts, ix.cu, r.o, r.o_cmp, r.o_slc, r.lse};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  run(ctx, nsa::forward_invocation(specs, o.block_size, checked_scale(o.scale, "native_sparse_attention")), args, o);
  return r;
}

NsaGrads native_sparse_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& g_cmp, const Tensor& g_slc, const Tensor& block_indices,
                                     const NsaOutput& f, const Tensor& dout, const NsaOptions& o) {
  const Indices ix = indices(ctx, q, k, block_indices, o, "native_sparse_attention_bwd");
  NsaGrads g{ctx.empty(q.shape(), q.dtype()), ctx.empty(k.shape(), k.dtype()), ctx.empty(v.shape(), v.dtype()),
             ctx.empty(g_cmp.shape(), g_cmp.dtype()), ctx.empty(g_slc.shape(), g_slc.dtype())};
  const Tensor args[nsa::bwd::count] = {q,       k,       v,     g_cmp, g_slc, block_indices, ix.counts, ix.cu, f.o_cmp,
                                        f.o_slc, f.lse,   dout,  g.dq,  g.dk,  g.dv,          g.dg_cmp,  g.dg_slc};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  run(ctx, nsa::backward_invocation(specs, o.block_size, checked_scale(o.scale, "native_sparse_attention_bwd")), args, o);
  return g;
}

}  // namespace ejk
