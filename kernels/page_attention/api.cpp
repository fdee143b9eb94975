// ejk::page_attention: arguments to an invocation, optional index checks, the executor.
#include <cmath>

#include "decode_attention/engine.hpp"
#include "ejk/decode_attention.hpp"
#include "ejk/error.hpp"
#include "page_attention/page_attention.hpp"

namespace ejk {

namespace pa = kernels::page_attention;

void page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                    const Tensor& context_lens, const Tensor& block_tables, const Tensor& out,
                    const PageAttentionOptions& o) {
  pa::Options f;
  f.logits_soft_cap = o.logits_soft_cap;
  if (o.softmax_scale) {
    if (!std::isfinite(*o.softmax_scale) || *o.softmax_scale == 0.0)
      throw InvalidArgument("page_attention: softmax_scale " + std::to_string(*o.softmax_scale) +
                            " must be finite and non-zero");
    f.softmax_scale = *o.softmax_scale;
  }
  const Tensor args[pa::arg::count] = {query, key_cache, value_cache, context_lens, block_tables, out};
  std::vector<TensorSpec> specs;
  for (const auto& t : args) specs.push_back(t.spec());
  const Invocation inv = pa::invocation(specs, f);
  if (o.check_indices) {
    const auto e = pa::engine(inv);
    HostArrays host(pa::arg::count);
    host[pa::arg::context_lens] = context_lens.read();
    host[pa::arg::block_tables] = block_tables.read();
    (void)kernels::decode_attention::ranges(e, host);
  }
  ctx.executor().run(inv, args, o.config);
}

Tensor page_attention(const Context& ctx, const Tensor& query, const Tensor& key_cache, const Tensor& value_cache,
                      const Tensor& context_lens, const Tensor& block_tables, const PageAttentionOptions& o) {
  Tensor out = ctx.empty(query.shape(), query.dtype());
  page_attention(ctx, query, key_cache, value_cache, context_lens, block_tables, out, o);
  return out;
}

}  // namespace ejk
