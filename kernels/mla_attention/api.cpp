// ejk::mla_decode (the mla_decode kernel) and ejk::mla_prefill (matmul and flash_attention),
// through the executor.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ejk/attention.hpp"
#include "ejk/error.hpp"
#include "ejk/mla.hpp"
#include "ejk/ops.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk {
namespace {

namespace mla = kernels::mla_attention;

std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + to_string(t.shape()) + " " + std::string(to_string(t.dtype()));
}

double checked_scale(const std::optional<double>& s, const char* fn) {
  if (!s) return 0.0;
  if (!std::isfinite(*s) || *s == 0.0)
    throw InvalidArgument(std::string(fn) + ": softmax_scale " + std::to_string(*s) + " must be finite and non-zero");
  return *s;
}

std::vector<std::int64_t> ints(const Tensor& t) {
  auto v = t.read();
  return std::vector<std::int64_t>(v.begin(), v.end());
}

}  // namespace

void mla_decode(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& kv_cache,
                const Tensor& block_tables, const Tensor& context_lens, const Tensor& w_kc, const Tensor& w_vc,
                const Tensor& out, const MlaDecodeOptions& o) {
  const Tensor args[mla::arg::count] = {q_nope, q_pe, kv_cache, block_tables, context_lens, w_kc, w_vc, out};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  const Invocation inv = mla::decode_invocation(specs, checked_scale(o.softmax_scale, "mla_decode"));
  if (o.check_tables) mla::check_tables(mla::Problem::of(inv), ints(block_tables), ints(context_lens));
  ctx.executor().run(inv, args, o.config);
}

Tensor mla_decode(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& kv_cache,
                  const Tensor& block_tables, const Tensor& context_lens, const Tensor& w_kc, const Tensor& w_vc,
                  const MlaDecodeOptions& o) {
  if (q_nope.rank() != 3 || w_vc.rank() != 3)
    throw InvalidArgument("mla_decode: " + describe("q_nope", q_nope) + " must be [batch, heads, qk_nope_head_dim] and " +
                          describe("w_vc", w_vc) + " [heads, kv_lora_rank, v_head_dim]");
  Tensor out = ctx.empty({q_nope.dim(0), q_nope.dim(1), w_vc.dim(2)}, q_nope.dtype());
  mla_decode(ctx, q_nope, q_pe, kv_cache, block_tables, context_lens, w_kc, w_vc, out, o);
  return out;
}

MlaPrefillWeights mla_prefill_weights(const Context& ctx, const Tensor& w_kc, const Tensor& w_vc, std::int64_t rope_dim) {
  if (w_kc.rank() != 3 || w_vc.rank() != 3 || w_kc.dim(0) != w_vc.dim(0) || w_kc.dim(2) != w_vc.dim(1) ||
      w_kc.dtype() != w_vc.dtype() || !is_float(w_kc.dtype()))
    throw InvalidArgument("mla_prefill_weights: " + describe("w_kc", w_kc) + " and " + describe("w_vc", w_vc) +
                          " must be [heads, qk_nope_head_dim, kv_lora_rank] and [heads, kv_lora_rank, v_head_dim] of one float dtype");
  MlaPrefillWeights w;
  w.heads = w_kc.dim(0);
  w.nope_dim = w_kc.dim(1);
  w.rank = w_kc.dim(2);
  w.v_dim = w_vc.dim(2);
  w.rope_dim = rope_dim;
  const std::int64_t H = w.heads, dn = w.nope_dim, R = w.rank, dv = w.v_dim, D = dn + rope_dim;
  if (rope_dim < 0 || dv > D)
    throw InvalidArgument("mla_prefill_weights: rope_dim " + std::to_string(rope_dim) + " must be >= 0 and v_head_dim " +
                          std::to_string(dv) + " (w_vc " + to_string(w_vc.shape()) +
                          ") at most qk_nope_head_dim + rope_dim = " + std::to_string(D) +
                          " (flash_attention takes one head_dim, so values are padded to the query width)");
  const auto kc = w_kc.read(), vc = w_vc.read();
  const DType t = w_kc.dtype();
  auto at = [](std::vector<double>& m, std::int64_t cols, std::int64_t r, std::int64_t c) -> double& {
    return m[static_cast<std::size_t>(r * cols + c)];
  };
  std::vector<double> kn(static_cast<std::size_t>(R * H * D), 0.0), kp(static_cast<std::size_t>(rope_dim * H * D), 0.0),
      vv(static_cast<std::size_t>(R * H * D), 0.0), qn(static_cast<std::size_t>(dn * D), 0.0),
      qp(static_cast<std::size_t>(rope_dim * D), 0.0), od(static_cast<std::size_t>(D * dv), 0.0);
  for (std::int64_t h = 0; h < H; ++h) {
    for (std::int64_t d = 0; d < dn; ++d)
      for (std::int64_t c = 0; c < R; ++c) at(kn, H * D, c, h * D + d) = kc[static_cast<std::size_t>((h * dn + d) * R + c)];
    for (std::int64_t r = 0; r < rope_dim; ++r) at(kp, H * D, r, h * D + dn + r) = 1.0;
    for (std::int64_t c = 0; c < R; ++c)
      for (std::int64_t d = 0; d < dv; ++d) at(vv, H * D, c, h * D + d) = vc[static_cast<std::size_t>((h * R + c) * dv + d)];
  }
  for (std::int64_t d = 0; d < dn; ++d) at(qn, D, d, d) = 1.0;
  for (std::int64_t r = 0; r < rope_dim; ++r) at(qp, D, r, dn + r) = 1.0;
  for (std::int64_t d = 0; d < dv; ++d) at(od, dv, d, d) = 1.0;
  w.k_from_ckv = ctx.from({R, H * D}, t, kn);
  w.k_from_kpe = ctx.from({rope_dim, H * D}, t, kp);
  w.v_from_ckv = ctx.from({R, H * D}, t, vv);
  w.q_from_nope = ctx.from({dn, D}, t, qn);
  w.q_from_pe = ctx.from({rope_dim, D}, t, qp);
  w.out_from_o = ctx.from({D, dv}, t, od);
  return w;
}

Tensor mla_prefill(const Context& ctx, const Tensor& q_nope, const Tensor& q_pe, const Tensor& c_kv, const Tensor& k_pe,
                   const MlaPrefillWeights& w, const MlaPrefillOptions& o) {
  const char* fn = "mla_prefill";
  const std::int64_t H = w.heads, dn = w.nope_dim, dr = w.rope_dim, R = w.rank, dv = w.v_dim, D = dn + dr;
  if (!w.k_from_ckv.defined()) throw InvalidArgument("mla_prefill: weights were not built (use mla_prefill_weights)");
  const std::int64_t T = q_nope.rank() == 3 ? q_nope.dim(0) : -1;
  const DType t = w.k_from_ckv.dtype();
  auto expect = [&](const char* name, const Tensor& x, Shape want, const char* layout) {
    if (x.shape() != want || x.dtype() != t)
      throw InvalidArgument(std::string(fn) + ": " + describe(name, x) + " must be " + std::string(to_string(t)) + " " +
                            to_string(want) + " (" + layout + ", dtype and sizes of the weights)");
  };
  if (T < 0)
    throw InvalidArgument(std::string(fn) + ": " + describe("q_nope", q_nope) + " must be [tokens, heads, qk_nope_head_dim]");
  expect("q_nope", q_nope, {T, H, dn}, "[tokens, heads, qk_nope_head_dim]");
  expect("q_pe", q_pe, {T, H, dr}, "[tokens, heads, rope_dim]");
  expect("c_kv", c_kv, {T, R}, "[tokens, kv_lora_rank]");
  expect("k_pe", k_pe, {T, dr}, "[tokens, rope_dim]");

  AttentionOptions ao;
  ao.causal = o.causal;
  if (o.softmax_scale) ao.softmax_scale = checked_scale(o.softmax_scale, fn);
  else ao.softmax_scale = 1.0 / std::sqrt(static_cast<double>(D));
  if (o.cu_seqlens.defined()) {
    const Tensor& cu = o.cu_seqlens;
    if (cu.rank() != 1 || cu.dtype() != DType::i32 || cu.dim(0) < 2)
      throw InvalidArgument(std::string(fn) + ": " + describe("cu_seqlens", cu) + " must be i32 [batch + 1] with batch >= 1");
    std::int64_t longest = o.max_seqlen;
    if (longest <= 0) {
      const auto c = ints(cu);
      if (c.front() != 0 || c.back() != T)
        throw InvalidArgument(std::string(fn) + ": cu_seqlens " + describe("", cu) + " must run from 0 to the token count " +
                              std::to_string(T) + ", got " + std::to_string(c.front()) + " .. " + std::to_string(c.back()));
      longest = 0;
      for (std::size_t i = 1; i < c.size(); ++i) {
        if (c[i] < c[i - 1])
          throw InvalidArgument(std::string(fn) + ": cu_seqlens decreases at index " + std::to_string(i) + " (" +
                                std::to_string(c[i - 1]) + " then " + std::to_string(c[i]) + ")");
        longest = std::max(longest, c[i] - c[i - 1]);
      }
    }
    ao.cu_seqlens_q = cu;
    ao.cu_seqlens_k = cu;
    ao.max_seqlen_q = ao.max_seqlen_k = std::max<std::int64_t>(longest, 1);
  }
  if (T == 0) return ctx.empty({0, H, dv}, t);

  // Per-head keys and values from the latent, queries [q_nope | q_pe]; the routing matrices
  // hold ones and zeros, so the assembly adds nothing to the rounding of the expansion.
  Tensor k = ctx.empty({T, H * D}, t), v = ctx.empty({T, H * D}, t), q = ctx.empty({T * H, D}, t);
  matmul(ctx, c_kv, w.k_from_ckv, k);
  if (dr > 0) matmul(ctx, k_pe, w.k_from_kpe, k, {.beta = 1.0, .config = {}});
  matmul(ctx, c_kv, w.v_from_ckv, v);
  matmul(ctx, q_nope.reshaped({T * H, dn}), w.q_from_nope, q);
  if (dr > 0) matmul(ctx, q_pe.reshaped({T * H, dr}), w.q_from_pe, q, {.beta = 1.0, .config = {}});

  Tensor q3 = q.reshaped({T, H, D}), k3 = k.reshaped({T, H, D}), v3 = v.reshaped({T, H, D});
  Tensor o_full, lse;
  if (ao.cu_seqlens_q.defined()) {
    o_full = ctx.empty({T, H, D}, t);
    lse = ctx.empty({H, T}, DType::f32);
    flash_attention(ctx, q3, k3, v3, o_full, lse, ao);
  } else {
    Tensor q4 = q.reshaped({1, T, H, D});
    o_full = ctx.empty({1, T, H, D}, t);
    lse = ctx.empty({1, H, T}, DType::f32);
    flash_attention(ctx, q4, k.reshaped({1, T, H, D}), v.reshaped({1, T, H, D}), o_full, lse, ao);
  }
  Tensor out = ctx.empty({T * H, dv}, t);
  matmul(ctx, o_full.reshaped({T * H, D}), w.out_from_o, out);
  return out.reshaped({T, H, dv});
}

}  // namespace ejk
