// ejk::ragged_decode_attention: arguments to an invocation, optional index checks, the executor.
#include <cmath>

#include "decode_attention/engine.hpp"
#include "ejk/decode_attention.hpp"
#include "ejk/error.hpp"
#include "ragged_decode_attention/ragged_decode_attention.hpp"

namespace ejk {

namespace rd = kernels::ragged_decode_attention;

void ragged_decode_attention(const Context& ctx, const Tensor& query, const Tensor& key, const Tensor& value,
                             const Tensor& sequence_start, const Tensor& sequence_end, const Tensor& out,
                             const RaggedDecodeAttentionOptions& o) {
  rd::Options f;
  f.sliding_window = o.sliding_window;
  f.logits_soft_cap = o.logits_soft_cap;
  if (o.softmax_scale) {
    if (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0)
      throw InvalidArgument("ragged_decode_attention: softmax_scale " + std::to_string(*o.softmax_scale) +
                            " must be finite and non-zero");
    f.softmax_scale = *o.softmax_scale;
  }
  const Tensor sinks = o.softmax_aux.defined() ? o.softmax_aux : ctx.empty(Shape{0}, DType::f32);
  const Tensor args[rd::arg::count] = {query, key, value, sequence_start, sequence_end, sinks, out};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  const Invocation inv = rd::invocation(specs, f);
  if (o.check_indices) {
    const auto e = rd::engine(inv);
    HostArrays host(rd::arg::count);
    host[rd::arg::sequence_start] = sequence_start.read();
    host[rd::arg::sequence_end] = sequence_end.read();
    (void)kernels::decode_attention::ranges(e, host);
  }
  ctx.executor().run(inv, args, o.config);
}

Tensor ragged_decode_attention(const Context& ctx, const Tensor& query, const Tensor& key, const Tensor& value,
                               const Tensor& sequence_start, const Tensor& sequence_end,
                               const RaggedDecodeAttentionOptions& o) {
  Tensor out = ctx.empty(query.shape(), query.dtype());
  ragged_decode_attention(ctx, query, key, value, sequence_start, sequence_end, out, o);
  return out;
}

}  // namespace ejk
