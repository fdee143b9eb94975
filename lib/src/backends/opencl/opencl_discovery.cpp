// Finds every device of every OpenCL platform the ICD loader knows and describes it.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "backends/opencl/opencl_device.hpp"
#include "core/backend_registry.hpp"
#include "ejk/error.hpp"

namespace ejk::opencl {
namespace {

// Vendor queries, spelled out so the build does not depend on how new cl_ext.h is.
constexpr cl_device_info compute_capability_major_nv = 0x4000;
constexpr cl_device_info compute_capability_minor_nv = 0x4001;
constexpr cl_device_info warp_size_nv = 0x4003;
constexpr cl_device_info wavefront_width_amd = 0x4043;
constexpr cl_device_info sub_group_sizes_intel = 0x4108;
constexpr cl_device_info ip_version_intel = 0x4250;
constexpr cl_int platform_not_found_khr = -1001;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\0' || std::isspace(static_cast<unsigned char>(s.back())))) s.pop_back();
  std::size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

std::string text(cl_device_id dev, cl_device_info what, const char* name) {
  std::size_t size = 0;
  check(clGetDeviceInfo(dev, what, 0, nullptr, &size), std::string("clGetDeviceInfo(") + name + ")");
  std::string s(size, '\0');
  check(clGetDeviceInfo(dev, what, size, s.data(), nullptr), std::string("clGetDeviceInfo(") + name + ")");
  return trim(std::move(s));
}

template <class T>
T value(cl_device_id dev, cl_device_info what, const char* name) {
  T v{};
  check(clGetDeviceInfo(dev, what, sizeof v, &v, nullptr), std::string("clGetDeviceInfo(") + name + ")");
  return v;
}

// A vendor query that may be refused: 0 when the driver does not answer it.
template <class T>
T optional_value(cl_device_id dev, cl_device_info what) {
  T v{};
  if (clGetDeviceInfo(dev, what, sizeof v, &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

bool has_extension(const std::string& extensions, std::string_view ext) {
  std::size_t pos = 0;
  while ((pos = extensions.find(ext, pos)) != std::string::npos) {
    bool start = pos == 0 || extensions[pos - 1] == ' ';
    bool end = pos + ext.size() == extensions.size() || extensions[pos + ext.size()] == ' ';
    if (start && end) return true;
    pos += ext.size();
  }
  return false;
}

// "OpenCL 3.0 CUDA 12.8.97" -> "OpenCL 3.0"
std::string api_version(const std::string& device_version) {
  std::size_t sp = device_version.find(' ');
  if (sp == std::string::npos) return device_version;
  std::size_t end = device_version.find(' ', sp + 1);
  return device_version.substr(0, end);
}

std::string architecture(cl_device_id dev, const std::string& vendor, const std::string& name,
                         const std::string& device_version, const std::string& extensions) {
  if (has_extension(extensions, "cl_nv_device_attribute_query")) {
    auto major = optional_value<cl_uint>(dev, compute_capability_major_nv);
    auto minor = optional_value<cl_uint>(dev, compute_capability_minor_nv);
    if (major) return "sm_" + std::to_string(major) + std::to_string(minor);
  }
  // AMD names its devices by their ISA ("gfx90a"), which is what profiles key on.
  if (has_extension(extensions, "cl_amd_device_attribute_query")) return name;
  if (has_extension(extensions, "cl_intel_device_attribute_query")) {
    auto ip = optional_value<cl_uint>(dev, ip_version_intel);
    if (ip) {
      // CL_DEVICE_IP_VERSION_INTEL packs architecture.release.revision as 10.14.8 bits.
      return "intel-" + std::to_string(ip >> 22) + "." + std::to_string((ip >> 14) & 0xff) + "." +
             std::to_string(ip & 0x3f);
    }
  }
  // PoCL names the LLVM target it compiles for after "HSTR:" ("pthread-x86_64-...-skylake-avx512").
  auto hstr = device_version.find("HSTR: ");
  if (hstr != std::string::npos) return trim(device_version.substr(hstr + 6));
  std::string arch = vendor + "-" + name;
  for (auto& c : arch) c = std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '-';
  return arch;
}

// NVIDIA's OpenCL gives fixed-size __local arrays beyond CL_DEVICE_LOCAL_MEM_SIZE's 48 KiB the
// shared memory a CUDA kernel can opt into (measured on an H200: 144 KiB programs built and ran
// right, bench/results/h200-2026-11-27/opencl-mma-gemm-lean). By compute capability, as CUDA's
// MAX_SHARED_MEMORY_PER_BLOCK_OPTIN; 0 (local_mem) before sm_80 and for what is not listed.
std::uint64_t nvidia_static_local(cl_uint major, cl_uint minor) {
  if (major == 9 || major == 10) return 227u * 1024;
  if (major == 8 && (minor == 0 || minor == 7)) return 163u * 1024;
  if (major == 8 || major == 12) return 99u * 1024;
  return 0;
}

DeviceInfo describe(cl_device_id dev, int index) {
  DeviceInfo info;
  info.backend = Backend::opencl;
  info.index = index;
  info.vendor = text(dev, CL_DEVICE_VENDOR, "CL_DEVICE_VENDOR");
  info.name = text(dev, CL_DEVICE_NAME, "CL_DEVICE_NAME");
  info.driver = text(dev, CL_DRIVER_VERSION, "CL_DRIVER_VERSION");
  std::string version = text(dev, CL_DEVICE_VERSION, "CL_DEVICE_VERSION");
  std::string extensions = text(dev, CL_DEVICE_EXTENSIONS, "CL_DEVICE_EXTENSIONS");
  info.api_version = api_version(version);
  info.architecture = architecture(dev, info.vendor, info.name, version, extensions);
  auto type = value<cl_device_type>(dev, CL_DEVICE_TYPE, "CL_DEVICE_TYPE");
  // Deprecated since OpenCL 2.0 but still answered, and the only portable "is it integrated".
  bool unified = optional_value<cl_bool>(dev, CL_DEVICE_HOST_UNIFIED_MEMORY) != CL_FALSE;
  info.discrete = (type & CL_DEVICE_TYPE_GPU) && !unified;
  info.cpu = (type & CL_DEVICE_TYPE_CPU) != 0;
  info.compute_units = value<cl_uint>(dev, CL_DEVICE_MAX_COMPUTE_UNITS, "CL_DEVICE_MAX_COMPUTE_UNITS");
  info.global_mem = value<cl_ulong>(dev, CL_DEVICE_GLOBAL_MEM_SIZE, "CL_DEVICE_GLOBAL_MEM_SIZE");
  info.max_buffer = value<cl_ulong>(dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
  info.local_mem = value<cl_ulong>(dev, CL_DEVICE_LOCAL_MEM_SIZE, "CL_DEVICE_LOCAL_MEM_SIZE");
  info.max_workgroup_size =
      static_cast<std::uint32_t>(value<std::size_t>(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, "CL_DEVICE_MAX_WORK_GROUP_SIZE"));
  auto dims = value<cl_uint>(dev, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, "CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS");
  std::vector<std::size_t> sizes(std::max<cl_uint>(dims, 3), 1);
  check(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof(std::size_t) * dims, sizes.data(), nullptr),
        "clGetDeviceInfo(CL_DEVICE_MAX_WORK_ITEM_SIZES)");
  for (std::size_t i = 0; i < 3; ++i)
    info.max_workgroup_dims[i] = static_cast<std::uint32_t>(std::min<std::size_t>(sizes[i], UINT32_MAX));
  // NVIDIA from sm_80 on runs mma.sync.m16n8k16 with f16 or bf16 operands and f32 accumulation,
  // which OpenCL C reaches through inline PTX even without cl_khr_fp16.
  if (has_extension(extensions, "cl_nv_device_attribute_query")) {
    const cl_uint major = optional_value<cl_uint>(dev, compute_capability_major_nv);
    const cl_uint minor = optional_value<cl_uint>(dev, compute_capability_minor_nv);
    if (major >= 8)
      for (DType t : {DType::f16, DType::bf16}) info.coopmat.push_back(CoopMatShape{16, 8, 16, t, DType::f32});
    info.static_local_mem = nvidia_static_local(major, minor);
  }
  info.fp16 = has_extension(extensions, "cl_khr_fp16");
  info.bf16 = false;  // no OpenCL extension offers bf16 arithmetic; kernels convert through f32
  info.subgroups = has_extension(extensions, "cl_khr_subgroups") || has_extension(extensions, "cl_intel_subgroups");
  if (info.subgroups) {
    if (has_extension(extensions, "cl_intel_subgroups")) {
      std::size_t size = 0;
      if (clGetDeviceInfo(dev, sub_group_sizes_intel, 0, nullptr, &size) == CL_SUCCESS && size) {
        std::vector<std::size_t> sg(size / sizeof(std::size_t));
        if (clGetDeviceInfo(dev, sub_group_sizes_intel, size, sg.data(), nullptr) == CL_SUCCESS && !sg.empty())
          info.subgroup_size = static_cast<std::uint32_t>(*std::max_element(sg.begin(), sg.end()));
      }
    } else if (has_extension(extensions, "cl_amd_device_attribute_query")) {
      info.subgroup_size = optional_value<cl_uint>(dev, wavefront_width_amd);
    } else if (has_extension(extensions, "cl_nv_device_attribute_query")) {
      info.subgroup_size = optional_value<cl_uint>(dev, warp_size_nv);
    }
  }
  return info;
}

struct Found {
  cl_platform_id platform;
  cl_device_id device;
};

std::vector<Found> find_all() {
  cl_uint count = 0;
  cl_int err = clGetPlatformIDs(0, nullptr, &count);
  // The ICD loader answers "no platform" when no driver is installed: no devices, no error.
  if (err == platform_not_found_khr || (err == CL_SUCCESS && count == 0)) return {};
  check(err, "clGetPlatformIDs");
  std::vector<cl_platform_id> platforms(count);
  check(clGetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
  std::vector<Found> out;
  for (cl_platform_id p : platforms) {
    cl_uint n = 0;
    err = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
    if (err == CL_DEVICE_NOT_FOUND || n == 0) continue;
    check(err, "clGetDeviceIDs");
    std::vector<cl_device_id> devs(n);
    check(clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, n, devs.data(), nullptr), "clGetDeviceIDs");
    for (cl_device_id d : devs) out.push_back({p, d});
  }
  return out;
}

}  // namespace

cl_device_type device_type(const DeviceInfo& info) {
  static const std::vector<cl_device_type> types = [] {
    std::vector<cl_device_type> out;
    for (const auto& f : find_all()) out.push_back(value<cl_device_type>(f.device, CL_DEVICE_TYPE, "CL_DEVICE_TYPE"));
    return out;
  }();
  if (info.backend != Backend::opencl || info.index < 0 || info.index >= static_cast<int>(types.size()))
    throw InvalidArgument("device '" + info.id() + "' is not an OpenCL device");
  return types[static_cast<std::size_t>(info.index)];
}

}  // namespace ejk::opencl

namespace ejk::backends {

namespace {

std::vector<DeviceInfo> opencl_devices() {
  std::vector<DeviceInfo> out;
  int index = 0;
  for (const auto& f : opencl::find_all()) out.push_back(opencl::describe(f.device, index++));
  return out;
}

std::shared_ptr<Device> open_opencl(int index) {
  auto found = opencl::find_all();
  if (index < 0 || index >= static_cast<int>(found.size()))
    throw InvalidArgument("device 'opencl:" + std::to_string(index) + "' not found (" + std::to_string(found.size()) +
                          " OpenCL devices)");
  const auto& f = found[static_cast<std::size_t>(index)];
  return std::make_shared<opencl::OpenCLDevice>(f.platform, f.device, opencl::describe(f.device, index));
}

const BackendRegistration opencl_registration{{Backend::opencl, &opencl_devices, &open_opencl, 1, "opencl", true}};

}  // namespace

}  // namespace ejk::backends
