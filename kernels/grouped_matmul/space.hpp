#pragma once
// The device backends' (OpenCL, Vulkan) parameter space and heuristic for grouped_matmul and
// grouped_matmul_tgmm: both run matmul's tiled GEMM, one output tile per group of work-items.
#include <string_view>

#include "common/ceil_div.hpp"
#include "ejk/kernel.hpp"
#include "grouped_matmul/grouped_matmul.hpp"

namespace ejk::kernels::grouped_matmul {

// tile_m x tile_n outputs per group of work-items, staged tile_k deep; wpt_m x wpt_n outputs per
// work-item. extra binds backend variables (Vulkan's workgroup size limits per dimension).
ParamSpace device_space(const Invocation& inv, const DeviceInfo& dev, const Vars& extra = {});
// Discrete GPUs: 128 x 128 tiles of 8 x 8 per work-item where the problem fills the device;
// CPU-hosted drivers (PoCL, lavapipe): 128 x 128 tiles of 8 x 8, 32 deep, smaller where the
// problem has too few tiles for every core.
Config device_heuristic(const Invocation& inv, const DeviceInfo& dev, bool gpu, const Vars& extra = {});
// Throws InvalidArgument for a config the kernels cannot run (one that did not come from a space).
void check_config(std::string_view where, const Config& c);


}  // namespace ejk::kernels::grouped_matmul
