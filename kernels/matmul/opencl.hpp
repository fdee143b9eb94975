#pragma once
// The OpenCL matmul's parameter spaces and heuristics by device family, exposed so that
// tests can check a GPU's space and configs on any OpenCL device.
#include "ejk/kernel.hpp"

namespace ejk::kernels::matmul {

// CPU devices (PoCL, ...) get wide register tiles on few work-items; GPUs many work-items
// with tiles staged in local memory.
ParamSpace opencl_space(const Invocation& inv, const DeviceInfo& dev, bool cpu_family);
Config opencl_heuristic(const Invocation& inv, const DeviceInfo& dev, bool cpu_family);

}  // namespace ejk::kernels::matmul
