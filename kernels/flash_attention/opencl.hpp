#pragma once
// The OpenCL flash attention's parameter spaces and heuristics by device family, exposed so that
// tests can check a GPU's space and configs on any OpenCL device.
#include "ejk/kernel.hpp"

namespace ejk::kernels::flash_attention {

// CPU devices (PoCL, ...) get smaller workgroups; GPUs 32 to 256 work-items.
ParamSpace opencl_space(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family);
Config opencl_heuristic(const Invocation& inv, const DeviceInfo& dev, bool backward, bool cpu_family);

}  // namespace ejk::kernels::flash_attention
