#pragma once
// The device backends' (OpenCL, Vulkan) parameter space and heuristic for attention_merge. Both
// run one plan: a group owns whole rows (rows_per_group of them, at least one), first computes
// each row's weights and new log-sum-exp once (one work-item per row, into local memory), then
// streams the rows' elements, vec contiguous ones per work-item, consecutive work-items on
// consecutive elements so that every load is coalesced.
#include "attention_merge/attention_merge.hpp"
#include "common/ceil_div.hpp"
#include "ejk/kernel.hpp"

namespace ejk::kernels::attention_merge {

// threads: work-items per group; vec: elements per work-item, loaded and stored as one vector.
ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev);
// The widest vector head_dim allows; of the group sizes, the one that leaves the fewest
// work-items idle, the largest of equals while there are groups for every compute unit (four
// per unit on GPUs, two per core on CPU-hosted drivers such as PoCL and lavapipe).
Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu);
// Throws InvalidArgument for a config the kernels cannot run (one that did not come from the space).
void check_config(std::string_view where, const Config& c, const Problem& p);

// Rows a group owns: as many whole rows as its threads * vec elements hold, at least one.
inline std::int64_t rows_per_group(std::int64_t threads, std::int64_t vec, std::int64_t head_dim) {
  return head_dim > 0 ? std::max<std::int64_t>(1, threads * vec / head_dim) : 1;
}

}  // namespace ejk::kernels::attention_merge
