#pragma once
// Linear attention with gated decays: recurrent (token by token), gla (chunked) and
// lightning_attention (gla with layer-dependent per-head decays), forward and backward
// (recurrent_bwd, gla_bwd, lightning_attention_bwd). The semantics every backend implements.
//
// Layout: q, k [batch, seq, heads, K]; v [batch, seq, heads, V]; one state S [K, V] per
// (sequence, head). Packed input (cu_seqlens i32 [num_seqs + 1] given): batch is 1 and sequence n
// is tokens cu_seqlens[n] .. cu_seqlens[n+1]-1, each with its own state.
//
// Per sequence and head, tokens in processing order (t = 0 .. L-1, or L-1 .. 0 when reverse):
//   S  = D_t (.) S + k_t^T v_t,      o_t = scale * q_t S
//   log D_t[i, j] = g[t] + g_gamma + gk[t, i] + gv[t, j]        (absent gates count 0)
// S starts as initial_state (or 0) and ends as final_state. Gates are log-decays:
//   g        [batch, seq, heads]       one per token and head
//   g_gamma  [heads]                   one per head, every token
//   gk       [batch, seq, heads, K]    per key channel: scales the state's rows
//   gv       [batch, seq, heads, V]    per value channel: scales the state's columns
// lightning_attention takes no gate arrays: its g_gamma comes from layer_idx, num_layers and
// heads (lightning_gamma below).
//
// Arguments. A fixed list per kernel; an absent optional array is a zero-element tensor of
// shape [0] (absent()), so which arrays are present shows in the invocation's signature. All
// float arrays share one dtype (f32, f16 or bf16); every kernel accumulates in f32.
//   recurrent, gla:           q k v g g_gamma gk gv initial_state cu_seqlens | o final_state
//   recurrent_bwd, gla_bwd:   q k v g g_gamma gk gv initial_state cu_seqlens do dht
//                             | dq dk dv dg dgk dgv dh0
//   lightning_attention:      q k v initial_state cu_seqlens | o final_state
//   lightning_attention_bwd:  q k v initial_state cu_seqlens do dht | dq dk dv dh0
// initial_state, final_state, dht, dh0: [num_seqs, heads, K, V] (num_seqs = batch when not
// packed). final_state absent: not returned. dht absent: the final state's gradient is 0. The
// backward's gradients of absent arrays are absent; g_gamma has no gradient (a constant).
//
// Options (static, in the key): reverse. Scalars (not in the key): scale (default 1/sqrt(K));
// lightning: layer_idx, num_layers, slopes ("linear" default, or "alibi").
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ejk/kernel.hpp"

namespace ejk::kernels::linear_attention {

enum class Variant : std::uint8_t { recurrent, gla, lightning };
inline constexpr Variant variants[] = {Variant::recurrent, Variant::gla, Variant::lightning};

// Argument positions of recurrent / gla (the full list); lightning's lists drop the four gate
// arrays (see to_full()).
namespace fwd {
constexpr std::size_t q = 0, k = 1, v = 2, g = 3, g_gamma = 4, gk = 5, gv = 6, initial_state = 7, cu_seqlens = 8, o = 9,
                      final_state = 10, count = 11;
}
namespace bwd {
constexpr std::size_t q = 0, k = 1, v = 2, g = 3, g_gamma = 4, gk = 5, gv = 6, initial_state = 7, cu_seqlens = 8,
                      dout = 9, dht = 10, dq = 11, dk = 12, dv = 13, dg = 14, dgk = 15, dgv = 16, dh0 = 17, count = 18;
}

std::string_view kernel_name(Variant v, bool backward);
std::vector<ArgDef> kernel_args(Variant v, bool backward);

TensorSpec absent();
inline bool is_absent(const TensorSpec& s) { return s.shape == Shape{0}; }

// Lightning's per-head log-decay.
//   "linear" (ejKernel's lightning_attn): g_gamma[h] = -(8 / heads) * (1 - layer_idx / num_layers) * h
//   "alibi"  (MiniMax-Text-01):           g_gamma[h] = -slope_h * (1 - layer_idx / (num_layers - 1) + 1e-5)
//            with slope_h ALiBi's geometric slopes (2^(-8/n) ratio, interleaved for heads not a
//            power of two).
std::vector<double> lightning_gamma(std::int64_t heads, std::int64_t layer_idx, std::int64_t num_layers,
                                    const std::string& slopes);

struct Problem {
  Variant variant = Variant::recurrent;
  bool backward = false;
  bool varlen = false;
  std::int64_t batch = 0, seq = 0, heads = 0, K = 0, V = 0;
  std::int64_t num_seqs = 0;  // states: batch, or cu_seqlens' entries - 1
  DType dtype = DType::f32;
  bool has_g = false, has_gamma = false, has_gk = false, has_gv = false;
  bool has_h0 = false, has_ht = false;  // initial_state; final_state (forward) or dht (backward)
  bool reverse = false;
  double scale = 0.0;
  // lightning
  std::int64_t layer_idx = 0, num_layers = 1;
  std::string slopes = "linear";

  static Problem of(const Invocation& inv);  // throws InvalidArgument naming the argument

  std::int64_t tokens() const { return batch * seq; }
  // The full (recurrent / gla) argument position of position i of this kernel's list.
  std::size_t full_index(std::size_t i) const;
  // The per-head log-decay constants actually applied (g_gamma's values, lightning's computed
  // ones), or empty when there is no constant decay. `args` in this kernel's list.
  std::vector<double> gamma(const HostArrays& args) const;
};

Invocation make_invocation(Variant v, bool backward, std::span<const TensorSpec> args, bool reverse, double scale,
                           std::int64_t layer_idx = 0, std::int64_t num_layers = 1, const std::string& slopes = "linear");

// Per-sequence token ranges [start, start + len) in the flattened [batch * seq] token index;
// packed offsets are checked here (start at 0, never decrease, end at the token count).
struct Sequences {
  std::vector<std::int64_t> start, len;
};
Sequences sequences(const Problem& p, std::span<const std::int64_t> cu_seqlens);

// Double-precision token loops, a (sequence, head) at a time: the forward, and the backward by
// reverse-mode differentiation of the same loop (every state kept). `full_args` in the full
// (recurrent / gla) positions; the outputs in the kernel's own list's order.
HostArrays reference_forward(const Problem& p, const HostArrays& full_args, std::span<const double> gamma);
HostArrays reference_backward(const Problem& p, const HostArrays& full_args, std::span<const double> gamma);

std::vector<std::string> recipe_sizes();

class LinearAttentionKernel final : public Kernel {
 public:
  LinearAttentionKernel(Variant v, bool backward) : variant_(v), backward_(backward) {}
  std::string_view name() const override { return kernel_name(variant_, backward_); }
  std::string_view host_version() const override;
  std::vector<ArgDef> args() const override { return kernel_args(variant_, backward_); }
  void check(const Invocation& inv) const override;
  Vars vars(const Invocation& inv) const override;
  // The chunked form's count for gla (intra-chunk products at chunk 64 plus state passing);
  // the token loop's for recurrent. Backward: three such passes.
  double flops(const Invocation& inv) const override;
  double bytes(const Invocation& inv) const override;
  HostArrays reference(const Invocation& inv, const HostArrays& args) const override;
  // 4 (sequence, head) pairs (2 backward) spread over both, each's loop run whole from its
  // rows of every input and its states: 8 token rows of each per-token output, and the pair's
  // final_state or dh0.
  std::vector<SampledOutput> sampled_reference(const Invocation& inv, const ArgReader& read) const override;
  double tolerance(const Invocation& inv) const override;
  // q, k, v, do, states uniform in [-1, 1); gates log-decays uniform in [-0.3, -0.01);
  // packed offsets split the tokens into uneven sequences.
  std::vector<Fill> fills(const Invocation& inv, std::uint64_t seed) const override;
  // Sizes batch, seq, heads, K (head_dim), V (default K); options gates (list of "g",
  // "g_gamma", "gk", "gv"; gla/recurrent), initial_state, final_state/dht (bools), reverse,
  // scale, layer_idx, num_layers, slopes (lightning).
  Invocation from_sizes(const std::map<std::string, std::int64_t>& sizes, DType dtype,
                        const nlohmann::json& options) const override;
  std::vector<std::string> size_names() const override { return recipe_sizes(); }
  std::map<std::string, std::int64_t> example_sizes() const override {
    return {{"batch", 1}, {"seq", 4096}, {"heads", 8}, {"head_dim", 128}};
  }

  std::map<std::string, std::int64_t> smallest_sizes() const override { return {{"seq", 9}, {"heads", 2}, {"head_dim", 8}}; }
 private:
  Variant variant_;
  bool backward_;
};

// Gradients are checked with this multiple of the forward tolerance: the gate gradients are
// sums of terms that cancel.
constexpr double gradient_tolerance_factor = 8.0;

}  // namespace ejk::kernels::linear_attention
