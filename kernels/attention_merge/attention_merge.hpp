#pragma once
// attention_merge: the semantics every backend implements.
//
// Merges a partial attention result computed over another set of keys into an accumulator, in
// place, by log-sum-exp (FlashInfer's merge_state_in_place). Arguments, in this order:
//   out      inout  [batch, seq, heads, head_dim]  f32, f16 or bf16: the accumulator
//   lse      inout  f32 [batch, heads, seq]          its log-sum-exp (flash_attention's layout)
//   part     in     [batch, seq, heads, head_dim]  f32, f16 or bf16 (may differ from out's)
//   part_lse in     f32 [batch, heads, seq]          its log-sum-exp
// Packed variable-length input is the same thing with batch 1: out and part [total, heads,
// head_dim], lse and part_lse [heads, total].
//
// Per row (b, s, h), with a = lse, c = part_lse and all arithmetic in f32:
//   c = -inf, a = -inf  out row = 0 (a row that sees no key), lse stays -inf;
//   c = -inf, a finite  out and lse unchanged (the row is not written);
//   a = -inf, c finite  out row = part row (rounded to out's dtype), lse = c; out's old values
//                       are never read, so out may start as uninitialised memory;
//   both finite         m = max(a, c) + log1p(exp(-|a - c|)),
//                       out = out * exp(a - m) + part * exp(c - m), lse = m.
// Merging an f32 (acc, acc_lse) into an uninitialised f16 out whose lse is all -inf therefore
// gives acc rounded to f16 with the same lse: the kernel doubles as a dtype conversion.
// No options and no scalars.
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::attention_merge {

namespace arg {
constexpr std::size_t out = 0, lse = 1, part = 2, part_lse = 3, count = 4;
}

struct Problem {
  bool packed = false;
  std::int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  DType out_dtype = DType::f32, part_dtype = DType::f32;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument
  std::int64_t rows() const { return batch * seq * heads; }
  // Row r = (b * seq + s) * heads + h of out/part keeps its log-sum-exp at (b * heads + h) * seq + s.
  std::int64_t lse_index(std::int64_t r) const {
    const std::int64_t h = r % heads, bs = r / heads;
    return (bs / seq * heads + h) * seq + bs % seq;
  }
};

Invocation invocation(const TensorSpec& out, const TensorSpec& lse, const TensorSpec& part, const TensorSpec& part_lse);

// One row's merge in f32, as every backend computes it: out = out * wa + part * wc, where wa == 0
// means out is not read and wc == 0 that part is not read; wa < 0 means the row is left as it
// is. lse is the row's new log-sum-exp.
struct Weights {
  float wa, wc, lse;
};
inline Weights merge_weights(float a, float c) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  if (c == ninf) return {a == ninf ? 0.f : -1.f, 0.f, a};
  if (a == ninf) return {0.f, 1.f, c};
  const float m = std::max(a, c) + std::log1p(std::exp(-std::abs(a - c)));
  return {std::exp(a - m), std::exp(c - m), m};
}

class AttentionMergeKernel : public Kernel {
 public:
  std::string_view name() const override { return "attention_merge"; }
  std::string_view host_version() const override { return "attention_merge/1"; }
  std::vector<ArgDef> args() const override;
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // Two multiplies and an add per element.
  double flops(const Invocation& inv) const override;
  // out read and written, part read, lse read and written, part_lse read.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // out's dtype's (the sum of two terms rounds once to it).
  double tolerance(const Invocation& inv) const override;
  // 32 rows spread over batch, sequence and heads: their out rows and lse.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // Floats uniform in [-1, 1); log-sum-exps uniform in [-4, 4) with about one row in eight -inf
  // in lse, in part_lse, and in both.
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes batch (1), seq, heads, head_dim; options packed (bool: out [batch * seq, heads,
  // head_dim]) and part_dtype (f32 | f16 | bf16, default the workload's dtype).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"seq", "heads", "head_dim", "batch"}; }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 4}, {"seq", 4096}, {"heads", 32}, {"head_dim", 128}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 5}, {"heads", 2}, {"head_dim", 16}}; }
};

}  // namespace ejk::kernels::attention_merge
