// ejk::ragged_page_attention: arguments to an invocation, optional index checks, the executor.
#include <cmath>

#include "decode_attention/engine.hpp"
#include "ejk/decode_attention.hpp"
#include "ejk/error.hpp"
#include "ragged_page_attention/ragged_page_attention.hpp"

namespace ejk {

namespace rp = kernels::ragged_page_attention;

void ragged_page_attention(const Context& ctx, const Tensor& queries, const Tensor& key_cache, const Tensor& value_cache,
                           const Tensor& kv_lens, const Tensor& block_tables, const Tensor& query_start_loc,
                           const Tensor& out, const RaggedPageAttentionOptions& o) {
  rp::Options f;
  f.sliding_window = o.sliding_window;
  f.logits_soft_cap = o.logits_soft_cap;
  f.num_seqs = o.num_seqs;
  f.max_q_len = o.max_q_len;
  if (o.softmax_scale) {
    if (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0)
      throw InvalidArgument("ragged_page_attention: softmax_scale " + std::to_string(*o.softmax_scale) +
                            " must be finite and non-zero");
    f.softmax_scale = *o.softmax_scale;
  }
  const Tensor sinks = o.softmax_aux.defined() ? o.softmax_aux : ctx.empty(Shape{0}, DType::f32);
  const Tensor args[rp::arg::count] = {queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, sinks, out};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  const Invocation inv = rp::invocation(specs, f);
  if (o.check_indices) {
    const auto e = rp::engine(inv);
    HostArrays host(rp::arg::count);
    host[rp::arg::kv_lens] = kv_lens.read();
    host[rp::arg::block_tables] = block_tables.read();
    host[rp::arg::query_start_loc] = query_start_loc.read();
    (void)kernels::decode_attention::ranges(e, host);
  }
  ctx.executor().run(inv, args, o.config);
}

Tensor ragged_page_attention(const Context& ctx, const Tensor& queries, const Tensor& key_cache,
                             const Tensor& value_cache, const Tensor& kv_lens, const Tensor& block_tables,
                             const Tensor& query_start_loc, const RaggedPageAttentionOptions& o) {
  // Tokens no sequence owns are left as they are: zeros here.
  Tensor out = ctx.from(queries.shape(), queries.dtype(), std::vector<double>(static_cast<std::size_t>(queries.numel()), 0.0));
  ragged_page_attention(ctx, queries, key_cache, value_cache, kv_lens, block_tables, query_start_loc, out, o);
  return out;
}

}  // namespace ejk
