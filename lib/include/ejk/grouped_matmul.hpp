#pragma once
// Grouped matrix products (mixture of experts) of the C++ API, through the context's executor.
// Semantics in kernels/grouped_matmul/grouped_matmul.hpp and docs/kernels/grouped_matmul.md.
//
// The rows of lhs [m, k] are grouped contiguously by group_sizes i32 [groups] (sizes >= 0 that
// sum to m: tokens sorted by expert):
//   Tensor out = ejk::grouped_matmul(ctx, lhs, rhs, group_sizes);        // rhs [groups, k, n] -> [m, n]
//   Tensor w   = ejk::grouped_matmul_tgmm(ctx, lhs, grad, group_sizes);  // -> [groups, k, n]
// Gradients of out = grouped_matmul(lhs, rhs, sizes):
//   d_lhs = grouped_matmul(ctx, d_out, rhs, sizes, {.trans_rhs = true})
//   d_rhs = grouped_matmul_tgmm(ctx, lhs, d_out, sizes)
// (with trans_rhs in the forward: d_lhs with trans_rhs false, d_rhs = tgmm(d_out, lhs)).
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct GroupedMatmulOptions {
  bool trans_rhs = false;  // rhs is stored [groups, n, k] (grouped_matmul only)
  // Read group_sizes back and check them (none negative, sum m) before launching: device kernels
  // cannot report bad sizes. Turn off only for sizes known to be valid (a training loop, a benchmark).
  bool check_group_sizes = true;
  std::optional<Config> config{};  // override the selector chain
};

// out[r] = lhs[r] . op(rhs[g]) for every row r of group g.
EJK_API void grouped_matmul(const Context& ctx, const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                            const Tensor& out, const GroupedMatmulOptions& options = {});
EJK_API Tensor grouped_matmul(const Context& ctx, const Tensor& lhs, const Tensor& rhs, const Tensor& group_sizes,
                              const GroupedMatmulOptions& options = {});

// out[g] = lhs_g^T . grad_g ([groups, k, n]; 0 for an empty group). trans_rhs must be false.
EJK_API void grouped_matmul_tgmm(const Context& ctx, const Tensor& lhs, const Tensor& grad, const Tensor& group_sizes,
                                 const Tensor& out, const GroupedMatmulOptions& options = {});
EJK_API Tensor grouped_matmul_tgmm(const Context& ctx, const Tensor& lhs, const Tensor& grad, const Tensor& group_sizes,
                                   const GroupedMatmulOptions& options = {});

}  // namespace ejk
