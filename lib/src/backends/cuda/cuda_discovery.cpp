// CUDA devices as DeviceInfo, and the backend's registration.
#include <fstream>
#include <regex>

#include "backends/cuda/cuda_api.hpp"
#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/transports.hpp"
#include "core/backend_registry.hpp"
#include "ejk/error.hpp"

namespace ejk::cuda {
namespace {

// "580.159.04" from the kernel module's version file, or "" (the driver API gives only the CUDA
// version it supports).
std::string kernel_driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "";
  std::smatch m;
  static const std::regex version(R"((\d+\.\d+(\.\d+)?))");
  return std::regex_search(line, m, version) ? m.str(1) : "";
}

DeviceInfo describe(const Driver& d, CUdevice dev, int index) {
  auto attr = [&](CUdevice_attribute a) {
    int v = 0;
    check(d.cuDeviceGetAttribute(&v, a, dev), "cuDeviceGetAttribute");
    return v;
  };
  DeviceInfo info;
  info.backend = Backend::cuda;
  info.index = index;
  info.vendor = "NVIDIA";
  char name[256] = {};
  check(d.cuDeviceGetName(name, sizeof name, dev), "cuDeviceGetName");
  info.name = name;
  const std::string cuda_version = std::to_string(d.version / 1000) + "." + std::to_string(d.version % 1000 / 10);
  const std::string kernel_version = kernel_driver_version();
  info.driver = kernel_version.empty() ? "CUDA " + cuda_version : kernel_version + " (CUDA " + cuda_version + ")";
  info.api_version = "CUDA " + cuda_version;
  const int major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  const int minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  info.architecture = "sm_" + std::to_string(major) + std::to_string(minor);
  info.discrete = attr(CU_DEVICE_ATTRIBUTE_INTEGRATED) == 0;
  info.compute_units = static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT));
  std::size_t total = 0;
  check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
  info.global_mem = total;
  info.max_buffer = total;
  // Without opting in (cuFuncSetAttribute), a block has 48 KiB: what the OpenCL C kernels and
  // their spaces assume. CUDA kernels of the backend's own ask for more (shared_optin()).
  info.local_mem = static_cast<std::uint64_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK));
  info.max_workgroup_size = static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK));
  info.max_workgroup_dims = {static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)),
                             static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)),
                             static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z))};
  info.subgroup_size = static_cast<std::uint32_t>(attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  info.subgroups = true;
  info.fp16 = major * 10 + minor >= 53;
  info.bf16 = major >= 8;
  // mma.sync m16n8k16 with f32 accumulation, from sm_80 (what the OpenCL C tensor-core kernels use).
  if (major >= 8)
    for (DType t : {DType::f16, DType::bf16}) info.coopmat.push_back(CoopMatShape{16, 8, 16, t, DType::f32});
  return info;
}

}  // namespace
}  // namespace ejk::cuda

namespace ejk::backends {
namespace {

std::vector<DeviceInfo> cuda_devices() {
  const cuda::Driver* d = cuda::driver();
  if (!d) return {};
  int count = 0;
  if (d->cuDeviceGetCount(&count) != CUDA_SUCCESS) return {};
  std::vector<DeviceInfo> out;
  for (int i = 0; i < count; ++i) {
    CUdevice dev = 0;
    cuda::check(d->cuDeviceGet(&dev, i), "cuDeviceGet");
    out.push_back(cuda::describe(*d, dev, i));
  }
  return out;
}

std::shared_ptr<Device> open_cuda(int index) {
  const cuda::Driver* d = cuda::driver();
  int count = 0;
  if (d) d->cuDeviceGetCount(&count);
  if (index < 0 || index >= count)
    throw InvalidArgument("device 'cuda:" + std::to_string(index) + "' not found (" + std::to_string(count) +
                          " CUDA devices" + (d ? "" : ": " + cuda::driver_absent_reason()) + ")");
  CUdevice dev = 0;
  cuda::check(d->cuDeviceGet(&dev, index), "cuDeviceGet");
  return std::make_shared<cuda::CudaDevice>(dev, cuda::describe(*d, dev, index));
}

// Highest for `device: auto`: on an NVIDIA GPU it is the backend that reaches all of it.
const BackendRegistration cuda_registration{{Backend::cuda, &cuda_devices, &open_cuda, 3, "cuda", true, &cuda::peer_hooks}};

}  // namespace
}  // namespace ejk::backends
