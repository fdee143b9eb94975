// ejk::mean_pooling and ejk::mean_pooling_bwd through the executor.
#include <string>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/pooling.hpp"
#include "mean_pooling/mean_pooling.hpp"

namespace ejk {
namespace {

namespace mp = kernels::mean_pooling;

void launch(const Context& ctx, mp::Direction dir, const Tensor& in, const Tensor& out, const MeanPoolingOptions& o) {
  const bool packed = o.cu_seqlens.defined();
  const Tensor cu = packed ? o.cu_seqlens : ctx.empty({0}, DType::i32);
  const Invocation inv = mp::invocation(dir, in.spec(), cu.spec(), out.spec());
  const mp::Problem p = mp::Problem::of(inv);
  if (packed && o.check_cu_seqlens) (void)mp::offsets(p, cu.read());
  const Tensor args[] = {in, cu, out};
  ctx.executor().run(inv, args, o.config);
}

}  // namespace

void mean_pooling(const Context& ctx, const Tensor& x, const Tensor& out, const MeanPoolingOptions& o) {
  launch(ctx, mp::Direction::forward, x, out, o);
}

Tensor mean_pooling(const Context& ctx, const Tensor& x, const MeanPoolingOptions& o) {
  const bool packed = o.cu_seqlens.defined();
  if (x.rank() != (packed ? 2 : 3) || (packed && o.cu_seqlens.rank() != 1))
    throw InvalidArgument("mean_pooling: x " + to_string(x.shape()) + " must be " +
                          (packed ? "[tokens, dim] with cu_seqlens i32 [num_seqs + 1], got cu_seqlens " +
                                        to_string(o.cu_seqlens.shape())
                                  : std::string("[batch, seq, dim] (or [tokens, dim] with cu_seqlens)")));
  Tensor out = ctx.empty({packed ? o.cu_seqlens.dim(0) - 1 : x.dim(0), x.dim(-1)}, x.dtype());
  mean_pooling(ctx, x, out, o);
  return out;
}

void mean_pooling_bwd(const Context& ctx, const Tensor& dout, const Tensor& dx, const MeanPoolingOptions& o) {
  launch(ctx, mp::Direction::backward, dout, dx, o);
}

Tensor mean_pooling_bwd(const Context& ctx, const Tensor& dout, const Shape& input_shape, const MeanPoolingOptions& o) {
  Tensor dx = ctx.empty(input_shape, dout.dtype());
  mean_pooling_bwd(ctx, dout, dx, o);
  return dx;
}

}  // namespace ejk
