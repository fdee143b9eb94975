#pragma once
// Linear attention with gated decays of the C++ API, through the context's executor:
// recurrent (token by token), gla (chunked), lightning_attention (gla with layer-dependent
// per-head decays), forward and backward. Semantics in
// kernels/linear_attention/linear_attention.hpp and docs/kernels/linear_attention.md.
//
//   auto [o, state] = ejk::gla(ctx, q, k, v, {.gk = gk, .return_state = true});
//   auto g = ejk::gla_bwd(ctx, q, k, v, dout, {.gk = gk});
//   auto [o2, s2] = ejk::lightning_attention(ctx, q, k, v, {.layer_idx = 3, .num_layers = 24});
#include <cstdint>
#include <optional>
#include <string>

#include "ejk/config.hpp"
#include "ejk/context.hpp"
#include "ejk/export.hpp"
#include "ejk/tensor.hpp"

namespace ejk {

struct LinearAttentionOptions {
  std::optional<double> scale{};  // default 1 / sqrt(K)
  // Log-decays; an undefined Tensor is absent. Ignored by lightning_attention, which must get none.
  Tensor g{};        // [batch, seq, heads]
  Tensor g_gamma{};  // [heads]
  Tensor gk{};       // [batch, seq, heads, K]
  Tensor gv{};       // [batch, seq, heads, V]
  Tensor initial_state{};  // [num_seqs, heads, K, V]
  Tensor cu_seqlens{};     // i32 [num_seqs + 1]: packed sequences (batch 1)
  bool reverse = false;    // run each sequence from its end
  bool return_state = false;
  // lightning_attention: g_gamma from the layer (see lightning_gamma in the kernel header).
  std::int64_t layer_idx = 0, num_layers = 1;
  std::string slopes = "linear";  // or "alibi"
  std::optional<Config> config{};  // override the selector chain
};

struct LinearAttentionResult {
  Tensor o;            // [batch, seq, heads, V]
  Tensor final_state;  // [num_seqs, heads, K, V]; undefined unless return_state
};

// Gradients of the arrays given; those of absent arrays are undefined.
struct LinearAttentionGrads {
  Tensor dq, dk, dv, dg, dgk, dgv, dh0;
};

EJK_API LinearAttentionResult recurrent(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                        const LinearAttentionOptions& options = {});
EJK_API LinearAttentionResult gla(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                  const LinearAttentionOptions& options = {});
EJK_API LinearAttentionResult lightning_attention(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                                  const LinearAttentionOptions& options = {});

// dout [batch, seq, heads, V]; dht (optional) the final state's gradient.
EJK_API LinearAttentionGrads recurrent_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& dout, const LinearAttentionOptions& options = {},
                                           const Tensor& dht = {});
EJK_API LinearAttentionGrads gla_bwd(const Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& dout, const LinearAttentionOptions& options = {},
                                     const Tensor& dht = {});
EJK_API LinearAttentionGrads lightning_attention_bwd(const Context& ctx, const Tensor& q, const Tensor& k,
                                                     const Tensor& v, const Tensor& dout,
                                                     const LinearAttentionOptions& options = {},
                                                     const Tensor& dht = {});

}  // namespace ejk
