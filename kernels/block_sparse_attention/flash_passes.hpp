#pragma once
// block_sparse_attention on flash attention's OpenCL and Vulkan passes. The layout's semantics
// (causal diagonal bottom-right aligned, segment ids, soft cap, empty rows) are flash
// attention's restricted to the live blocks, so rather than a second copy of those passes the
// passes walk the block lists (flash_attention_common.cl's and flash_attention.glsl's SPARSE
// programs) and keep every fast path they have: NVIDIA tensor cores through mma.sync on OpenCL,
// cooperative matrices for the Vulkan forward. Their tiles must divide the layout's blocks, so a
// tile is live or skipped whole; layouts with smaller blocks run this kernel's own tile kernels
// (variant "tiles"). This header turns a block_sparse_attention problem into the passes' problem,
// arguments and lists, and names the passes' scalar tile tile_q x tile_k in this kernel's spaces,
// where block_q and block_k are the layout's.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "block_sparse_attention/block_sparse_attention.hpp"
#include "ejk/space.hpp"
#include "flash_attention/flash_attention.hpp"
#include "flash_attention/program.hpp"

namespace ejk::kernels::block_sparse_attention {

inline const flash_attention::TileNames flash_tile_names{"tile_q", "tile_k"};

// A config's variant: "tiles" (this kernel's own kernels; configs from before variants had no
// other), or one of flash attention's passes ("scalar", "mma", "coopmat").
inline std::string variant_of(const Config& c) { return c.has("variant") ? c.text("variant") : "tiles"; }

inline flash_attention::Problem flash_problem(const Problem& p) {
  flash_attention::Problem f;
  f.backward = p.backward;
  f.batch = p.batch;
  f.seq_q = p.seq_q;
  f.seq_k = p.seq_k;
  f.total_q = p.batch * p.seq_q;
  f.total_k = p.batch * p.seq_k;
  f.heads = p.heads;
  f.kv_heads = p.kv_heads;
  f.head_dim = p.head_dim;
  f.dtype = p.dtype;
  f.has_segments = p.has_segments;
  f.causal = p.causal;
  f.softcap = p.softcap;
  f.scale = p.scale;
  return f;
}

// The passes' arguments (flash attention's fwd:: / bwd:: order) from this kernel's; the arrays
// flash attention has and this kernel has not (bias, sinks, packed offsets and their gradients)
// are never read or written without their flags, and take q's place.
inline std::vector<Tensor> flash_args(const Problem& p, std::span<const Tensor> a) {
  namespace ff = flash_attention::fwd;
  namespace fb = flash_attention::bwd;
  if (!p.backward) {
    std::vector<Tensor> r(ff::count, a[fwd::q]);
    r[ff::k] = a[fwd::k];
    r[ff::v] = a[fwd::v];
    r[ff::q_segment_ids] = a[fwd::q_segment_ids];
    r[ff::kv_segment_ids] = a[fwd::kv_segment_ids];
    r[ff::out] = a[fwd::out];
    r[ff::lse] = a[fwd::lse];
    return r;
  }
  std::vector<Tensor> r(fb::count, a[bwd::q]);
  for (auto [from, to] : {std::pair{bwd::k, fb::k}, {bwd::v, fb::v}, {bwd::out, fb::out}, {bwd::dout, fb::dout},
                          {bwd::lse, fb::lse}, {bwd::q_segment_ids, fb::q_segment_ids},
                          {bwd::kv_segment_ids, fb::kv_segment_ids}, {bwd::dq, fb::dq}, {bwd::dk, fb::dk},
                          {bwd::dv, fb::dv}})
    r[to] = a[from];
  return r;
}

inline flash_attention::BlockLists flash_lists(const Problem& p, std::span<const Tensor> a) {
  // lb is 1 or batch, lh 1 or heads.
  flash_attention::BlockLists l{.block_q = p.block_q, .block_k = p.block_k, .per_batch = p.lb > 1, .per_head = p.lh > 1};
  if (!p.backward) {
    l.kv_counts = &a[fwd::kv_block_counts];
    l.kv_indices = &a[fwd::kv_block_indices];
  } else {
    l.kv_counts = &a[bwd::kv_block_counts];
    l.kv_indices = &a[bwd::kv_block_indices];
    l.q_counts = &a[bwd::q_block_counts];
    l.q_indices = &a[bwd::q_block_indices];
  }
  return l;
}

// A backend's flash attention passes (opencl_forward / opencl_backward, vulkan_...).
using FlashPass = void (*)(const flash_attention::Problem&, const Config&, std::span<const Tensor>, Device&,
                           const flash_attention::BlockLists*);

// Runs a backend's flash attention passes over the layout when the config names them; false for
// "tiles".
inline bool run_passes(const Problem& p, const Config& config, std::span<const Tensor> args, Device& device,
                       FlashPass forward, FlashPass backward) {
  if (variant_of(config) == "tiles") return false;
  const auto lists = flash_lists(p, args);
  const auto fargs = flash_args(p, args);
  const Config c = flash_attention::renamed_config(config, flash_tile_names);
  (p.backward ? backward : forward)(flash_problem(p), c, fargs, device, &lists);
  return true;
}

// The passes walk the layout only with tiles that divide its blocks: for each pass, its query
// tile divides block_q and its key tile block_k. A variant the space lacks adds nothing.
inline void add_layout_constraints(ParamSpace& s, bool backward) {
  auto has = [&](const char* name) {
    return std::any_of(s.params().begin(), s.params().end(), [&](const Param& p) { return p.name == name; });
  };
  s.constraint("block_q % " + flash_tile_names.q + " == 0 && block_k % " + flash_tile_names.k + " == 0");
  if (has("mma_warps")) {
    s.constraint("block_k % mma_block_k == 0");
    // Forward: 16 mma_warps mma_tiles query rows; backward: dq 16 mma_warps query rows, dk/dv
    // 16 mma_warps keys over mma_block_q queries.
    if (!backward) s.constraint("block_q % (16 * mma_warps * mma_tiles) == 0");
    else s.constraint("block_q % (16 * mma_warps) == 0 && block_k % (16 * mma_warps) == 0 && block_q % mma_block_q == 0");
  }
  // Cooperative matrices: forward 16 subgroups query rows over coop_block_k keys; backward dk/dv
  // 16 subgroups keys over coop_block_q queries, dq 16 subgroups query rows over coop_block_k keys.
  if (has("subgroups")) {
    if (!backward) s.constraint("block_q % (16 * subgroups) == 0 && block_k % coop_block_k == 0");
    else
      s.constraint("block_q % (16 * subgroups) == 0 && block_k % (16 * subgroups) == 0 && block_q % coop_block_q == 0 && "
                   "block_k % coop_block_k == 0");
  }
}

}  // namespace ejk::kernels::block_sparse_attention
