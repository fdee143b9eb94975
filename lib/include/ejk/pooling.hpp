#pragma once
// Mean pooling over sequences of the C++ API, through the context's executor. Semantics in
// kernels/mean_pooling/mean_pooling.hpp and docs/kernels/mean_pooling.md.
//
//   Tensor pooled = ejk::mean_pooling(ctx, x);                             // [batch, seq, dim] -> [batch, dim]
//   Tensor pooled = ejk::mean_pooling(ctx, x, {.cu_seqlens = cu});         // [tokens, dim] -> [num_seqs, dim]
//   Tensor dx = ejk::mean_pooling_bwd(ctx, dpooled, x.shape(), {.cu_seqlens = cu});
#include <optional>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct MeanPoolingOptions {
  // i32 [num_seqs + 1] (0, prefix sums, tokens): x is packed [tokens, dim]. Undefined: x is
  // padded [batch, seq, dim] and every sequence has seq tokens.
  Tensor cu_seqlens{};
  // Read cu_seqlens back and check it (starts at 0, never decreases, ends at the token count)
  // before launching: device kernels cannot report bad offsets. Turn off only for offsets known
  // to be valid (a training loop, a benchmark).
  bool check_cu_seqlens = true;
  std::optional<Config> config{};  // override the selector chain
};

// out[s] = mean of the tokens of sequence s (0 for an empty sequence).
EJK_API void mean_pooling(const Context& ctx, const Tensor& x, const Tensor& out,
                          const MeanPoolingOptions& options = {});
EJK_API Tensor mean_pooling(const Context& ctx, const Tensor& x, const MeanPoolingOptions& options = {});

// The gradient of mean_pooling: dx[t] = dout[s] / length of s for the sequence s holding token
// t. dx has the forward input's shape.
EJK_API void mean_pooling_bwd(const Context& ctx, const Tensor& dout, const Tensor& dx,
                              const MeanPoolingOptions& options = {});
EJK_API Tensor mean_pooling_bwd(const Context& ctx, const Tensor& dout, const Shape& input_shape,
                                const MeanPoolingOptions& options = {});

}  // namespace ejk
