// ejk::add through the executor.
#include "add/add.hpp"
#include "ejk/ops.hpp"

namespace ejk {

void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
         const std::optional<Config>& config) {
  const Invocation inv = kernels::add::invocation(a.spec(), b.spec(), out.spec(), alpha);
  const Tensor args[] = {a, b, out};
  ctx.executor().run(inv, args, config);
}

}  // namespace ejk
