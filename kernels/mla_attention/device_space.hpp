#pragma once
// mla_decode's parameter space on the device backends (OpenCL, Vulkan): both run the same three
// passes with the same tiling and differ only in how a staged tile is laid out in local memory.
// And how every device backend, CUDA's tensor-core pass included, splits the context.
#include <cstdint>
#include <string_view>

#include "ejk/kernel.hpp"
#include "mla_attention/mla_attention.hpp"

namespace ejk::kernels::mla_attention {

// threads: work-items per group; heads_per_group: heads sharing each staged tile of cache rows;
// block_n: cache rows per tile; splits: parts of the context, merged by log-sum-exp.
// `local_mem_fit` is the backend's constraint that a group's staging fits in local memory.
// Where `s` already declares a variant, `when` says which configs take these tile parameters
// (splits belong to every variant).
inline ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev, std::string_view local_mem_fit,
                               ParamSpace s = {}, std::string_view when = {}) {
  s.param("threads", {64, 128, 256}, when)
      .param("heads_per_group", {1, 2, 4, 8, 16}, when)
      .param("block_n", {4, 8, 16, 32}, when)
      .param("splits", {1, 2, 4, 8, 16, 32})
      .constraint("heads % heads_per_group == 0")
      // A staged tile lies within one page.
      .constraint("block_size % block_n == 0")
      .constraint("threads <= max_workgroup_size")
      // More work-items than o_lat columns only idle in the accumulation.
      .constraint("threads == 64 || threads <= kv_lora_rank")
      .constraint(local_mem_fit)
      // Accumulators stay in registers.
      .constraint("heads_per_group * ((kv_lora_rank + threads - 1) / threads) <= 32")
      .constraint("splits == 1 || splits * block_n <= max_context")
      .bind(MlaDecodeKernel().vars(inv))
      .bind(device_vars(dev));
  return s;
}

// Splits of the context: enough groups (of `groups_per_part` a part) for every compute unit twice
// over, parts of at least 256 tokens and of whole tiles of `block_n` rows.
inline std::int64_t pick_splits(const Problem& p, std::int64_t groups_per_part, std::int64_t block_n, std::int64_t cus) {
  std::int64_t splits = 1;
  while (splits < 32 && groups_per_part * splits < 2 * cus && splits * 2 * 256 <= p.capacity() &&
         splits * 2 * block_n <= p.capacity())
    splits *= 2;
  return splits;
}

// Splits of the context for the tensor-core passes: the most that keep every group in one wave
// (`slots` groups at once: compute units times the groups each holds), parts of at least
// `min_part` tokens.
inline std::int64_t one_wave_splits(const Problem& p, std::int64_t groups_per_part, std::int64_t min_part,
                                    std::int64_t slots) {
  std::int64_t splits = 1;
  while (splits < 32 && groups_per_part * splits * 2 <= slots && splits * 2 * min_part <= p.capacity()) splits *= 2;
  return splits;
}

}  // namespace ejk::kernels::mla_attention
