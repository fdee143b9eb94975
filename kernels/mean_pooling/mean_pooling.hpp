#pragma once
// mean_pooling and mean_pooling_bwd: the semantics every backend implements.
//
// Layouts (one float dtype for x / out / dout / dx: f32, f16 or bf16; f32 accumulation):
//   padded  x [batch, seq, dim]                      -> out [batch, dim], cu_seqlens absent ([0])
//   packed  x [tokens, dim], cu_seqlens i32 [num_seqs + 1] (0, prefix sums, tokens)
//                                                    -> out [num_seqs, dim]
// Forward  (mean_pooling):     x cu_seqlens | out
//   out[s, c] = (1 / len_s) * sum_{t in s} x[t, c]; a sequence of length 0 gives 0.
// Backward (mean_pooling_bwd): dout cu_seqlens | dx   (dx has x's shape)
//   dx[t, c] = dout[s, c] / len_s for the sequence s that holds token t.
// Sequence s holds tokens s*seq .. s*seq+seq-1 (padded) or cu_seqlens[s] .. cu_seqlens[s+1]-1.
// No options and no scalars. Device kernels cannot report bad offsets: the reference and the CPU
// check cu_seqlens (start 0, non-decreasing, end at tokens), the C++ API reads it back first;
// the device kernels clamp the offsets to the token array.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::mean_pooling {

// Argument positions, the same for both kernels: the pooled side's input, the offsets, the output.
namespace arg {
constexpr std::size_t in = 0, cu_seqlens = 1, out = 2, count = 3;
}

enum class Direction { forward, backward };

struct Problem {
  Direction dir = Direction::forward;
  bool packed = false;
  std::int64_t segs = 0;    // batch or num_seqs: rows of the pooled array
  std::int64_t seq = 0;     // padded: tokens per sequence
  std::int64_t tokens = 0;  // rows of the token array
  std::int64_t dim = 0;
  DType dtype = DType::f32;

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument
  // Longest sequence the shapes allow (padded: seq; packed: tokens).
  std::int64_t longest() const { return packed ? tokens : seq; }
};

// The placeholder of absent cu_seqlens.
TensorSpec absent();

Invocation invocation(Direction dir, const TensorSpec& in, const TensorSpec& cu_seqlens, const TensorSpec& out);

// Offsets of every sequence, checked against the token count (packed), or made from seq (padded).
std::vector<std::int64_t> offsets(const Problem& p, std::span<const double> cu_seqlens);

class MeanPoolingKernel : public Kernel {
 public:
  explicit MeanPoolingKernel(Direction dir = Direction::forward) : dir_(dir) {}
  std::string_view name() const override { return dir_ == Direction::forward ? "mean_pooling" : "mean_pooling_bwd"; }
  std::string_view host_version() const override { return dir_ == Direction::forward ? "mean_pooling/1" : "mean_pooling_bwd/1"; }
  std::vector<ArgDef> args() const override;
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // One add per token element (forward), one multiply per token element (backward).
  double flops(const Invocation& inv) const override;
  // The token array once, the pooled array once and the offsets.
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  double tolerance(const Invocation& inv) const override;
  // Forward: 8 sequences, 8 columns each, their tokens streamed; backward: 8 token rows.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  // Floats uniform in [-1, 1); packed offsets split the tokens at random points (empty
  // sequences included where there are more sequences than tokens allow otherwise).
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes batch, seq, dim; option packed (bool): tokens = batch * seq in batch sequences of
  // random lengths.
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return {"batch", "seq", "dim"}; }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 32}, {"seq", 512}, {"dim", 1024}};
  }

  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"batch", 2}, {"seq", 7}, {"dim", 8}}; }
 private:
  Direction dir_;
};

// The split of one sequence among `splits` parts that every backend uses: part q covers
// [start + q * chunk, min(start + (q + 1) * chunk, end)).
inline std::int64_t split_chunk(std::int64_t len, std::int64_t splits) { return (len + splits - 1) / splits; }

}  // namespace ejk::kernels::mean_pooling
