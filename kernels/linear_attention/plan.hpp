#pragma once
// How every backend computes the linear-attention kernels: passes of one engine, the gated
// linear recurrence with its roles assigned, plus (backward) one gate-gradient pass.
//
// An engine pass, per sequence and head, over positions in its own processing order:
//   S = D (.) S + kv_scale * key_t^T value_t,    out_t = out_scale * query_t S
//   log D[r, c] = g + g_gamma + row_gate[r] + col_gate[c]  read at token t + shift (0 outside
//   the sequence), S [R, C] starting from `init` (0 when none) and stored to `final`.
// `transposed` passes see the problem's [K, V] states as [V, K]. The token kernel (recurrent)
// and the chunked kernel (gla, lightning) implement the same pass; the backward is:
//   o  (only with gv)  the forward itself, o kept in f32
//   dq = pass(query do, key v, value k, rows gv, cols gk, init h0^T, final S_T^T)     same order
//   dk = pass(query v, key do, value q, rows gv, cols gk, init dht^T, kv_scale scale) reversed,
//   dv = pass(query k, key q, value do, rows gk, cols gv, init dht, final dS_0)       gates shifted
// with dq, dk, dv kept in f32, then the gate pass (per sequence and head): dq, dk, dv stored in
// the dtype; dh0 = D_first (.) dS_0; and the gate gradients by the reverse-cumulative identity
// (later-processed tokens u >= t, F the final state's term):
//   dgk_t = sum_j dht (.) S_T + sum_{u >= t} (q_u dq_u - k_u dk_u)
//   dgv_t = sum_i dht (.) S_T + sum_{u >= t} (o_u do_u - v_u dv_u)
//   dg_t  = sum_ij dht (.) S_T + sum_{u >= t} sum_i (q_u dq_u - k_u dk_u)
#include <cstdint>
#include <vector>

#include "linear_attention/linear_attention.hpp"

namespace ejk::kernels::linear_attention {

// Buffers a pass reads or writes: the kernel's arrays, and f32 scratch of the backward.
enum class Slot : std::uint8_t {
  none, q, k, v, dout, gk, gv, h0, ht,          // inputs (ht: dht)
  o, final_state,                               // forward outputs
  o32, dq32, dk32, dv32, st32, ds032            // f32 scratch: o, dq, dk, dv, S_T, dS_0
};

struct Pass {
  Slot query = Slot::q, key = Slot::k, value = Slot::v;
  std::int64_t R = 0, C = 0;  // widths of query/key and of value
  Slot row_gate = Slot::none, col_gate = Slot::none;
  Slot init = Slot::none, final = Slot::none;
  bool transposed = false;
  Slot out = Slot::o;
  double out_scale = 1.0, kv_scale = 1.0;
  int shift = 0;
  bool reverse = false;
};

inline bool is_scratch(Slot s) { return s >= Slot::o32; }

inline std::vector<Pass> plan(const Problem& p) {
  const Slot gk = p.has_gk ? Slot::gk : Slot::none, gv = p.has_gv ? Slot::gv : Slot::none;
  const Slot h0 = p.has_h0 ? Slot::h0 : Slot::none, ht = p.has_ht ? Slot::ht : Slot::none;
  if (!p.backward)
    return {Pass{Slot::q, Slot::k, Slot::v, p.K, p.V, gk, gv, h0, p.has_ht ? Slot::final_state : Slot::none, false,
                 Slot::o, p.scale, 1.0, 0, p.reverse}};
  std::vector<Pass> passes;
  if (p.has_gv)
    passes.push_back({Slot::q, Slot::k, Slot::v, p.K, p.V, gk, gv, h0, Slot::none, false, Slot::o32, p.scale, 1.0, 0,
                      p.reverse});
  const int shift = p.reverse ? -1 : 1;
  passes.push_back({Slot::dout, Slot::v, Slot::k, p.V, p.K, gv, gk, h0, p.has_ht ? Slot::st32 : Slot::none, true,
                    Slot::dq32, p.scale, 1.0, 0, p.reverse});
  passes.push_back({Slot::v, Slot::dout, Slot::q, p.V, p.K, gv, gk, ht, Slot::none, true, Slot::dk32, 1.0, p.scale,
                    shift, !p.reverse});
  passes.push_back({Slot::k, Slot::q, Slot::dout, p.K, p.V, gk, gv, ht, p.has_h0 ? Slot::ds032 : Slot::none, false,
                    Slot::dv32, 1.0, p.scale, shift, !p.reverse});
  return passes;
}

}  // namespace ejk::kernels::linear_attention
