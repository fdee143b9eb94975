#include "backends/vulkan/vk_util.hpp"

#include "ejk/error.hpp"

namespace ejk::vulkan {

std::string result_name(VkResult r) {
  switch (r) {
#define EJK_RESULT(name) \
  case name: return #name;
    EJK_RESULT(VK_SUCCESS)
    EJK_RESULT(VK_NOT_READY)
    EJK_RESULT(VK_TIMEOUT)
    EJK_RESULT(VK_INCOMPLETE)
    EJK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    EJK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    EJK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    EJK_RESULT(VK_ERROR_DEVICE_LOST)
    EJK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    EJK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    EJK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    EJK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    EJK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    EJK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    EJK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    EJK_RESULT(VK_ERROR_FRAGMENTED_POOL)
    EJK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
    EJK_RESULT(VK_ERROR_INVALID_SHADER_NV)
    EJK_RESULT(VK_ERROR_UNKNOWN)
#undef EJK_RESULT
    default: return "VkResult " + std::to_string(static_cast<int>(r));
  }
}

void check(VkResult r, const char* call) {
  if (r == VK_SUCCESS) return;
  std::string what = std::string(call) + " failed: " + result_name(r);
  if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_POOL_MEMORY ||
      r == VK_ERROR_TOO_MANY_OBJECTS)
    throw ResourceError(what);
  throw DeviceError(what);
}

}  // namespace ejk::vulkan
