#pragma once
// The tile geometry the OpenCL and Vulkan implementations share: their parameter space,
// heuristic, the config check, and the Params block both programs read. The space's variant
// "tiles" is this kernel's own kernels; the others flash attention's passes walking the layout
// (flash_passes.hpp), which the backend adds.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "block_sparse_attention/block_sparse_attention.hpp"
#include "block_sparse_attention/flash_passes.hpp"
#include "ejk/error.hpp"

namespace ejk::kernels::block_sparse_attention {

// block_m: queries per tile (the forward's work-items per group, one query row each);
// block_n: keys per tile (staged in local memory). The backward has a pair for each pass:
// block_m, block_n for dk/dv (block_n work-items per group, a key row each; block_m queries
// staged) and dq_block_m, dq_block_n for dq (the forward's geometry).
struct Tile {
  std::int64_t bm = 0, bn = 0;
};

// The tile named by `prefix` ("" or "dq_") in config.
inline Tile read_tile(const Problem& p, const Config& config, const std::string& who, const std::string& prefix = "") {
  const Tile t{config.get(prefix + "block_m"), config.get(prefix + "block_n")};
  auto pow2 = [](std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; };
  if (!pow2(t.bm) || !pow2(t.bn) || p.block_q % t.bm != 0 || p.block_k % t.bn != 0)
    throw InvalidArgument(who + ": config " + config.canonical() + " needs powers of two " + prefix +
                          "block_m dividing block_q " + std::to_string(p.block_q) + " and " + prefix +
                          "block_n dividing block_k " + std::to_string(p.block_k));
  return t;
}

// `passes` declares "variant" with "tiles" first, then flash attention's passes and their
// parameters.
inline ParamSpace device_space(bool backward, Vars vars, const DeviceInfo& dev,
                               const std::function<void(ParamSpace&)>& passes) {
  ParamSpace s;
  passes(s);
  add_layout_constraints(s, backward);
  const std::vector<Value> rows{1, 2, 4, 8, 16, 32, 64, 128}, keys{1, 2, 4, 8, 16, 32, 64};
  const char* const tiles = "variant == \"tiles\"";
  // A kernel tile lies within one block of the layout, so a tile is live or skipped whole.
  auto query_pass = [&](const std::string& m, const std::string& n) {
    s.param(m, rows, tiles).param(n, keys, tiles);
    s.constraint("block_q % " + m + " == 0").constraint("block_k % " + n + " == 0");
    // A group of block_m work-items; staged keys and values (and their segment ids) in f32.
    s.constraint(m + " <= max_workgroup_size").constraint("(2 * " + n + " * head_dim + " + n + ") * 4 <= local_mem");
  };
  if (!backward) {
    query_pass("block_m", "block_n");
  } else {
    query_pass("dq_block_m", "dq_block_n");
    s.param("block_m", rows, tiles).param("block_n", keys, tiles);
    s.constraint("block_q % block_m == 0").constraint("block_k % block_n == 0");
    // dk/dv: a group of block_n work-items; staged queries, dout, lse, D and segment ids.
    s.constraint("block_n <= max_workgroup_size").constraint("(2 * block_m * head_dim + 3 * block_m) * 4 <= local_mem");
  }
  s.bind(std::move(vars)).bind(device_vars(dev));
  return s;
}

// The first of flash attention's candidate configs (`passes`) that the space admits: the layout
// walked by the passes, on tensor cores where they are offered. Otherwise this kernel's tiles:
// on GPUs wide groups (a query row per work-item) and key tiles of 16 to 32 rows; on CPU drivers
// narrower groups, which they vectorise across work-items.
inline Config device_heuristic(const ParamSpace& s, const Invocation& inv, bool cpu, bool backward,
                               const std::vector<Config>& passes) {
  for (const Config& c : passes)
    if (s.admits(c)) return c;
  static const std::vector<std::pair<std::int64_t, std::int64_t>> gpu = {{64, 32}, {64, 16}, {32, 32}, {32, 16},
                                                                       {16, 16}, {16, 8},  {8, 8},   {4, 4}};
  static const std::vector<std::pair<std::int64_t, std::int64_t>> host = {{16, 32}, {16, 16}, {32, 16}, {8, 16},
                                                                        {8, 8},   {4, 8},   {4, 4}};
  const Value tiles = std::string("tiles");
  for (const auto& [bm, bn] : cpu ? host : gpu) {
    Config c{{"variant", tiles}, {"block_m", bm}, {"block_n", bn}};
    if (backward) {
      // dk/dv: block_n work-items, so the pair swaps roles.
      c = Config{{"variant", tiles}, {"dq_block_m", bm}, {"dq_block_n", bn}, {"block_m", bn}, {"block_n", bm}};
    }
    if (s.admits(c)) return c;
  }
  // Layout blocks with small power-of-two factors: the largest tiles that divide them.
  std::vector<Config> all;
  for (Config& c : s.enumerate())
    if (variant_of(c) == "tiles") all.push_back(std::move(c));
  if (all.empty()) throw SelectionError(inv.kernel + ": no tile fits the layout's blocks for " + inv.signature());
  auto size = [&](const Config& c) {
    return c.get("block_m") * c.get("block_n") * (backward ? c.get("dq_block_m") * c.get("dq_block_n") : 1);
  };
  Config best = all.front();
  for (const auto& c : all)
    if (size(c) > size(best)) best = c;
  return best;
}

template <class Params>
Params make_params(const Problem& p) {
  auto i = [](std::int64_t v) { return static_cast<std::int32_t>(v); };
  Params r{};
  r.batch = i(p.batch);
  r.seq_q = i(p.seq_q);
  r.seq_k = i(p.seq_k);
  r.heads = i(p.heads);
  r.kv_heads = i(p.kv_heads);
  r.block_q = i(p.block_q);
  r.block_k = i(p.block_k);
  r.nbq = i(p.nbq);
  r.nbk = i(p.nbk);
  r.lb = i(p.lb);
  r.lh = i(p.lh);
  r.flags = (p.causal ? 1u : 0u) | (p.has_segments ? 2u : 0u) | (p.softcap > 0 ? 4u : 0u);
  r.dtype = p.dtype == DType::f16 ? 1u : p.dtype == DType::bf16 ? 2u : 0u;
  r.scale = static_cast<float>(p.scale);
  r.cap = static_cast<float>(p.softcap);
  return r;
}

}  // namespace ejk::kernels::block_sparse_attention
