#pragma once
// The device backends' (OpenCL, Vulkan) parameter space and heuristic for mean_pooling and
// mean_pooling_bwd: both run the same plan (one group per block of columns, sequence and part).
#include "common/ceil_div.hpp"
#include "ejk/kernel.hpp"
#include "mean_pooling/mean_pooling.hpp"

namespace ejk::kernels::mean_pooling {

// threads: work-items per group; vec: columns per work-item; rows: work-items along the tokens
// (threads / rows of them cover threads / rows * vec columns); splits: parts of each sequence,
// their sums added by a second pass (forward) or written on their own (backward).
ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev);
// GPUs: 256 work-items, and parts until there are a few waves of groups; CPU-hosted drivers
// (PoCL, lavapipe): 64 work-items, one row, parts for every core.
Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu);
// Throws InvalidArgument for a config the kernels cannot run (one that did not come from the space).
void check_config(std::string_view where, const Config& c);


}  // namespace ejk::kernels::mean_pooling
