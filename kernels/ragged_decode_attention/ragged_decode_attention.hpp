#pragma once
// ragged_decode_attention: one query token per sequence over a contiguous KV array, each
// sequence attending its own key range (ejKernel's ragged decode attention), run by the split-K
// decode engine (decode_attention/engine.hpp).
//
// Arguments: query [batch, heads, head_dim]; key, value [batch, seq, kv_heads, head_dim] (query's
// dtype: f32, f16 or bf16); sequence_start, sequence_end i32 [batch]; softmax_aux [heads] (any
// float dtype: one sink logit per head that joins the softmax denominator with no value) or [0]
// when absent | out [batch, heads, head_dim] (query's dtype).
// Sequence b attends keys t with sequence_start[b] <= t < sequence_end[b] (0 <= start <= end <=
// seq); its query sits at position end - 1, so a sliding window W > 0 keeps only t >= end - W.
// kv_heads divides heads (GQA; MQA with 1). An empty range gives out 0.
//
// Options (static, in the key): sliding_window (0: off), logits_soft_cap (0: off).
// Scalars: softmax_scale (default 1/sqrt(head_dim)).
#include <map>
#include <span>
#include <string>
#include <vector>

#include "decode_attention/engine.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::ragged_decode_attention {

namespace arg {
constexpr int query = 0, key = 1, value = 2, sequence_start = 3, sequence_end = 4, softmax_aux = 5, out = 6, count = 7;
}

std::vector<ArgDef> args();
// The placeholder of an absent softmax_aux.
TensorSpec absent();

struct Options {
  std::int64_t sliding_window = 0;
  double logits_soft_cap = 0.0;
  double softmax_scale = 0.0;  // 0: 1/sqrt(head_dim)
};

Invocation invocation(std::span<const TensorSpec> args, const Options& o);

// Validates an invocation (shapes, dtypes, options) into the engine's terms.
decode_attention::Engine engine(const Invocation& inv);

class RaggedDecodeAttentionKernel final : public Kernel {
 public:
  std::string_view name() const override { return "ragged_decode_attention"; }
  std::string_view host_version() const override { return "ragged_decode_attention/1"; }
  std::vector<ArgDef> args() const override { return ragged_decode_attention::args(); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // Every sequence taken to attend its whole row of seq keys (a window caps it).
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // Floats uniform in [-1, 1); every range the whole row [0, seq).
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes batch, heads, head_dim, seq; optional kv_heads (heads). Options sliding_window,
  // logits_soft_cap, softmax_scale, sinks (bool).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"batch", "heads", "head_dim", "seq", "kv_heads"}; }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 8}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}, {"seq", 4096}};
  }
  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 2}, {"heads", 2}, {"kv_heads", 1}, {"head_dim", 16}, {"seq", 9}}; }
};

}  // namespace ejk::kernels::ragged_decode_attention
