#include "backends/vulkan/vulkan_device.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>

#include "backends/program_store.hpp"
#include "backends/vulkan/coopmat_khr.hpp"
#include "backends/vulkan/vk_util.hpp"
#include "core/backend_registry.hpp"
#include "core/difference.hpp"
#include "core/embedded.hpp"
#include "core/fill.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"

namespace ejk::vulkan {

// The VkDevice. Buffers hold it too, so it outlives the VulkanDevice while they exist.
struct Core {
  VkDevice device = VK_NULL_HANDLE;
  Core() = default;
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core() {
    if (device) {
      vkDeviceWaitIdle(device);
      vkDestroyDevice(device, nullptr);
    }
  }
};

struct Allocation {
  std::shared_ptr<Core> core;  // first, so it is released last
  OwnedBuffer buffer;
  OwnedMemory memory;
  void* mapped = nullptr;  // host address when the memory is host-visible
  VkDeviceSize size = 0;   // of the VkBuffer
  VkDeviceSize range = 0;  // bound as a storage buffer
};

// A timeline semaphore; fences on it keep it (and the VkDevice) alive.
struct Timeline {
  std::shared_ptr<Core> core;  // first, so it is released last
  OwnedSemaphore semaphore;
};

namespace {

// The point of a timeline where it reaches `value`.
class TimelineFence final : public Fence {
 public:
  TimelineFence(std::shared_ptr<Timeline> timeline, std::uint64_t value) : timeline_(std::move(timeline)), value_(value) {}
  const Timeline* timeline() const { return timeline_.get(); }
  std::uint64_t value() const { return value_; }
  bool reached() override {
    std::uint64_t now = 0;
    check(vkGetSemaphoreCounterValue(timeline_->core->device, timeline_->semaphore.get(), &now), "vkGetSemaphoreCounterValue");
    return now >= value_;
  }
  void wait() override {
    VkSemaphore sem = timeline_->semaphore.get();
    auto wi = make<VkSemaphoreWaitInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO);
    wi.semaphoreCount = 1;
    wi.pSemaphores = &sem;
    wi.pValues = &value_;
    check(vkWaitSemaphores(timeline_->core->device, &wi, UINT64_MAX), "vkWaitSemaphores");
  }

 private:
  std::shared_ptr<Timeline> timeline_;
  std::uint64_t value_;
};

class VulkanHostBuffer final : public HostBuffer {
 public:
  VulkanHostBuffer(std::size_t bytes, std::shared_ptr<Allocation> a)
      : HostBuffer(static_cast<std::byte*>(a->mapped), bytes, true), allocation_(std::move(a)) {}
  // Shared with the transfers that use it, like a VulkanBuffer's.
  const std::shared_ptr<Allocation>& allocation() const { return allocation_; }

 private:
  std::shared_ptr<Allocation> allocation_;
};

}  // namespace

VulkanBuffer::VulkanBuffer(std::size_t bytes, std::shared_ptr<Allocation> allocation)
    : Buffer(bytes), allocation_(std::move(allocation)) {}
VulkanBuffer::~VulkanBuffer() = default;

namespace {

// Commands in one batch before it is submitted, so the device starts while more are recorded.
constexpr std::uint32_t batch_commands = 64;
// Descriptor sets per pool on devices without push descriptors.
constexpr std::uint32_t pool_sets = 64;
constexpr std::uint32_t pool_descriptors = pool_sets * 8;

enum class Memory { device, upload, download };

const VulkanBuffer& buffer_of(const Buffer& b, const Core* core, const char* what) {
  const auto* vb = dynamic_cast<const VulkanBuffer*>(&b);
  if (!vb || vb->allocation()->core.get() != core)
    throw InvalidArgument(std::string(what) + ": the buffer does not belong to this Vulkan device");
  return *vb;
}

// The first type allowed by `bits` with every flag of `want` and none of `avoid`.
int memory_type(const VkPhysicalDeviceMemoryProperties& mp, std::uint32_t bits, VkMemoryPropertyFlags want,
                VkMemoryPropertyFlags avoid = 0) {
  for (std::uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    const VkMemoryPropertyFlags f = mp.memoryTypes[i].propertyFlags;
    if ((bits & (1u << i)) && (f & want) == want && (f & avoid) == 0) return static_cast<int>(i);
  }
  return -1;
}

std::string spec_text(const Launch& l) {
  std::string s = std::string(l.spirv) + " local " + std::to_string(l.local_size[0]) + "x" +
                  std::to_string(l.local_size[1]) + "x" + std::to_string(l.local_size[2]) + " spec [";
  for (std::size_t i = 0; i < l.spec.size(); ++i) s += (i ? ", " : "") + std::to_string(l.spec[i]);
  return s + "]";
}

}  // namespace

CopyPath copy_path_from_env() {
  const char* v = std::getenv("EJK_VULKAN_COPY");
  if (!v || !*v) return CopyPath::automatic;
  const std::string_view value(v);
  if (value == "auto") return CopyPath::automatic;
  if (value == "transfer") return CopyPath::transfer;
  if (value == "shader") return CopyPath::shader;
  throw InvalidArgument("EJK_VULKAN_COPY=" + std::string(value) + ": expected transfer, shader or auto");
}

bool coopmat_khr_from_env() {
  const char* v = std::getenv("EJK_VULKAN_COOPMAT");
  if (!v || !*v) return true;
  const std::string_view value(v);
  if (value == "khr") return true;
  if (value == "nv") return false;
  throw InvalidArgument("EJK_VULKAN_COOPMAT=" + std::string(value) + ": expected khr or nv");
}

struct VulkanDevice::State {
  struct Batch {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    OwnedFence fence;
    std::vector<std::shared_ptr<Allocation>> keep;  // buffers its commands use
    std::vector<OwnedDescriptorPool> pools;
    std::size_t pool = 0;  // the pool sets come from now
    std::uint32_t pool_sets_used = 0, pool_descriptors_used = 0;
    std::uint32_t commands = 0;
  };
  struct Layout {
    OwnedDescriptorSetLayout set;
    OwnedPipelineLayout pipeline;
  };
  struct Pipeline {
    OwnedPipeline pipeline;
    const Layout* layout = nullptr;
    std::uint32_t bindings = 0;
  };

  const PhysicalDevice& pd;
  std::shared_ptr<Core> core;  // before every device object, so it is destroyed after them
  VkQueue queue = VK_NULL_HANDLE;
  bool push_descriptors = false;
  bool full_subgroups = false;
  bool map_device_memory = false;  // tensors live in mapped memory: no staging copies
  CopyPath copy_path = CopyPath::automatic;
  bool coopmat_khr = false;          // cooperative-matrix modules go in their KHR form
  bool coopmat_conversions = false;  // ... also those that convert a matrix's use
  PFN_vkCmdPushDescriptorSetKHR push_descriptor_fn = nullptr;

  mutable std::mutex mutex;  // the stream, the caches and the queue
  OwnedCommandPool command_pool;
  OwnedPipelineCache pipeline_cache;
  // Each pipeline's cache data kept across processes; by default on every device but CPUs.
  std::optional<ProgramStore> store;
  std::map<std::string, std::string, std::less<>> spirv_hashes;  // module key -> sha256 of the words built
  OwnedQueryPool queries;
  // time_passes: its pool (made on first use) and the names of the dispatches timed so far;
  // query 0 marks the start, query i + 1 the end of dispatch i.
  static constexpr std::uint32_t pass_queries_count = 1024;
  OwnedQueryPool pass_queries;
  std::vector<std::string>* passes = nullptr;
  std::map<std::string, OwnedShaderModule, std::less<>> modules;
  std::map<std::pair<std::uint32_t, std::uint32_t>, Layout> layouts;
  std::unordered_map<std::string, Pipeline> pipelines;
  PipelineStats stats;
  std::unique_ptr<Batch> recording;
  std::deque<std::unique_ptr<Batch>> in_flight;
  std::vector<std::unique_ptr<Batch>> spare;
  std::mutex timing;

  // ---- the transfer queue (upload, download; callers hold `mutex`) ----
  bool timelines = false;  // without timeline semaphores, Device's synchronous copies instead
  VkQueue transfer_queue = VK_NULL_HANDLE;
  bool concurrent = false;  // the transfer queue is of another family: buffers are shared by both
  OwnedCommandPool transfer_pool;
  // Every compute batch signals the next value of `computed`, every transfer that of `moved`.
  std::shared_ptr<Timeline> computed, moved;
  std::uint64_t computed_value = 0, moved_value = 0;
  std::uint64_t compute_waits_for = 0;  // the `moved` value the next compute batch waits for
  struct Copy {
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    std::uint64_t value = 0;
    std::vector<std::shared_ptr<Allocation>> keep;
  };
  std::deque<Copy> copies;
  std::vector<VkCommandBuffer> spare_copies;

  State(int index, DeviceOptions options) : pd(physical_device(index)), core(std::make_shared<Core>()) {
    const float priorities[2] = {1.f, 1.f};
    // Transfers on a family of their own (the copy engines) where there is one, else on a second
    // queue of the compute family, else on the compute queue itself.
    timelines = pd.timeline;
    concurrent = timelines && pd.transfer_family != pd.queue_family;
    const bool second = timelines && !concurrent && pd.queue_count >= 2;
    VkDeviceQueueCreateInfo queue_infos[2];
    std::uint32_t queue_info_count = 1;
    queue_infos[0] = make<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    queue_infos[0].queueFamilyIndex = pd.queue_family;
    queue_infos[0].queueCount = second ? 2 : 1;
    queue_infos[0].pQueuePriorities = priorities;
    if (concurrent) {
      queue_infos[1] = queue_infos[0];
      queue_infos[1].queueFamilyIndex = pd.transfer_family;
      queue_infos[1].queueCount = 1;
      queue_info_count = 2;
    }

    std::vector<const char*> extensions;
    auto features = make<VkPhysicalDeviceFeatures2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2);
    auto f11 = make<VkPhysicalDeviceVulkan11Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES);
    auto f12 = make<VkPhysicalDeviceVulkan12Features>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES);
    auto fsize = make<VkPhysicalDeviceSubgroupSizeControlFeaturesEXT>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT);
    auto fcoop = make<VkPhysicalDeviceCooperativeMatrixFeaturesNV>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV);
    features.pNext = &f11;
    f11.pNext = &f12;
    void** tail = &f12.pNext;
    features.features.shaderInt16 = pd.int16;
    f11.storageBuffer16BitAccess = pd.storage16;
    f12.shaderFloat16 = pd.float16;
    f12.vulkanMemoryModel = pd.memory_model;
    f12.vulkanMemoryModelDeviceScope = pd.memory_model && pd.memory_model_device_scope;
    f12.timelineSemaphore = timelines;
    if (pd.full_subgroups) {
      extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
      fsize.computeFullSubgroups = VK_TRUE;
      *std::exchange(tail, &fsize.pNext) = &fsize;
      full_subgroups = true;
    }
    if (pd.coopmat_nv) {
      extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
      fcoop.cooperativeMatrix = VK_TRUE;
      *std::exchange(tail, &fcoop.pNext) = &fcoop;
    }
    auto fkhr = make<CoopMatFeaturesKhr>(coopmat_khr_features_type);
    auto fcoop2 = make<CoopMat2FeaturesNv>(coopmat2_nv_features_type);
    coopmat_khr = pd.coopmat_khr && options.coopmat_khr;
    if (coopmat_khr) {
      extensions.push_back(coopmat_khr_extension);
      fkhr.cooperativeMatrix = VK_TRUE;
      *std::exchange(tail, &fkhr.pNext) = &fkhr;
    }
    coopmat_conversions = coopmat_khr && pd.coopmat_conversions;
    if (coopmat_conversions) {
      extensions.push_back(coopmat2_nv_extension);
      fcoop2.cooperativeMatrixConversions = VK_TRUE;
      *std::exchange(tail, &fcoop2.pNext) = &fcoop2;
    }
    push_descriptors = pd.push_descriptor && options.push_descriptors;
    map_device_memory = pd.integrated && !options.staging;
    copy_path = options.copy;
    if (push_descriptors) extensions.push_back(VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME);

    auto info = make<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    info.pNext = &features;
    info.queueCreateInfoCount = queue_info_count;
    info.pQueueCreateInfos = queue_infos;
    info.enabledExtensionCount = static_cast<std::uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    check(vkCreateDevice(pd.handle, &info, nullptr, &core->device), "vkCreateDevice");
    VkDevice dev = core->device;
    vkGetDeviceQueue(dev, pd.queue_family, 0, &queue);
    transfer_queue = queue;
    if (concurrent) vkGetDeviceQueue(dev, pd.transfer_family, 0, &transfer_queue);
    else if (second) vkGetDeviceQueue(dev, pd.queue_family, 1, &transfer_queue);
    if (push_descriptors) {
      push_descriptor_fn = reinterpret_cast<PFN_vkCmdPushDescriptorSetKHR>(vkGetDeviceProcAddr(dev, "vkCmdPushDescriptorSetKHR"));
      if (!push_descriptor_fn) push_descriptors = false;
    }

    auto pool_info = make<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    pool_info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pool_info.queueFamilyIndex = pd.queue_family;
    VkCommandPool pool;
    check(vkCreateCommandPool(dev, &pool_info, nullptr, &pool), "vkCreateCommandPool");
    command_pool = OwnedCommandPool(dev, pool);
    if (timelines) {
      pool_info.queueFamilyIndex = concurrent ? pd.transfer_family : pd.queue_family;
      check(vkCreateCommandPool(dev, &pool_info, nullptr, &pool), "vkCreateCommandPool");
      transfer_pool = OwnedCommandPool(dev, pool);
      computed = timeline();
      moved = timeline();
    }

    auto cache_info = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
    VkPipelineCache cache;
    check(vkCreatePipelineCache(dev, &cache_info, nullptr, &cache), "vkCreatePipelineCache");
    pipeline_cache = OwnedPipelineCache(dev, cache);
    store = ProgramStore::open("vulkan", !pd.cpu);

    if (pd.timestamp_bits) queries = timestamp_pool(2);
  }

  ~State() {
    std::lock_guard lock(mutex);
    try {
      wait_all();
      wait_transfers();
    } catch (...) {
      // A lost device cannot be waited for; destruction goes on.
    }
    if (core->device) vkDeviceWaitIdle(core->device);
  }

  VkDevice device() const { return core->device; }
  std::string id() const { return pd.info.id(); }

  std::shared_ptr<Allocation> allocate(std::size_t bytes, Memory kind) {
    const std::uint64_t limit = pd.info.max_buffer;
    if (bytes > limit)
      throw ResourceError(id() + ": a buffer of " + std::to_string(bytes) + " bytes exceeds the largest storage buffer (" +
                          std::to_string(limit) + " bytes)");
    // Rounded up so vector loads of a 16-bit tail stay inside the buffer.
    VkDeviceSize size = std::max<VkDeviceSize>(16, (bytes + 15) / 16 * 16);
    if (size > limit) size = std::max<VkDeviceSize>(bytes, 4);
    auto a = std::make_shared<Allocation>();
    a->core = core;
    a->size = size;
    a->range = std::min<VkDeviceSize>(size, pd.limits.maxStorageBufferRange);
    auto bi = make<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bi.size = size;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    // Both queues' families use every buffer: shared, rather than handed over between the
    // queues with ownership barriers at every transfer.
    const std::uint32_t families[2] = {pd.queue_family, pd.transfer_family};
    if (concurrent) {
      bi.sharingMode = VK_SHARING_MODE_CONCURRENT;
      bi.queueFamilyIndexCount = 2;
      bi.pQueueFamilyIndices = families;
    }
    VkBuffer buf;
    check(vkCreateBuffer(device(), &bi, nullptr, &buf), "vkCreateBuffer");
    a->buffer = OwnedBuffer(device(), buf);
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device(), buf, &req);

    constexpr VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type = -1;
    switch (kind) {
      case Memory::device:
        // Integrated GPUs and CPUs see host-visible memory as fast as any: no staging there.
        if (map_device_memory) type = memory_type(pd.memory, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | host);
        // Unmapped tensors skip device-local types the host can see where there are others: on
        // discrete GPUs those are the PCIe BAR window (256 MiB without resizable BAR), whose
        // order among the types is the driver's choice.
        if (type < 0)
          type = memory_type(pd.memory, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT,
                             VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT);
        if (type < 0) type = memory_type(pd.memory, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
        break;
      case Memory::upload: type = memory_type(pd.memory, req.memoryTypeBits, host); break;
      case Memory::download:
        type = memory_type(pd.memory, req.memoryTypeBits, host | VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
        if (type < 0) type = memory_type(pd.memory, req.memoryTypeBits, host);
        break;
    }
    if (type < 0) type = memory_type(pd.memory, req.memoryTypeBits, 0);
    if (type < 0) throw DeviceError(id() + ": no memory type for a buffer of " + std::to_string(bytes) + " bytes");
    auto ai = make<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    ai.allocationSize = req.size;
    ai.memoryTypeIndex = static_cast<std::uint32_t>(type);
    VkDeviceMemory mem;
    VkResult r = vkAllocateMemory(device(), &ai, nullptr, &mem);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY)
      throw ResourceError(id() + ": cannot allocate a buffer of " + std::to_string(bytes) + " bytes: " + result_name(r));
    check(r, "vkAllocateMemory");
    a->memory = OwnedMemory(device(), mem);
    check(vkBindBufferMemory(device(), buf, mem, 0), "vkBindBufferMemory");
    const bool visible = pd.memory.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
    if (visible && (kind != Memory::device || map_device_memory))
      check(vkMapMemory(device(), mem, 0, VK_WHOLE_SIZE, 0, &a->mapped), "vkMapMemory");
    return a;
  }

  // ---- the stream (callers hold `mutex`) ----

  std::unique_ptr<Batch> take_batch() {
    if (!spare.empty()) {
      auto b = std::move(spare.back());
      spare.pop_back();
      return b;
    }
    auto b = std::make_unique<Batch>();
    auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ai.commandPool = command_pool.get();
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device(), &ai, &b->cmd), "vkAllocateCommandBuffers");
    auto fi = make<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    VkFence f;
    check(vkCreateFence(device(), &fi, nullptr, &f), "vkCreateFence");
    b->fence = OwnedFence(device(), f);
    return b;
  }

  void recycle(std::unique_ptr<Batch> b) {
    VkFence f = b->fence.get();
    check(vkResetFences(device(), 1, &f), "vkResetFences");
    check(vkResetCommandBuffer(b->cmd, 0), "vkResetCommandBuffer");
    b->keep.clear();
    for (auto& p : b->pools) check(vkResetDescriptorPool(device(), p.get(), 0), "vkResetDescriptorPool");
    b->pool = 0;
    b->pool_sets_used = b->pool_descriptors_used = 0;
    b->commands = 0;
    spare.push_back(std::move(b));
  }

  // Opens the batch if needed and orders the next command after everything before it, in
  // this batch and in earlier submissions, for reads and writes alike.
  VkCommandBuffer begin_command() {
    if (!recording) {
      recording = take_batch();
      auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      check(vkBeginCommandBuffer(recording->cmd, &bi), "vkBeginCommandBuffer");
    }
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    constexpr VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vkCmdPipelineBarrier(recording->cmd, stages, stages, 0, 1, &mb, 0, nullptr, 0, nullptr);
    ++recording->commands;
    return recording->cmd;
  }

  void flush() {
    if (!recording || recording->commands == 0) return;
    // Device writes become visible to host reads of mapped memory once the fence signals.
    auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(recording->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    auto batch = std::move(recording);
    check(vkEndCommandBuffer(batch->cmd), "vkEndCommandBuffer");
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.commandBufferCount = 1;
    si.pCommandBuffers = &batch->cmd;
    auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    VkSemaphore signal = VK_NULL_HANDLE, wait = VK_NULL_HANDLE;
    std::uint64_t signal_value = 0, wait_value = compute_waits_for;
    const VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
    if (timelines) {
      signal = computed->semaphore.get();
      signal_value = computed_value + 1;
      si.pNext = &ti;
      si.signalSemaphoreCount = 1;
      si.pSignalSemaphores = &signal;
      ti.signalSemaphoreValueCount = 1;
      ti.pSignalSemaphoreValues = &signal_value;
      if (wait_value) {
        wait = moved->semaphore.get();
        si.waitSemaphoreCount = 1;
        si.pWaitSemaphores = &wait;
        si.pWaitDstStageMask = &wait_stage;
        ti.waitSemaphoreValueCount = 1;
        ti.pWaitSemaphoreValues = &wait_value;
      }
    }
    check(vkQueueSubmit(queue, 1, &si, batch->fence.get()), "vkQueueSubmit");
    computed_value = signal_value;
    compute_waits_for = 0;
    in_flight.push_back(std::move(batch));
  }

  std::shared_ptr<Timeline> timeline() {
    auto ti = make<VkSemaphoreTypeCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO);
    ti.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    auto ci = make<VkSemaphoreCreateInfo>(VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO);
    ci.pNext = &ti;
    VkSemaphore sem;
    check(vkCreateSemaphore(device(), &ci, nullptr, &sem), "vkCreateSemaphore");
    auto t = std::make_shared<Timeline>();
    t->core = core;
    t->semaphore = OwnedSemaphore(device(), sem);
    return t;
  }

  std::uint64_t moved_now() const {
    std::uint64_t now = 0;
    check(vkGetSemaphoreCounterValue(device(), moved->semaphore.get(), &now), "vkGetSemaphoreCounterValue");
    return now;
  }

  void reclaim_transfers() {
    if (copies.empty()) return;
    const std::uint64_t now = moved_now();
    while (!copies.empty() && copies.front().value <= now) {
      check(vkResetCommandBuffer(copies.front().cmd, 0), "vkResetCommandBuffer");
      spare_copies.push_back(copies.front().cmd);
      copies.pop_front();
    }
  }

  void wait_transfers() {
    if (copies.empty()) return;
    TimelineFence(moved, moved_value).wait();
    reclaim_transfers();
  }

  // One copy between a host buffer's allocation and a device buffer's on the transfer queue,
  // after the fence `after_fence` (of `computed` or `moved`, or null) and after the transfer
  // queued before it (submissions to one queue may overlap otherwise). Returns the fence of the
  // `moved` value it signals.
  FencePtr transfer(const std::shared_ptr<Allocation>& from, VkDeviceSize from_offset,
                    const std::shared_ptr<Allocation>& to, VkDeviceSize to_offset, VkDeviceSize bytes, bool to_host,
                    const FencePtr& after_fence) {
    const TimelineFence* after = own(after_fence);
    reclaim_transfers();
    Copy c;
    if (!spare_copies.empty()) {
      c.cmd = spare_copies.back();
      spare_copies.pop_back();
    } else {
      auto ai = make<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
      ai.commandPool = transfer_pool.get();
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      check(vkAllocateCommandBuffers(device(), &ai, &c.cmd), "vkAllocateCommandBuffers");
    }
    auto bi = make<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(c.cmd, &bi), "vkBeginCommandBuffer");
    if (bytes) {
      VkBufferCopy region{from_offset, to_offset, bytes};
      vkCmdCopyBuffer(c.cmd, from->buffer.get(), to->buffer.get(), 1, &region);
    }
    if (to_host) {
      // The copy's writes become visible to host reads once the semaphore is seen reached.
      auto mb = make<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
      mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(c.cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                           nullptr);
    }
    check(vkEndCommandBuffer(c.cmd), "vkEndCommandBuffer");
    VkSemaphore waits[2];
    std::uint64_t wait_values[2];
    const VkPipelineStageFlags stages[2] = {VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT};
    std::uint32_t n = 0;
    if (moved_value) waits[n] = moved->semaphore.get(), wait_values[n++] = moved_value;
    if (after) waits[n] = after->timeline()->semaphore.get(), wait_values[n++] = after->value();
    const std::uint64_t signal_value = moved_value + 1;
    VkSemaphore signal = moved->semaphore.get();
    auto ti = make<VkTimelineSemaphoreSubmitInfo>(VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    ti.waitSemaphoreValueCount = n;
    ti.pWaitSemaphoreValues = wait_values;
    ti.signalSemaphoreValueCount = 1;
    ti.pSignalSemaphoreValues = &signal_value;
    auto si = make<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.pNext = &ti;
    si.waitSemaphoreCount = n;
    si.pWaitSemaphores = waits;
    si.pWaitDstStageMask = stages;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &c.cmd;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &signal;
    check(vkQueueSubmit(transfer_queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit(transfers)");
    moved_value = signal_value;
    c.value = signal_value;
    c.keep = {from, to};
    copies.push_back(std::move(c));
    return std::make_shared<TimelineFence>(moved, signal_value);
  }

  // `f` as a fence of this device's timelines; null for a null fence.
  const TimelineFence* own(const FencePtr& f) const {
    if (!f) return nullptr;
    auto* t = dynamic_cast<const TimelineFence*>(f.get());
    if (!t || (t->timeline() != computed.get() && t->timeline() != moved.get()))
      throw InvalidArgument(id() + ": a fence of another device or backend");
    return t;
  }

  OwnedQueryPool timestamp_pool(std::uint32_t count) const {
    auto q = make<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
    q.queryType = VK_QUERY_TYPE_TIMESTAMP;
    q.queryCount = count;
    VkQueryPool qp;
    check(vkCreateQueryPool(device(), &q, nullptr, &qp), "vkCreateQueryPool");
    return OwnedQueryPool(device(), qp);
  }

  // Nanoseconds between two timestamps of the compute queue (which wrap at timestamp_bits).
  double elapsed_ns(std::uint64_t from, std::uint64_t to) const {
    const std::uint64_t mask = pd.timestamp_bits >= 64 ? ~0ull : (1ull << pd.timestamp_bits) - 1;
    return static_cast<double>((to - from) & mask) * static_cast<double>(pd.timestamp_period);
  }

  void wait_all() {
    flush();
    while (!in_flight.empty()) {
      VkFence f = in_flight.front()->fence.get();
      check(vkWaitForFences(device(), 1, &f, VK_TRUE, UINT64_MAX), "vkWaitForFences");
      auto b = std::move(in_flight.front());
      in_flight.pop_front();
      recycle(std::move(b));
    }
    staged = 0;
  }

  // Upload staging buffers live until their copies finish: writes wait once this many bytes
  // are pending, so uploading a tensor of any size holds a bounded amount of host memory.
  static constexpr std::size_t max_staged = std::size_t{256} << 20;
  std::size_t staged = 0;

  void reclaim() {
    while (!in_flight.empty() && vkGetFenceStatus(device(), in_flight.front()->fence.get()) == VK_SUCCESS) {
      auto b = std::move(in_flight.front());
      in_flight.pop_front();
      recycle(std::move(b));
    }
  }

  bool idle() const { return in_flight.empty() && (!recording || recording->commands == 0); }

  void after_command() {
    if (recording && recording->commands >= batch_commands) {
      flush();
      reclaim();
    }
  }

  // ---- pipelines (callers hold `mutex`) ----

  VkShaderModule module(std::string_view key) {
    auto it = modules.find(key);
    if (it != modules.end()) return it->second.get();
    const auto& file = detail::embedded(key);
    std::span<const std::uint32_t> words(reinterpret_cast<const std::uint32_t*>(file.data), file.size / 4);
    KhrModule khr;
    if (coopmat_khr) {
      khr = coopmat_to_khr(words);
      if (!khr.words.empty() && (!khr.conversions || coopmat_conversions)) words = khr.words;
    }
    if (store)  // the stored pipelines' key
      spirv_hashes.insert_or_assign(std::string(key), detail::sha256_hex(std::string_view(reinterpret_cast<const char*>(words.data()), words.size_bytes())));
    auto mi = make<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
    mi.codeSize = words.size_bytes();
    mi.pCode = words.data();
    VkShaderModule m;
    check(vkCreateShaderModule(device(), &mi, nullptr, &m), "vkCreateShaderModule");
    return modules.emplace(std::string(key), OwnedShaderModule(device(), m)).first->second.get();
  }

  const Layout& layout(std::uint32_t bindings, std::uint32_t push_size) {
    auto key = std::make_pair(bindings, push_size);
    auto it = layouts.find(key);
    if (it != layouts.end()) return it->second;
    std::vector<VkDescriptorSetLayoutBinding> b(bindings);
    for (std::uint32_t i = 0; i < bindings; ++i)
      b[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    auto li = make<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
    if (push_descriptors) li.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR;
    li.bindingCount = bindings;
    li.pBindings = b.data();
    VkDescriptorSetLayout dsl;
    check(vkCreateDescriptorSetLayout(device(), &li, nullptr, &dsl), "vkCreateDescriptorSetLayout");
    Layout out;
    out.set = OwnedDescriptorSetLayout(device(), dsl);
    VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size};
    auto pi = make<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
    pi.setLayoutCount = 1;
    pi.pSetLayouts = &dsl;
    pi.pushConstantRangeCount = push_size ? 1 : 0;
    pi.pPushConstantRanges = &range;
    VkPipelineLayout pl;
    check(vkCreatePipelineLayout(device(), &pi, nullptr, &pl), "vkCreatePipelineLayout");
    out.pipeline = OwnedPipelineLayout(device(), pl);
    return layouts.emplace(key, std::move(out)).first->second;
  }

  const Pipeline& pipeline(const Launch& l, std::uint32_t push_size) {
    std::string key(l.spirv);
    key.reserve(key.size() + 16 * (l.spec.size() + 6));
    auto add = [&](std::uint32_t v) { key += ' ' + std::to_string(v); };
    for (auto v : l.local_size) add(v);
    key += " |";
    for (auto v : l.spec) add(v);
    key += " |";
    add(static_cast<std::uint32_t>(l.buffers.size()));
    add(push_size);
    // Full subgroups need a workgroup width that is a multiple of the largest subgroup.
    const bool full = l.full_subgroups && full_subgroups && pd.max_subgroup_size && l.local_size[0] % pd.max_subgroup_size == 0;
    add(full);
    auto it = pipelines.find(key);
    if (it != pipelines.end()) {
      ++stats.hits;
      return it->second;
    }
    const Layout& lay = layout(static_cast<std::uint32_t>(l.buffers.size()), push_size);
    std::vector<std::uint32_t> data(l.local_size.begin(), l.local_size.end());
    data.insert(data.end(), l.spec.begin(), l.spec.end());
    std::vector<VkSpecializationMapEntry> entries(data.size());
    for (std::uint32_t i = 0; i < data.size(); ++i) entries[i] = {i, i * 4u, 4};
    VkSpecializationInfo si{static_cast<std::uint32_t>(entries.size()), entries.data(), data.size() * 4, data.data()};
    auto ci = make<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
    ci.stage = make<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
    if (full) ci.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT_EXT;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module(l.spirv);
    ci.stage.pName = "main";
    ci.stage.pSpecializationInfo = &si;
    ci.layout = lay.pipeline.get();
    // With a store, the pipeline gets a cache of its own, seeded from what an earlier process
    // kept for it: the driver then skips the compile.
    VkPipelineCache cache = pipeline_cache.get();
    OwnedPipelineCache own;
    std::string stored_key;
    bool seeded = false;
    if (store) {
      stored_key = pd.info.fingerprint() + '\n' + spirv_hashes.at(std::string(l.spirv)) + '\n' + key;
      const auto stored = store->load(stored_key);
      auto pci = make<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
      if (stored) {
        pci.initialDataSize = stored->size();
        pci.pInitialData = stored->data();
      }
      VkPipelineCache c;
      if (vkCreatePipelineCache(device(), &pci, nullptr, &c) == VK_SUCCESS) {
        own = OwnedPipelineCache(device(), c);
        cache = c;
        seeded = stored.has_value();
      }
    }
    VkPipeline p;
    VkResult r = vkCreateComputePipelines(device(), cache, 1, &ci, nullptr, &p);
    if (r != VK_SUCCESS) throw CompileError(id() + ": cannot build the pipeline for " + spec_text(l) + ": " + result_name(r));
    ++stats.created;
    if (seeded) ++stats.loaded;
    if (own && !seeded) {
      std::size_t size = 0;
      if (vkGetPipelineCacheData(device(), cache, &size, nullptr) == VK_SUCCESS && size > 0) {
        std::vector<unsigned char> bytes(size);
        if (vkGetPipelineCacheData(device(), cache, &size, bytes.data()) == VK_SUCCESS) {
          bytes.resize(size);
          store->store(stored_key, bytes);
        }
      }
    }
    Pipeline out{OwnedPipeline(device(), p), &lay, static_cast<std::uint32_t>(l.buffers.size())};
    return pipelines.emplace(std::move(key), std::move(out)).first->second;
  }

  VkDescriptorSet allocate_set(const Layout& lay, std::uint32_t bindings) {
    Batch& b = *recording;
    if (b.pool < b.pools.size() &&
        (b.pool_sets_used + 1 > pool_sets || b.pool_descriptors_used + bindings > pool_descriptors)) {
      ++b.pool;
      b.pool_sets_used = b.pool_descriptors_used = 0;
    }
    if (b.pool == b.pools.size()) {
      VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pool_descriptors};
      auto pi = make<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
      pi.maxSets = pool_sets;
      pi.poolSizeCount = 1;
      pi.pPoolSizes = &size;
      VkDescriptorPool p;
      check(vkCreateDescriptorPool(device(), &pi, nullptr, &p), "vkCreateDescriptorPool");
      b.pools.emplace_back(device(), p);
    }
    VkDescriptorSetLayout dsl = lay.set.get();
    auto ai = make<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
    ai.descriptorPool = b.pools[b.pool].get();
    ai.descriptorSetCount = 1;
    ai.pSetLayouts = &dsl;
    VkDescriptorSet set;
    check(vkAllocateDescriptorSets(device(), &ai, &set), "vkAllocateDescriptorSets");
    ++b.pool_sets_used;
    b.pool_descriptors_used += bindings;
    return set;
  }
};

VulkanDevice::VulkanDevice(int index, DeviceOptions options) : state_(std::make_unique<State>(index, options)) {}
VulkanDevice::~VulkanDevice() = default;

const DeviceInfo& VulkanDevice::info() const { return state_->pd.info; }
const PhysicalDevice& VulkanDevice::physical() const { return state_->pd; }
bool VulkanDevice::uses_push_descriptors() const { return state_->push_descriptors; }
VkDevice VulkanDevice::handle() const { return state_->device(); }

PipelineStats VulkanDevice::pipeline_stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

std::shared_ptr<Buffer> VulkanDevice::allocate(std::size_t bytes) {
  std::lock_guard lock(state_->mutex);
  return std::make_shared<VulkanBuffer>(bytes, state_->allocate(bytes, Memory::device));
}

std::shared_ptr<Buffer> VulkanDevice::scratch(std::size_t bytes) {
  return scratch_->take(bytes, [this](std::size_t n) { return allocate(n); });
}

void VulkanDevice::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  State& s = *state_;
  const auto& b = buffer_of(dst, s.core.get(), "write");
  if (offset > dst.bytes() || bytes > dst.bytes() - offset)
    throw InvalidArgument("write of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                          " past the end of a buffer of " + std::to_string(dst.bytes()));
  if (bytes == 0) return;
  std::lock_guard lock(s.mutex);
  const auto& a = b.allocation();
  if (a->mapped) {
    // Queued work may still read or write this memory.
    if (!s.idle()) s.wait_all();
    std::memcpy(static_cast<char*>(a->mapped) + offset, src, bytes);
    return;
  }
  auto staging = s.allocate(bytes, Memory::upload);
  std::memcpy(staging->mapped, src, bytes);
  VkCommandBuffer cmd = s.begin_command();
  VkBufferCopy region{0, offset, bytes};
  vkCmdCopyBuffer(cmd, staging->buffer.get(), a->buffer.get(), 1, &region);
  s.recording->keep.push_back(std::move(staging));
  s.recording->keep.push_back(a);
  s.after_command();
  s.staged += bytes;
  if (s.staged > State::max_staged) s.wait_all();
}

void VulkanDevice::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  State& s = *state_;
  const auto& b = buffer_of(src, s.core.get(), "read");
  if (offset > src.bytes() || bytes > src.bytes() - offset)
    throw InvalidArgument("read of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                          " past the end of a buffer of " + std::to_string(src.bytes()));
  if (bytes == 0) return;
  std::lock_guard lock(s.mutex);
  const auto& a = b.allocation();
  if (a->mapped) {
    s.wait_all();
    std::memcpy(dst, static_cast<const char*>(a->mapped) + offset, bytes);
    return;
  }
  auto staging = s.allocate(bytes, Memory::download);
  VkCommandBuffer cmd = s.begin_command();
  VkBufferCopy region{offset, 0, bytes};
  vkCmdCopyBuffer(cmd, a->buffer.get(), staging->buffer.get(), 1, &region);
  s.recording->keep.push_back(a);
  s.recording->keep.push_back(staging);
  s.wait_all();
  std::memcpy(dst, staging->mapped, bytes);
}

// One staging buffer and one wait for a batch of ranges: a read costs a submit and a wait
// (about 0.5 ms on an H100), which the bench's checks would otherwise pay hundreds of times.
void VulkanDevice::read_ranges(std::span<const ReadRange> ranges) {
  State& s = *state_;
  std::vector<std::shared_ptr<Allocation>> sources;
  for (const ReadRange& r : ranges) {
    sources.push_back(buffer_of(*r.src, s.core.get(), "read").allocation());
    if (r.offset > r.src->bytes() || r.bytes > r.src->bytes() - r.offset)
      throw InvalidArgument("read of " + std::to_string(r.bytes) + " bytes at " + std::to_string(r.offset) +
                            " past the end of a buffer of " + std::to_string(r.src->bytes()));
  }
  constexpr std::size_t batch_bytes = std::size_t{64} << 20;
  std::lock_guard lock(s.mutex);
  for (std::size_t first = 0; first < ranges.size();) {
    std::size_t last = first, total = 0;
    while (last < ranges.size() && (last == first || total + ranges[last].bytes <= batch_bytes)) total += ranges[last++].bytes;
    std::shared_ptr<Allocation> staging;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    for (std::size_t i = first, at = 0; i < last; ++i) {
      const ReadRange& r = ranges[i];
      const auto& a = sources[i];
      if (r.bytes == 0 || a->mapped) continue;
      if (!staging) {
        staging = s.allocate(total, Memory::download);
        cmd = s.begin_command();
        s.recording->keep.push_back(staging);
      }
      VkBufferCopy region{r.offset, at, r.bytes};
      vkCmdCopyBuffer(cmd, a->buffer.get(), staging->buffer.get(), 1, &region);
      s.recording->keep.push_back(a);
      at += r.bytes;
    }
    s.wait_all();
    for (std::size_t i = first, at = 0; i < last; ++i) {
      const ReadRange& r = ranges[i];
      const auto& a = sources[i];
      if (r.bytes == 0) continue;
      if (a->mapped) {
        std::memcpy(r.dst, static_cast<const char*>(a->mapped) + r.offset, r.bytes);
      } else {
        std::memcpy(r.dst, static_cast<const char*>(staging->mapped) + at, r.bytes);
        at += r.bytes;
      }
    }
    first = last;
  }
}

void VulkanDevice::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes) {
  copy_by(state_->copy_path, src, src_offset, dst, dst_offset, bytes);
}

void VulkanDevice::copy_by(CopyPath path, const Buffer& src, std::size_t src_offset, Buffer& dst,
                           std::size_t dst_offset, std::size_t bytes) {
  State& s = *state_;
  const auto& from = buffer_of(src, s.core.get(), "copy");
  const auto& to = buffer_of(dst, s.core.get(), "copy");
  check_copy(src, src_offset, dst, dst_offset, bytes);
  if (bytes == 0) return;
  if (path == CopyPath::automatic)
    path = !s.pd.cpu && bytes >= shader_copy_min_bytes ? CopyPath::shader : CopyPath::transfer;
  // The shader moves whole 16-byte vectors of both ranges, which exist only when the offsets
  // agree modulo 16; the head before them and the tail after them go by vkCmdCopyBuffer.
  std::size_t head = 0, body = 0;
  if (path == CopyPath::shader && src_offset % 16 == dst_offset % 16) {
    head = std::min(bytes, (16 - src_offset % 16) % 16);
    body = (bytes - head) / 16 * 16;
  }
  std::vector<VkBufferCopy> regions;
  if (body == 0) {
    regions.push_back({src_offset, dst_offset, bytes});
  } else {
    if (head) regions.push_back({src_offset, dst_offset, head});
    if (const std::size_t tail = bytes - head - body)
      regions.push_back({src_offset + head + body, dst_offset + head + body, tail});
  }
  if (body) {
    // Mirrors copy.comp's push-constant block. Buffers are at most maxStorageBufferRange (32-bit)
    // bytes, so vector indices fit 32 bits.
    struct Push {
      std::uint32_t src0, dst0, count;
    };
    constexpr std::uint32_t local = 256, unroll = 4;
    const Push push{static_cast<std::uint32_t>((src_offset + head) / 16), static_cast<std::uint32_t>((dst_offset + head) / 16),
                    static_cast<std::uint32_t>(body / 16)};
    // One pass when it fits (a group per 4 KiB: 256 threads, 4 vectors each), else the shader's
    // grid-stride loop covers the rest.
    const std::uint32_t max_groups = std::min<std::uint32_t>(physical().limits.maxComputeWorkGroupCount[0], 65535);
    Launch l;
    l.spirv = "common/copy.spv";
    l.local_size = {local, 1, 1};
    l.buffers = {&src, &dst};
    l.push = push_bytes(push);
    l.groups = {std::min<std::uint32_t>((push.count + local * unroll - 1) / (local * unroll), max_groups), 1, 1};
    dispatch(l);
  }
  if (regions.empty()) return;
  std::lock_guard lock(s.mutex);
  VkCommandBuffer cmd = s.begin_command();
  vkCmdCopyBuffer(cmd, from.allocation()->buffer.get(), to.allocation()->buffer.get(),
                  static_cast<std::uint32_t>(regions.size()), regions.data());
  s.recording->keep.push_back(from.allocation());
  s.recording->keep.push_back(to.allocation());
  s.after_command();
}

void VulkanDevice::fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed,
                               float lo, float hi) {
  const std::int64_t end = first + count;
  // Mirrors fill.comp's push-constant block.
  struct Push {
    std::uint32_t word0, block0_lo, block0_hi, blocks, k0, k1;
    float lo, span;
    std::uint32_t dtype;
  };
  constexpr std::uint32_t local = 256;
  const std::uint32_t max_groups = std::min<std::uint32_t>(physical().limits.maxComputeWorkGroupCount[0], 1u << 16);
  // Storage buffers are at most 4 GiB, so word and block indices fit 32 bits; dispatches of at
  // most 2^28 blocks keep them there.
  for (std::int64_t at = first; at < end; at += std::int64_t{1} << 30) {
    const std::int64_t n = std::min<std::int64_t>(std::int64_t{1} << 30, end - at) / 4;
    const auto block0 = static_cast<std::uint64_t>(at / 4);
    const Push push{static_cast<std::uint32_t>(static_cast<std::uint64_t>(at) * dtype_size(t) / 4),
                    static_cast<std::uint32_t>(block0),
                    static_cast<std::uint32_t>(block0 >> 32),
                    static_cast<std::uint32_t>(n),
                    static_cast<std::uint32_t>(seed),
                    static_cast<std::uint32_t>(seed >> 32),
                    lo,
                    hi - lo,
                    fill_code(t)};
    Launch l;
    l.spirv = "common/fill.spv";
    l.local_size = {local, 1, 1};
    l.buffers = {&dst};
    l.push = push_bytes(push);
    l.groups = {static_cast<std::uint32_t>(std::min<std::int64_t>((n + local - 1) / local, max_groups)), 1, 1};
    dispatch(l);
  }
}

Difference VulkanDevice::difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) {
  if (n <= 0) return {};
  if (n >= std::int64_t{1} << 32) return Device::difference(got, want, t, n);
  struct Push {
    std::uint32_t n, dtype, has_want;
  };
  constexpr std::uint32_t local = 256;
  const std::uint32_t max_groups = std::min<std::uint32_t>(physical().limits.maxComputeWorkGroupCount[0], 1024);
  const auto groups = static_cast<std::uint32_t>(std::min<std::int64_t>((n + local - 1) / local, max_groups));
  const auto part = allocate(std::size_t{groups} * 4 * sizeof(std::uint32_t));
  const Push push{static_cast<std::uint32_t>(n), fill_code(t), want != nullptr ? 1u : 0u};
  Launch l;
  l.spirv = "common/difference.spv";
  l.local_size = {local, 1, 1};
  l.buffers = {&got, want ? want : &got, part.get()};
  l.push = push_bytes(push);
  l.groups = {groups, 1, 1};
  dispatch(l);
  std::vector<std::uint32_t> words(std::size_t{groups} * 4);
  read(*part, 0, words.data(), words.size() * sizeof(std::uint32_t));
  return fold_groups(words, n);
}

void VulkanDevice::synchronize() {
  std::lock_guard lock(state_->mutex);
  state_->wait_all();
  state_->wait_transfers();
}

bool VulkanDevice::has_transfer_queue() const { return state_->timelines; }

std::shared_ptr<HostBuffer> VulkanDevice::allocate_host(std::size_t bytes) {
  State& s = *state_;
  std::lock_guard lock(s.mutex);
  auto a = s.allocate(bytes, Memory::download);
  if (!a->mapped) throw DeviceError(s.id() + ": no host-visible memory for a host buffer of " + std::to_string(bytes) + " bytes");
  return std::make_shared<VulkanHostBuffer>(bytes, std::move(a));
}

FencePtr VulkanDevice::mark() {
  State& s = *state_;
  if (!s.timelines) return Device::mark();
  std::lock_guard lock(s.mutex);
  s.flush();
  if (s.computed_value == 0) return nullptr;
  return std::make_shared<TimelineFence>(s.computed, s.computed_value);
}

void VulkanDevice::order_after(const FencePtr& fence) {
  State& s = *state_;
  if (!s.timelines) return Device::order_after(fence);
  std::lock_guard lock(s.mutex);
  const TimelineFence* f = s.own(fence);
  // The compute queue runs its batches in order: its own points need no wait.
  if (!f || f->timeline() == s.computed.get()) return;
  // What was recorded before this call need not wait.
  s.flush();
  s.compute_waits_for = std::max(s.compute_waits_for, f->value());
}

namespace {

const VulkanHostBuffer& host_buffer_of(const HostBuffer& b, const Core* core, const char* what) {
  const auto* vb = dynamic_cast<const VulkanHostBuffer*>(&b);
  if (!vb || vb->allocation()->core.get() != core)
    throw InvalidArgument(std::string(what) + ": the host buffer is not one of this Vulkan device's (allocate_host)");
  return *vb;
}

// Marks this thread as inside time_ns or time_passes for its lifetime; timing work that times
// itself is refused (the second timing's queue waits would land inside the first's).
class TimingScope {
 public:
  TimingScope(const char* what, const std::string& device) {
    if (inside_)
      throw InvalidArgument(std::string(what) + ": work must not time itself (nested " + what + " on " + device + ")");
    inside_ = true;
  }
  ~TimingScope() { inside_ = false; }
  TimingScope(const TimingScope&) = delete;
  TimingScope& operator=(const TimingScope&) = delete;

 private:
  static thread_local bool inside_;
};
thread_local bool TimingScope::inside_ = false;

}  // namespace

FencePtr VulkanDevice::queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                                    std::size_t bytes, const FencePtr& after) {
  State& s = *state_;
  if (!s.timelines) return Device::queue_upload(src, src_offset, dst, dst_offset, bytes, after);
  const auto& from = host_buffer_of(src, s.core.get(), "upload");
  const auto& to = buffer_of(dst, s.core.get(), "upload");
  std::lock_guard lock(s.mutex);
  return s.transfer(from.allocation(), src_offset, to.allocation(), dst_offset, bytes, false, after);
}

FencePtr VulkanDevice::queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                      std::size_t bytes, const FencePtr& after) {
  State& s = *state_;
  if (!s.timelines) return Device::queue_download(src, src_offset, dst, dst_offset, bytes, after);
  const auto& from = buffer_of(src, s.core.get(), "download");
  const auto& to = host_buffer_of(dst, s.core.get(), "download");
  std::lock_guard lock(s.mutex);
  return s.transfer(from.allocation(), src_offset, to.allocation(), dst_offset, bytes, true, after);
}

double VulkanDevice::time_ns(const std::function<void()>& work) {
  State& s = *state_;
  const TimingScope scope("time_ns", s.id());
  std::lock_guard timing(s.timing);
  if (!s.pd.timestamp_bits) {
    synchronize();
    auto t0 = std::chrono::steady_clock::now();
    work();
    synchronize();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  }
  VkQueryPool q = s.queries.get();
  {
    // An idle queue first, so the first timestamp marks when this work starts.
    std::lock_guard lock(s.mutex);
    s.wait_all();
    VkCommandBuffer cmd = s.begin_command();
    vkCmdResetQueryPool(cmd, q, 0, 2);
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, q, 0);
  }
  try {
    work();
  } catch (...) {
    std::lock_guard lock(s.mutex);
    s.wait_all();
    throw;
  }
  std::uint64_t ticks[2] = {0, 0};
  {
    std::lock_guard lock(s.mutex);
    VkCommandBuffer cmd = s.begin_command();
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, q, 1);
    s.wait_all();
    check(vkGetQueryPoolResults(s.device(), q, 0, 2, sizeof ticks, ticks, sizeof ticks[0],
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
  }
  return s.elapsed_ns(ticks[0], ticks[1]);
}

std::vector<PassTime> VulkanDevice::time_passes(const std::function<void()>& work) {
  State& s = *state_;
  if (!s.pd.timestamp_bits) return Device::time_passes(work);
  const TimingScope scope("time_passes", s.id());
  std::lock_guard timing(s.timing);
  std::vector<std::string> names;
  {
    std::lock_guard lock(s.mutex);
    if (!s.pass_queries) s.pass_queries = s.timestamp_pool(State::pass_queries_count);
    s.wait_all();
    VkCommandBuffer cmd = s.begin_command();
    vkCmdResetQueryPool(cmd, s.pass_queries.get(), 0, State::pass_queries_count);
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s.pass_queries.get(), 0);
    s.passes = &names;
  }
  auto stop = [&] {
    std::lock_guard lock(s.mutex);
    s.passes = nullptr;
    s.wait_all();
  };
  try {
    work();
  } catch (...) {
    stop();
    throw;
  }
  stop();
  std::vector<std::uint64_t> ticks(names.size() + 1);
  check(vkGetQueryPoolResults(s.device(), s.pass_queries.get(), 0, static_cast<std::uint32_t>(ticks.size()),
                              ticks.size() * sizeof ticks[0], ticks.data(), sizeof ticks[0],
                              VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  std::vector<PassTime> out;
  for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], s.elapsed_ns(ticks[i], ticks[i + 1])});
  return out;
}

void VulkanDevice::dispatch(const Launch& l) {
  State& s = *state_;
  const auto& lim = s.pd.limits;
  const std::uint64_t invocations = std::uint64_t{l.local_size[0]} * l.local_size[1] * l.local_size[2];
  for (int i = 0; i < 3; ++i)
    if (l.local_size[static_cast<std::size_t>(i)] == 0 || l.local_size[static_cast<std::size_t>(i)] > lim.maxComputeWorkGroupSize[i])
      throw ResourceError(s.id() + ": " + spec_text(l) + ": workgroup size " + std::to_string(l.local_size[static_cast<std::size_t>(i)]) +
                          " in dimension " + std::to_string(i) + " exceeds the device's " +
                          std::to_string(lim.maxComputeWorkGroupSize[i]));
  if (invocations > lim.maxComputeWorkGroupInvocations)
    throw ResourceError(s.id() + ": " + spec_text(l) + ": " + std::to_string(invocations) +
                        " invocations per workgroup exceed the device's " + std::to_string(lim.maxComputeWorkGroupInvocations));
  if (l.shared_bytes > lim.maxComputeSharedMemorySize)
    throw ResourceError(s.id() + ": " + spec_text(l) + ": " + std::to_string(l.shared_bytes) +
                        " bytes of shared memory exceed the device's " + std::to_string(lim.maxComputeSharedMemorySize));
  for (int i = 0; i < 3; ++i)
    if (l.groups[static_cast<std::size_t>(i)] > lim.maxComputeWorkGroupCount[i])
      throw ResourceError(s.id() + ": " + spec_text(l) + ": " + std::to_string(l.groups[static_cast<std::size_t>(i)]) +
                          " workgroups in dimension " + std::to_string(i) + " exceed the device's " +
                          std::to_string(lim.maxComputeWorkGroupCount[i]));
  if (l.buffers.size() > lim.maxPerStageDescriptorStorageBuffers)
    throw ResourceError(s.id() + ": " + spec_text(l) + ": " + std::to_string(l.buffers.size()) + " storage buffers exceed the device's " +
                        std::to_string(lim.maxPerStageDescriptorStorageBuffers));
  const auto push_size = static_cast<std::uint32_t>((l.push.size() + 3) / 4 * 4);
  if (push_size > lim.maxPushConstantsSize)
    throw ResourceError(s.id() + ": " + spec_text(l) + ": " + std::to_string(push_size) +
                        " bytes of push constants exceed the device's " + std::to_string(lim.maxPushConstantsSize));
  std::vector<const Allocation*> allocs;
  allocs.reserve(l.buffers.size());
  for (const Buffer* b : l.buffers) allocs.push_back(buffer_of(*b, s.core.get(), "dispatch").allocation().get());
  if (l.groups[0] == 0 || l.groups[1] == 0 || l.groups[2] == 0) return;

  std::lock_guard lock(s.mutex);
  const State::Pipeline& p = s.pipeline(l, push_size);
  VkCommandBuffer cmd = s.begin_command();
  vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline.get());
  std::vector<VkDescriptorBufferInfo> infos(allocs.size());
  std::vector<VkWriteDescriptorSet> writes(allocs.size());
  for (std::size_t i = 0; i < allocs.size(); ++i) {
    infos[i] = {allocs[i]->buffer.get(), 0, allocs[i]->range};
    writes[i] = make<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
    writes[i].dstBinding = static_cast<std::uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  if (!writes.empty()) {
    if (s.push_descriptors) {
      s.push_descriptor_fn(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout->pipeline.get(), 0,
                           static_cast<std::uint32_t>(writes.size()), writes.data());
    } else {
      VkDescriptorSet set = s.allocate_set(*p.layout, p.bindings);
      for (auto& w : writes) w.dstSet = set;
      vkUpdateDescriptorSets(s.device(), static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
      vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout->pipeline.get(), 0, 1, &set, 0, nullptr);
    }
  }
  if (push_size) {
    std::vector<std::byte> padded(push_size);
    std::memcpy(padded.data(), l.push.data(), l.push.size());
    vkCmdPushConstants(cmd, p.layout->pipeline.get(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, padded.data());
  }
  vkCmdDispatch(cmd, l.groups[0], l.groups[1], l.groups[2]);
  if (s.passes && s.passes->size() + 1 < State::pass_queries_count) {
    vkCmdWriteTimestamp(cmd, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s.pass_queries.get(),
                        static_cast<std::uint32_t>(s.passes->size() + 1));
    // The module's name without its folder and extension: "flash_attention_dkdv_coopmat".
    std::string name(l.spirv.substr(l.spirv.rfind('/') + 1));
    if (name.size() > 4 && name.ends_with(".spv")) name.resize(name.size() - 4);
    s.passes->push_back(std::move(name));
  }
  for (const Buffer* b : l.buffers) s.recording->keep.push_back(static_cast<const VulkanBuffer*>(b)->allocation());
  s.after_command();
}

VulkanDevice& vulkan_device(Device& d) {
  if (d.info().backend != Backend::vulkan) throw DeviceError("expected a Vulkan device, got " + d.info().id());
  return static_cast<VulkanDevice&>(d);
}

}  // namespace ejk::vulkan

namespace ejk::backends {

namespace {

std::vector<DeviceInfo> vulkan_devices() {
  std::vector<DeviceInfo> out;
  for (const auto& d : vulkan::Instance::get().devices()) out.push_back(d.info);
  return out;
}

std::shared_ptr<Device> open_vulkan(int index) {
  vulkan::DeviceOptions options;
  options.copy = vulkan::copy_path_from_env();
  options.coopmat_khr = vulkan::coopmat_khr_from_env();
  return std::make_shared<vulkan::VulkanDevice>(index, options);
}

#ifdef EJK_HAVE_COOPMAT
constexpr const char* vulkan_build_name = "vulkan +coopmat";
#else
constexpr const char* vulkan_build_name = "vulkan";
#endif
// Before OpenCL for "auto": it reaches the tensor cores.
const BackendRegistration vulkan_registration{{Backend::vulkan, &vulkan_devices, &open_vulkan, 2, vulkan_build_name}};

}  // namespace

}  // namespace ejk::backends
