#pragma once
// The parameter space and heuristic the OpenCL and Vulkan implementations share (their kernels
// have one geometry): work-group size, keys per staged tile, query heads per group.
#include <string>
#include <string_view>

#include "ejk/error.hpp"
#include "ejk/kernel.hpp"
#include "native_sparse_attention/nsa.hpp"

namespace ejk::kernels::native_sparse_attention {

// Where `s` already declares a variant, `when` says which configs take these parameters.
inline ParamSpace gpu_space(const Vars& vars, const DeviceInfo& dev, bool backward, ParamSpace s = {},
                            std::string_view when = {}) {
  s.param("threads", {32, 64, 128, 256}, when)
      .param("block_n", {8, 16, 32, 64}, when)
      .param("heads_per_group", {1, 2, 4, 8, 16}, when)
      .constraint("group % heads_per_group == 0")
      .constraint("threads <= max_workgroup_size")
      // Selection tiles never hold more than a block: longer ones only serve the compression
      // branch.
      .constraint("block_n == 8 || block_n <= block_size")
      // Work-items beyond a few per score only idle.
      .constraint("threads <= 4 * heads_per_group * block_n");
  if (!backward) {
    // Queries, accumulators, the compression output, scores and softmax state, and a tile of
    // keys and values (rows padded by one word), all f32.
    s.constraint("(heads_per_group * (head_dim_k + 2 * head_dim_v + block_n + 3) + block_n * (head_dim_k + head_dim_v + 2)) * 4 <= local_mem");
  } else {
    // nsa_bwd_dq: queries, dq, scaled dout, dS, a tile; nsa_bwd_dkv: a tile and its gradients,
    // the queries and douts of a part, probabilities and dS.
    s.constraint("(heads_per_group * (2 * head_dim_k + head_dim_v + block_n + 2) + block_n * (head_dim_k + head_dim_v + 2)) * 4 <= local_mem")
        .constraint("(block_n * (2 * head_dim_k + 2 * head_dim_v + 2) + heads_per_group * (head_dim_k + head_dim_v + 2 * block_n)) * 4 <= local_mem");
  }
  s.bind(vars).bind(device_vars(dev));
  return s;
}

// The most query heads per group (keys staged once serve all of them), tiles of 32 keys, 128
// work-items; smaller where the device's limits say no. `base` holds what the configs share
// (a variant).
inline Config gpu_heuristic(const ParamSpace& s, const Problem& p, const DeviceInfo& dev, const std::string& what,
                            const Config& base = {}) {
  for (std::int64_t hpg : {16, 8, 4, 2, 1}) {
    if (p.group % hpg) continue;
    for (std::int64_t bn : {32, 16, 64, 8})
      for (std::int64_t threads : {128, 64, 256, 32}) {
        Config c = base;
        c.set("threads", threads).set("block_n", bn).set("heads_per_group", hpg);
        if (s.admits(c)) return c;
      }
  }
  auto all = s.enumerate();
  if (all.empty()) throw SelectionError(what + ": no config fits " + dev.id());
  return all.front();
}

}  // namespace ejk::kernels::native_sparse_attention
