#pragma once
// add: the semantics every backend implements.
//
// out = a + alpha * b, elementwise. Arguments, in this order:
//   a    in   any shape, f32, f16 or bf16
//   b    in   a's shape, f32, f16 or bf16
//   out  out  a's shape, f32, f16 or bf16
// The three dtypes are independent. Scalar alpha (default 1, finite as an f32). Every element
// is computed in f32 (alpha rounded to f32) and rounded once to out's dtype. When alpha == 0
// (either sign) b is never read: add(a, a, out, 0) is a copy or dtype conversion, and b's NaNs
// do not leak. out may be the same tensor as a (an in-place accumulate, acc += alpha * x) or as
// b: every element is read before it is written, by the same work-item. No options.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::add {

namespace arg {
constexpr std::size_t a = 0, b = 1, out = 2, count = 3;
}

struct Problem {
  std::int64_t numel = 0;
  double alpha = 1.0;
  DType a_dtype = DType::f32, b_dtype = DType::f32, out_dtype = DType::f32;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument
  bool reads_b() const { return alpha != 0.0; }
};

Invocation invocation(const TensorSpec& a, const TensorSpec& b, const TensorSpec& out, double alpha);

class AddKernel : public Kernel {
 public:
  std::string_view name() const override { return "add"; }
  std::string_view host_version() const override { return "add/1"; }
  std::vector<ArgDef> args() const override;
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // A multiply and an add per element (none when alpha is 0).
  double flops(const Invocation& inv) const override;
  // a read, b read (unless alpha is 0), out written.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 64 elements spread over the whole tensor.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // out's dtype's (the f32 sum rounds once to it).
  double tolerance(const Invocation& inv) const override;
  // Size n (elements, a 1-D tensor); options a_dtype and b_dtype (f32 | f16 | bf16, default the
  // workload's dtype, which is out's).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"n"}; }
  std::map<std::string, std::int64_t> example_sizes() const override { return {{"n", 64 << 20}}; }
  // Not a multiple of 4 (the vector width): the tail runs too.
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"n", 1003}}; }
};

}  // namespace ejk::kernels::add
