#include "backends/vulkan/instance.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>

#include "backends/vulkan/validation.hpp"
#include "backends/vulkan/vk_util.hpp"
#include "ejk/error.hpp"

namespace ejk::vulkan {
namespace {

constexpr const char* validation_layer = "VK_LAYER_KHRONOS_validation";

std::set<std::string> instance_extensions(const char* layer) {
  std::uint32_t n = 0;
  if (vkEnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkExtensionProperties> props(n);
  if (vkEnumerateInstanceExtensionProperties(layer, &n, props.data()) != VK_SUCCESS) return {};
  std::set<std::string> out;
  for (const auto& p : props) out.insert(p.extensionName);
  return out;
}

bool has_layer(const char* name) {
  std::uint32_t n = 0;
  if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> props(n);
  if (vkEnumerateInstanceLayerProperties(&n, props.data()) != VK_SUCCESS) return false;
  return std::any_of(props.begin(), props.end(), [&](const VkLayerProperties& p) { return std::strcmp(p.layerName, name) == 0; });
}

std::set<std::string> device_extensions(VkPhysicalDevice pd) {
  std::uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkExtensionProperties> props(n);
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, props.data()) != VK_SUCCESS) return {};
  std::set<std::string> out;
  for (const auto& p : props) out.insert(p.extensionName);
  return out;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT /*types*/,
                                          const VkDebugUtilsMessengerCallbackDataEXT* data, void* /*user*/) {
  if (severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
    detail::report_validation_message(severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                                      data && data->pMessageIdName ? data->pMessageIdName : "",
                                      data && data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

std::string vendor_name(std::uint32_t id) {
  switch (id) {
    case 0x10DE: return "NVIDIA";
    case 0x1002: return "AMD";
    case 0x1022: return "AMD";
    case 0x8086: return "Intel";
    case 0x13B5: return "ARM";
    case 0x5143: return "Qualcomm";
    case 0x1010: return "Imagination";
    case 0x106B: return "Apple";
    case 0x14E4: return "Broadcom";
    case VK_VENDOR_ID_MESA: return "Mesa";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "vendor 0x%04x", id);
      return buf;
    }
  }
}

std::string version_text(std::uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

// Each vendor packs driverVersion its own way; NVIDIA uses 10.8.8.6 bits.
std::string driver_version(const VkPhysicalDeviceProperties& p, const VkPhysicalDeviceDriverProperties& d) {
  std::uint32_t v = p.driverVersion;
  std::string out;
  if (p.vendorID == 0x10DE) {
    char buf[48];
    std::uint32_t tertiary = v & 0x3f;
    if (tertiary)
      std::snprintf(buf, sizeof buf, "%u.%u.%02u.%u", (v >> 22) & 0x3ff, (v >> 14) & 0xff, (v >> 6) & 0xff, tertiary);
    else
      std::snprintf(buf, sizeof buf, "%u.%u.%02u", (v >> 22) & 0x3ff, (v >> 14) & 0xff, (v >> 6) & 0xff);
    out = buf;
  } else if (d.driverID == VK_DRIVER_ID_INTEL_PROPRIETARY_WINDOWS) {
    out = std::to_string(v >> 14) + "." + std::to_string(v & 0x3fff);
  } else {
    out = version_text(v);
  }
  std::string extra = d.driverName;
  if (d.driverInfo[0]) {
    if (!extra.empty()) extra.push_back(' ');
    extra.append(d.driverInfo);
  }
  if (!extra.empty()) out.append(" (").append(extra).append(")");
  return out;
}

bool contains(const std::string& s, const char* needle) { return s.find(needle) != std::string::npos; }

// NVIDIA families by product name, else by PCI device id range.
std::string nvidia_architecture(const std::string& name, std::uint32_t id) {
  static const std::pair<const char*, const char*> by_name[] = {
      {"GH200", "hopper"}, {"H100", "hopper"},      {"H200", "hopper"},    {"H800", "hopper"},
      {"H20", "hopper"},   {"GB200", "blackwell"},  {"B200", "blackwell"}, {"B100", "blackwell"},
      {"B300", "blackwell"}, {"RTX 50", "blackwell"}, {"Blackwell", "blackwell"}, {"L40", "ada"},
      {"L4", "ada"},       {"RTX 40", "ada"},       {"Ada", "ada"},        {"A100", "ampere"},
      {"A800", "ampere"},  {"A40", "ampere"},       {"A30", "ampere"},     {"A10", "ampere"},
      {"A16", "ampere"},   {"RTX 30", "ampere"},    {"RTX A", "ampere"},   {"T4", "turing"},
      {"RTX 20", "turing"}, {"GTX 16", "turing"},   {"TITAN RTX", "turing"}, {"Quadro RTX", "turing"},
      {"V100", "volta"},   {"TITAN V", "volta"},    {"P100", "pascal"},    {"GTX 10", "pascal"},
  };
  for (const auto& [needle, arch] : by_name)
    if (contains(name, needle)) return arch;
  if (id >= 0x2900) return "blackwell";
  if (id >= 0x2600) return "ada";
  if (id >= 0x2300 && id < 0x2400) return "hopper";
  if ((id >= 0x2000 && id < 0x2100) || (id >= 0x2200 && id < 0x2600)) return "ampere";
  if (id >= 0x1E00) return "turing";
  if (id >= 0x1D80) return "volta";
  if (id >= 0x1500) return "pascal";
  return "nvidia";
}

std::string lower_dashed(std::string s) {
  for (auto& c : s) c = c == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string architecture(const VkPhysicalDeviceProperties& p, const VkPhysicalDeviceDriverProperties& d) {
  std::string name = p.deviceName;
  if (p.vendorID == 0x10DE) return nvidia_architecture(name, p.deviceID);
  if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) return lower_dashed(d.driverName[0] ? d.driverName : "cpu");
  // Mesa drivers name the chip in parentheses: "AMD Radeon RX 6800 (RADV NAVI21)".
  auto open = name.rfind('('), close = name.rfind(')');
  if (open != std::string::npos && close != std::string::npos && close > open) {
    std::string chip = name.substr(open + 1, close - open - 1);
    for (const char* prefix : {"RADV ", "NVK "})
      if (chip.rfind(prefix, 0) == 0) chip = chip.substr(std::strlen(prefix));
    return lower_dashed(chip);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-0x%04x", lower_dashed(vendor_name(p.vendorID)).c_str(), p.deviceID);
  return buf;
}

DType component_dtype(VkComponentTypeNV t, bool& known) {
  known = true;
  switch (t) {
    case VK_COMPONENT_TYPE_FLOAT16_NV: return DType::f16;
    case VK_COMPONENT_TYPE_FLOAT32_NV: return DType::f32;
    case VK_COMPONENT_TYPE_SINT32_NV: return DType::i32;
    default: known = false; return DType::f32;
  }
}

std::vector<CoopMatShape> coopmat_shapes(VkInstance instance, VkPhysicalDevice pd) {
  auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!get) return {};
  std::uint32_t n = 0;
  if (get(pd, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkCooperativeMatrixPropertiesNV> props(n, make<VkCooperativeMatrixPropertiesNV>(VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV));
  if (get(pd, &n, props.data()) != VK_SUCCESS) return {};
  std::vector<CoopMatShape> out;
  for (const auto& p : props) {
    bool ka = false, kc = false;
    DType a = component_dtype(p.AType, ka), c = component_dtype(p.CType, kc);
    // Only shapes whose A and B agree and whose result has the accumulator's type, in types ejk has.
    if (!ka || !kc || p.AType != p.BType || p.CType != p.DType || p.scope != VK_SCOPE_SUBGROUP_NV) continue;
    CoopMatShape s{p.MSize, p.NSize, p.KSize, a, c};
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

bool describe(VkInstance instance, VkPhysicalDevice pd, int index, PhysicalDevice& out) {
  VkPhysicalDeviceProperties base{};
  vkGetPhysicalDeviceProperties(pd, &base);
  if (base.apiVersion < VK_API_VERSION_1_2) return false;
  auto exts = device_extensions(pd);
  auto has = [&](const char* e) { return exts.count(e) > 0; };

  auto subgroup = make<VkPhysicalDeviceSubgroupProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES);
  auto maint3 = make<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
  auto driver = make<VkPhysicalDeviceDriverProperties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES);
  auto sizes = make<VkPhysicalDeviceSubgroupSizeControlPropertiesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES_EXT);
  auto sm = make<VkPhysicalDeviceShaderSMBuiltinsPropertiesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_SM_BUILTINS_PROPERTIES_NV);
  auto amd = make<VkPhysicalDeviceShaderCorePropertiesAMD>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CORE_PROPERTIES_AMD);
  auto props = make<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
  props.pNext = &subgroup;
  subgroup.pNext = &maint3;
  maint3.pNext = &driver;
  void** tail = &driver.pNext;
  // Through the extension only: the instance asks for Vulkan 1.2, so 1.3 core structs do not apply.
  const bool size_control = has(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
  if (size_control) *std::exchange(tail, &sizes.pNext) = &sizes;
  if (has(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME)) *std::exchange(tail, &sm.pNext) = &sm;
  if (has(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME)) *std::exchange(tail, &amd.pNext) = &amd;
  vkGetPhysicalDeviceProperties2(pd, &props);

  auto f11 = make<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
  auto f12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
  auto fsize = make<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
  auto fcoop = make<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
  auto features = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
  features.pNext = &f11;
  f11.pNext = &f12;
  tail = &f12.pNext;
  if (size_control) *std::exchange(tail, &fsize.pNext) = &fsize;
  const bool coop_ext = has(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  if (coop_ext) *std::exchange(tail, &fcoop.pNext) = &fcoop;
  auto fkhr = make<CoopMatFeaturesKhr>(coopmat_khr_features_type);
  const bool khr_ext = has(coopmat_khr_extension);
  if (khr_ext) *std::exchange(tail, &fkhr.pNext) = &fkhr;
  auto fcoop2 = make<CoopMat2FeaturesNv>(coopmat2_nv_features_type);
  const bool coop2_ext = has(coopmat2_nv_extension);
  if (coop2_ext) *std::exchange(tail, &fcoop2.pNext) = &fcoop2;
  vkGetPhysicalDeviceFeatures2(pd, &features);

  std::uint32_t nfam = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, nullptr);
  std::vector<VkQueueFamilyProperties> fams(nfam);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, fams.data());
  auto fam = std::find_if(fams.begin(), fams.end(), [](const VkQueueFamilyProperties& f) {
    return (f.queueFlags & VK_QUEUE_COMPUTE_BIT) && f.queueCount > 0;
  });
  if (fam == fams.end()) return false;

  out.handle = pd;
  out.limits = base.limits;
  out.api_version = base.apiVersion;
  out.queue_family = static_cast<std::uint32_t>(fam - fams.begin());
  out.queue_count = fam->queueCount;
  out.transfer_family = out.queue_family;
  for (std::uint32_t i = 0; i < nfam; ++i)
    if ((fams[i].queueFlags & VK_QUEUE_TRANSFER_BIT) && !(fams[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT)) &&
        fams[i].queueCount > 0) {
      out.transfer_family = i;
      break;
    }
  out.timestamp_bits = fam->timestampValidBits;
  out.timestamp_period = base.limits.timestampPeriod;
  out.max_subgroup_size = size_control ? sizes.maxSubgroupSize : subgroup.subgroupSize;
  out.storage16 = f11.storageBuffer16BitAccess;
  out.float16 = f12.shaderFloat16;
  out.int16 = features.features.shaderInt16;
  out.memory_model = f12.vulkanMemoryModel;
  out.memory_model_device_scope = f12.vulkanMemoryModelDeviceScope;
  out.timeline = f12.timelineSemaphore;
  out.push_descriptor = has(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);
  out.full_subgroups = size_control && fsize.computeFullSubgroups;
  out.subgroup_shuffle = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                         (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
  out.subgroup_arithmetic = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                            (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  // glslang's cooperative-matrix SPIR-V declares the Vulkan memory model.
  out.coopmat_nv = coop_ext && fcoop.cooperativeMatrix && f12.vulkanMemoryModel;
  // The KHR form of ejk's NV shaders (coopmat_khr.hpp) where the device has both.
  out.coopmat_khr = out.coopmat_nv && khr_ext && fkhr.cooperativeMatrix;
  out.coopmat_conversions = out.coopmat_khr && coop2_ext && fcoop2.cooperativeMatrixConversions;
  out.integrated = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU || base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  out.cpu = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  vkGetPhysicalDeviceMemoryProperties(pd, &out.memory);

  DeviceInfo& info = out.info;
  info.backend = Backend::vulkan;
  info.index = index;
  info.vendor = vendor_name(base.vendorID);
  info.name = base.deviceName;
  info.driver = driver_version(base, driver);
  info.api_version = "Vulkan " + version_text(base.apiVersion);
  info.architecture = architecture(base, driver);
  info.discrete = base.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU;
  if (has(VK_NV_SHADER_SM_BUILTINS_EXTENSION_NAME) && sm.shaderSMCount)
    info.compute_units = sm.shaderSMCount;
  else if (has(VK_AMD_SHADER_CORE_PROPERTIES_EXTENSION_NAME) && amd.shaderEngineCount)
    info.compute_units = amd.shaderEngineCount * amd.shaderArraysPerEngineCount * amd.computeUnitsPerShaderArray;
  else if (base.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU)
    info.compute_units = std::max(1u, std::thread::hardware_concurrency());  // lavapipe runs a thread per core
  else
    info.compute_units = 1;
  for (std::uint32_t h = 0; h < out.memory.memoryHeapCount; ++h)
    if (out.memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      info.global_mem = std::max<std::uint64_t>(info.global_mem, out.memory.memoryHeaps[h].size);
  info.max_buffer = std::min<std::uint64_t>(base.limits.maxStorageBufferRange, maint3.maxMemoryAllocationSize);
  info.local_mem = base.limits.maxComputeSharedMemorySize;
  info.max_workgroup_size = base.limits.maxComputeWorkGroupInvocations;
  for (int i = 0; i < 3; ++i) info.max_workgroup_dims[static_cast<std::size_t>(i)] = base.limits.maxComputeWorkGroupSize[i];
  info.subgroups = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                   (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
  info.subgroup_size = info.subgroups ? subgroup.subgroupSize : 0;
  info.fp16 = out.float16 && out.storage16;
  info.bf16 = false;  // no bfloat16 arithmetic through the extensions these headers know
  if (out.coopmat_nv) info.coopmat = coopmat_shapes(instance, pd);
  return true;
}

}  // namespace

Instance& Instance::get() {
  static Instance* instance = new Instance;
  return *instance;
}

Instance::Instance() {
  bool want_validation = validation_requested();
  if (want_validation && !has_layer(validation_layer))
    std::fprintf(stderr, "ejk: EJK_VULKAN_VALIDATION=1 but %s is not installed; Vulkan runs without validation\n",
                 validation_layer);
  validation_ = want_validation && has_layer(validation_layer);

  std::vector<const char*> layers, extensions;
  auto messenger_info = make<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
  messenger_info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger_info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger_info.pfnUserCallback = on_message;
  // Synchronization validation as well, for hazards between dispatches and transfers.
  const VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  auto features = make<VkValidationFeaturesEXT>(VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT);
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = enables;

  auto app = make<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.pApplicationName = "ejk";
  app.pEngineName = "ejk";
  app.apiVersion = VK_API_VERSION_1_2;
  auto info = make<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  info.pApplicationInfo = &app;
  if (validation_) {
    layers.push_back(validation_layer);
    if (instance_extensions(nullptr).count(VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      info.pNext = &messenger_info;  // also reports problems in instance creation itself
      if (instance_extensions(validation_layer).count(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
        extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
        messenger_info.pNext = &features;
      }
    } else {
      std::fprintf(stderr, "ejk: %s lacks %s; validation messages cannot be counted\n", validation_layer,
                   VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      validation_ = false;
      layers.clear();
    }
  }
  info.enabledLayerCount = static_cast<std::uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
  info.ppEnabledExtensionNames = extensions.data();
  if (vkCreateInstance(&info, nullptr, &instance_) != VK_SUCCESS) {
    instance_ = VK_NULL_HANDLE;  // no driver: no Vulkan devices
    validation_ = false;
    return;
  }
  if (validation_) {
    messenger_info.pNext = nullptr;
    auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
    if (!create || create(instance_, &messenger_info, nullptr, &messenger_) != VK_SUCCESS) validation_ = false;
  }

  std::uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(instance_, &n, nullptr) != VK_SUCCESS) return;
  std::vector<VkPhysicalDevice> pds(n);
  if (vkEnumeratePhysicalDevices(instance_, &n, pds.data()) != VK_SUCCESS) return;
  pds.resize(n);
  for (VkPhysicalDevice pd : pds) {
    PhysicalDevice d;
    if (describe(instance_, pd, static_cast<int>(devices_.size()), d)) devices_.push_back(std::move(d));
  }
}

const PhysicalDevice& physical_device(int index) {
  const auto& all = Instance::get().devices();
  if (index < 0 || static_cast<std::size_t>(index) >= all.size())
    throw InvalidArgument("device 'vulkan:" + std::to_string(index) + "' not found (" + std::to_string(all.size()) +
                          " Vulkan devices)");
  return all[static_cast<std::size_t>(index)];
}

bool validation_active() { return Instance::get().validation(); }

}  // namespace ejk::vulkan
