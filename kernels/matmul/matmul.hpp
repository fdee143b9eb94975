#pragma once
// matmul: c = alpha * op(a) * op(b) + beta * c, batched.
//   a: [batch?, m, k] ([batch?, k, m] when trans_a), b: [batch?, k, n] ([batch?, n, k] when trans_b),
//   c: [batch?, m, n]. a or b may drop the batch dimension to be shared by every batch.
// Options (in the key): trans_a, trans_b, tf32 (f32 operands may be rounded to TF32 before
// multiplying; in the key only when set, so workloads without it keep their keys). Scalars (not in
// the key): alpha, beta.
#include <cstdint>

#include "ejk/kernel.hpp"

namespace ejk::kernels::matmul {

// Everything an implementation needs to address one invocation's operands.
struct Problem {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  bool tf32 = false;  // f32 operands may be rounded to TF32 (10-bit mantissa) before multiplying
  std::int64_t batch_stride_a = 0, batch_stride_b = 0, batch_stride_c = 0;  // elements; 0 = shared
  double alpha = 1.0, beta = 0.0;
  DType dtype = DType::f32;  // of a, b and c

  static Problem of(const Invocation& inv);
  // Whether the rows and batch strides of a and b are multiples of `elems` elements: what copies
  // in 16-byte units (cp.async, TMA) need.
  bool rows_in_multiples_of(std::int64_t elems) const {
    const std::int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
    return lda % elems == 0 && ldb % elems == 0 && batch_stride_a % elems == 0 && batch_stride_b % elems == 0;
  }
};

Invocation invocation(const TensorSpec& a, const TensorSpec& b, const TensorSpec& c, bool trans_a, bool trans_b,
                      double alpha, double beta, bool tf32 = false);

class MatmulKernel final : public Kernel {
 public:
  std::string_view name() const override { return "matmul"; }
  std::string_view host_version() const override { return "matmul/1"; }
  std::vector<ArgDef> args() const override;
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  double tolerance(const Invocation& inv) const override;
  // 8 rows (over batch and m) x 8 columns of c.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // Sizes: m, n, k (required), batch (optional); options trans_a, trans_b, tf32.
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"m", "n", "k", "batch"}; }
  std::map<std::string, std::int64_t> example_sizes() const override { return {{"m", 1024}, {"n", 1024}, {"k", 1024}}; }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"m", 5}, {"n", 7}, {"k", 9}}; }
};

std::vector<ArgDef> matmul_args();

}  // namespace ejk::kernels::matmul
