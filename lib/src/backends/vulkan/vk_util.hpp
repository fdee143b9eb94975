#pragma once
// Result checks and RAII ownership of Vulkan handles.
#include <string>
#include <utility>

#include <vulkan/vulkan.h>

namespace ejk::vulkan {

std::string result_name(VkResult r);

// Throws ResourceError for out-of-memory results, DeviceError for the rest, naming the call.
void check(VkResult r, const char* call);

// A Vulkan structure with its sType set and every other member zero.
template <class T>
T make(VkStructureType type) {
  T value{};
  value.sType = type;
  return value;
}

// Owns one handle created from a VkDevice and destroys it with Destroy. The VkDevice must
// outlive it (VulkanDevice and its buffers keep the device alive through shared_ptr<Core>).
template <class T, void (*Destroy)(VkDevice, T, const VkAllocationCallbacks*)>
class Owned {
 public:
  Owned() = default;
  Owned(VkDevice device, T handle) : device_(device), handle_(handle) {}
  ~Owned() { reset(); }
  Owned(Owned&& o) noexcept : device_(o.device_), handle_(std::exchange(o.handle_, T{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      handle_ = std::exchange(o.handle_, T{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;

  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }
  void reset() {
    if (handle_ != T{}) Destroy(device_, handle_, nullptr);
    handle_ = T{};
  }

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  T handle_{};
};

using OwnedBuffer = Owned<VkBuffer, vkDestroyBuffer>;
using OwnedMemory = Owned<VkDeviceMemory, vkFreeMemory>;
using OwnedFence = Owned<VkFence, vkDestroyFence>;
using OwnedCommandPool = Owned<VkCommandPool, vkDestroyCommandPool>;
using OwnedDescriptorPool = Owned<VkDescriptorPool, vkDestroyDescriptorPool>;
using OwnedDescriptorSetLayout = Owned<VkDescriptorSetLayout, vkDestroyDescriptorSetLayout>;
using OwnedPipelineLayout = Owned<VkPipelineLayout, vkDestroyPipelineLayout>;
using OwnedPipeline = Owned<VkPipeline, vkDestroyPipeline>;
using OwnedPipelineCache = Owned<VkPipelineCache, vkDestroyPipelineCache>;
using OwnedShaderModule = Owned<VkShaderModule, vkDestroyShaderModule>;
using OwnedQueryPool = Owned<VkQueryPool, vkDestroyQueryPool>;
using OwnedSemaphore = Owned<VkSemaphore, vkDestroySemaphore>;

}  // namespace ejk::vulkan
