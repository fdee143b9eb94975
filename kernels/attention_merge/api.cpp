// ejk::attention_merge through the executor.
#include "attention_merge/attention_merge.hpp"
#include "ejk/attention.hpp"

namespace ejk {

void attention_merge(const Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& part, const Tensor& part_lse,
                     const std::optional<Config>& config) {
  const Invocation inv = kernels::attention_merge::invocation(out.spec(), lse.spec(), part.spec(), part_lse.spec());
  const Tensor args[] = {out, lse, part, part_lse};
  ctx.executor().run(inv, args, config);
}

}  // namespace ejk
