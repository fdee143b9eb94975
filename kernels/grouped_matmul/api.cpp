// ejk::grouped_matmul and ejk::grouped_matmul_tgmm through the executor.
#include <string>
#include <vector>

#include "ejk/error.hpp"
#include "ejk/grouped_matmul.hpp"
#include "grouped_matmul/grouped_matmul.hpp"

namespace ejk {
namespace {

namespace gm = kernels::grouped_matmul;

void launch(const Context& ctx, gm::Mode mode, const Tensor& lhs, const Tensor& rhs, const Tensor& sizes,
            const Tensor& out, const GroupedMatmulOptions& o) {
  if (mode == gm::Mode::tgmm && o.trans_rhs)
    throw InvalidArgument("grouped_matmul_tgmm: trans_rhs is an option of grouped_matmul only");
  const Invocation inv = gm::invocation(mode, lhs.spec(), rhs.spec(), sizes.spec(), out.spec(), o.trans_rhs);
  const gm::Problem p = gm::Problem::of(inv);
  if (o.check_group_sizes) {
    const auto v = sizes.read();
    (void)gm::group_offsets(p, std::vector<std::int64_t>(v.begin(), v.end()));
  }
  const Tensor args[] = {lhs, rhs, sizes, out};
  ctx.executor().run(inv, args, o.config);
}

std::string describe(const char* name, const Tensor& t) {
  return std::string(name) + " " + to_string(t.shape()) + " " + std::string(to_string(t.dtype()));
}

}  // namespace

void grouped_matmul(const Context& ctx, const Tensor& lhs, const Tensor& rhs, const Tensor& sizes, const Tensor& out,
                    const GroupedMatmulOptions& o) {
  launch(ctx, gm::Mode::gmm, lhs, rhs, sizes, out, o);
}

Tensor grouped_matmul(const Context& ctx, const Tensor& lhs, const Tensor& rhs, const Tensor& sizes,
                      const GroupedMatmulOptions& o) {
  if (lhs.rank() != 2 || rhs.rank() != 3)
    throw InvalidArgument("grouped_matmul: " + describe("lhs", lhs) + " must be [m, k] and " + describe("rhs", rhs) +
                          (o.trans_rhs ? " [groups, n, k]" : " [groups, k, n]"));
  Tensor out = ctx.empty({lhs.dim(0), o.trans_rhs ? rhs.dim(1) : rhs.dim(2)}, lhs.dtype());
  grouped_matmul(ctx, lhs, rhs, sizes, out, o);
  return out;
}

void grouped_matmul_tgmm(const Context& ctx, const Tensor& lhs, const Tensor& grad, const Tensor& sizes,
                         const Tensor& out, const GroupedMatmulOptions& o) {
  launch(ctx, gm::Mode::tgmm, lhs, grad, sizes, out, o);
}

Tensor grouped_matmul_tgmm(const Context& ctx, const Tensor& lhs, const Tensor& grad, const Tensor& sizes,
                           const GroupedMatmulOptions& o) {
  if (lhs.rank() != 2 || grad.rank() != 2 || sizes.rank() != 1)
    throw InvalidArgument("grouped_matmul_tgmm: " + describe("lhs", lhs) + " must be [m, k], " + describe("grad", grad) +
                          " [m, n] and " + describe("group_sizes", sizes) + " i32 [groups]");
  Tensor out = ctx.empty({sizes.dim(0), lhs.dim(1), grad.dim(1)}, lhs.dtype());
  grouped_matmul_tgmm(ctx, lhs, grad, sizes, out, o);
  return out;
}

}  // namespace ejk
