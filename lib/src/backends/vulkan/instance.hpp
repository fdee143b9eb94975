#pragma once
// The process-wide Vulkan instance and what it found: every usable physical device with its
// DeviceInfo and the features and limits device creation and kernels need.
#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "ejk/device.hpp"

namespace ejk::vulkan {

struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  DeviceInfo info;
  VkPhysicalDeviceLimits limits{};
  VkPhysicalDeviceMemoryProperties memory{};
  std::uint32_t api_version = 0;
  std::uint32_t queue_family = 0;      // the first family with compute
  std::uint32_t queue_count = 1;       // queues of that family
  // The first family for transfers alone (no compute, no graphics: the copy engines), else
  // queue_family.
  std::uint32_t transfer_family = 0;
  std::uint32_t timestamp_bits = 0;    // 0: the family cannot time
  float timestamp_period = 1.f;        // nanoseconds per tick
  std::uint32_t max_subgroup_size = 0;
  // Features present (device creation enables them).
  bool storage16 = false;      // storageBuffer16BitAccess
  bool float16 = false;        // shaderFloat16
  bool int16 = false;          // shaderInt16
  bool memory_model = false;   // vulkanMemoryModel (glslang emits it for cooperative matrices)
  // vulkanMemoryModelDeviceScope: with the memory model enabled, Device-scope atomics (a buffer's
  // atomicOr between workgroups) are valid only where this is enabled too.
  bool memory_model_device_scope = false;
  bool timeline = false;       // timelineSemaphore (Vulkan 1.2 requires it)
  bool push_descriptor = false;
  bool full_subgroups = false;  // computeFullSubgroups (VK_EXT_subgroup_size_control)
  bool subgroup_shuffle = false;  // subgroupShuffle* in compute shaders
  bool subgroup_arithmetic = false;  // subgroupAdd, subgroupMax, ... in compute shaders
  bool coopmat_nv = false;      // VK_NV_cooperative_matrix with cooperativeMatrix and vulkanMemoryModel
  bool coopmat_khr = false;     // VK_KHR_cooperative_matrix with cooperativeMatrix (besides NV's)
  bool coopmat_conversions = false;  // VK_NV_cooperative_matrix2's cooperativeMatrixConversions
  bool integrated = false;      // integrated GPU or CPU: host-visible device memory is as fast
  bool cpu = false;             // a CPU implementation such as lavapipe
};

// VK_KHR_cooperative_matrix and VK_NV_cooperative_matrix2 postdate the Vulkan headers ejk
// builds with on Debian 12: their feature structures, as the registry defines them.
inline constexpr const char* coopmat_khr_extension = "VK_KHR_cooperative_matrix";
inline constexpr auto coopmat_khr_features_type = static_cast<VkStructureType>(1000506000);
struct CoopMatFeaturesKhr {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrix;
  VkBool32 cooperativeMatrixRobustBufferAccess;
};
inline constexpr const char* coopmat2_nv_extension = "VK_NV_cooperative_matrix2";
inline constexpr auto coopmat2_nv_features_type = static_cast<VkStructureType>(1000593000);
struct CoopMat2FeaturesNv {
  VkStructureType sType;
  void* pNext;
  VkBool32 cooperativeMatrixWorkgroupScope;
  VkBool32 cooperativeMatrixFlexibleDimensions;
  VkBool32 cooperativeMatrixReductions;
  VkBool32 cooperativeMatrixConversions;
  VkBool32 cooperativeMatrixPerElementOperations;
  VkBool32 cooperativeMatrixTensorAddressing;
  VkBool32 cooperativeMatrixBlockLoads;
};

class Instance {
 public:
  // The instance, created on first use and never destroyed (drivers tear down in atexit).
  static Instance& get();

  VkInstance handle() const { return instance_; }
  // Devices with Vulkan 1.2 or newer (the SPIR-V targets 1.2); empty without a driver.
  const std::vector<PhysicalDevice>& devices() const { return devices_; }
  bool validation() const { return validation_; }

 private:
  Instance();
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  bool validation_ = false;
  std::vector<PhysicalDevice> devices_;
};

// The physical device behind vulkan:<index>; throws InvalidArgument when there is none.
const PhysicalDevice& physical_device(int index);

}  // namespace ejk::vulkan
