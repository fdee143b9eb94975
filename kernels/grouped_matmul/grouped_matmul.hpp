#pragma once
// grouped_matmul and grouped_matmul_tgmm (mixture of experts): the semantics every backend
// implements.
//
// The rows of lhs [m, k] are grouped contiguously: group g holds rows off_g .. off_g + size_g - 1
// with size_g = group_sizes[g] >= 0, off_g the sum of the sizes before it, and the sizes sum to m.
//   grouped_matmul       lhs [m, k], rhs [groups, k, n] (option trans_rhs: [groups, n, k]),
//                        group_sizes i32 [groups] | out [m, n]
//                        out[r] = lhs[r] . op(rhs[g])  for every row r of group g
//   grouped_matmul_tgmm  lhs [m, k], grad [m, n], group_sizes i32 [groups] | out [groups, k, n]
//                        out[g] = lhs_g^T . grad_g  (the rows of group g; 0 for an empty group)
// Gradients of out = grouped_matmul(lhs, rhs): d lhs = grouped_matmul(d out, rhs) with trans_rhs
// flipped; d rhs = grouped_matmul_tgmm(lhs, d out) (trans_rhs: grouped_matmul_tgmm(d out, lhs)).
// One float dtype for every float argument (f32, f16, bf16), f32 accumulation. Device kernels
// cannot report bad sizes: the reference and the CPU check them, the C++ API reads them back
// first; the device kernels clamp them so that nothing is written outside out.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::grouped_matmul {

// Argument positions of both kernels: lhs, rhs (grouped_matmul) or grad (tgmm), group_sizes, out.
namespace arg {
constexpr std::size_t lhs = 0, rhs = 1, group_sizes = 2, out = 3, count = 4;
}

enum class Mode { gmm, tgmm };

struct Problem {
  Mode mode = Mode::gmm;
  std::int64_t m = 0, k = 0, n = 0, groups = 0;
  bool trans_rhs = false;
  DType dtype = DType::f32;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument
};

Invocation invocation(Mode mode, const TensorSpec& lhs, const TensorSpec& rhs, const TensorSpec& group_sizes,
                      const TensorSpec& out, bool trans_rhs = false);

// Group offsets (groups + 1 of them); throws InvalidArgument for a negative size or sizes that
// do not sum to m.
std::vector<std::int64_t> group_offsets(const Problem& p, std::span<const std::int64_t> sizes);

class GroupedMatmulKernel : public Kernel {
 public:
  explicit GroupedMatmulKernel(Mode mode = Mode::gmm) : mode_(mode) {}
  std::string_view name() const override { return mode_ == Mode::gmm ? "grouped_matmul" : "grouped_matmul_tgmm"; }
  std::string_view host_version() const override { return mode_ == Mode::gmm ? "grouped_matmul/1" : "grouped_matmul_tgmm/1"; }
  std::vector<ArgDef> args() const override;
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  double flops(const Invocation& inv) const override;  // 2 m k n
  double bytes(const Invocation& inv) const override;  // every operand once
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 8 rows x 8 columns of out: grouped_matmul's rows spread over m (so over the groups), read
  // with their rows of lhs and their groups' columns of op(rhs); tgmm's rows spread over groups
  // and k, read with the groups' rows of lhs and grad, a stretch at a time.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Floats uniform in [-1, 1); group sizes a random split of m (empty groups possible).
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes m, k, n, groups; option trans_rhs (grouped_matmul).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"m", "k", "n", "groups"}; }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"m", 8192}, {"k", 2048}, {"n", 1408}, {"groups", 8}};
  }

  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"m", 9}, {"k", 8}, {"n", 7}, {"groups", 3}}; }
 private:
  Mode mode_;
};

}  // namespace ejk::kernels::grouped_matmul
