#pragma once
// Discovery and opening of each compiled-in backend's devices (used by core/device.cpp).
#include <memory>
#include <vector>

#include "ejk/device.hpp"

namespace ejk::backends {

std::vector<DeviceInfo> cpu_devices();
std::shared_ptr<Device> open_cpu(int index);

#ifdef EJK_HAVE_OPENCL
// Empty when no OpenCL platform is installed.
std::vector<DeviceInfo> opencl_devices();
std::shared_ptr<Device> open_opencl(int index);
#endif

#ifdef EJK_HAVE_VULKAN
// Empty when no Vulkan driver is installed.
std::vector<DeviceInfo> vulkan_devices();
std::shared_ptr<Device> open_vulkan(int index);
#endif

}  // namespace ejk::backends
