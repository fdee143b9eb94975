#pragma once
// Operations of the C++ API. Each goes through the context's executor.
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct MatmulOptions {
  bool trans_a = false;  // a is stored [batch, k, m]
  bool trans_b = false;  // b is stored [batch, n, k]
  // f32 only: operands may be rounded to TF32 (10-bit mantissa) on tensor cores; f32 accumulation.
  bool tf32 = false;
  double alpha = 1.0;
  double beta = 0.0;
  std::optional<Config> config;  // override the selector chain
};

// c = alpha * op(a) * op(b) + beta * c, with a leading batch dimension optional on all three.
EJK_API void matmul(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& c,
                    const MatmulOptions& options = {});
// Allocates c (dtype of a); beta is ignored.
EJK_API Tensor matmul(const Context& ctx, const Tensor& a, const Tensor& b, const MatmulOptions& options = {});

// out = a + alpha * b elementwise, on the device (docs/kernels/add.md). a, b and out have one
// shape (any rank, numel may be 0) and each its own dtype, f32, f16 or bf16; the arithmetic is
// f32, rounded once to out's dtype. alpha == 0 never reads b, so add(ctx, a, a, out, 0) is a
// copy or dtype conversion. out may be a (in-place accumulate) or b. Throws InvalidArgument
// naming the argument and its shape; `config` overrides the selector chain.
EJK_API void add(const Context& ctx, const Tensor& a, const Tensor& b, const Tensor& out, double alpha = 1.0,
                 const std::optional<Config>& config = {});

}  // namespace ejk
