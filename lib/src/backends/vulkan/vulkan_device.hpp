#pragma once
// The Vulkan backend's device: storage buffers, a command stream that records dispatches and
// transfers with barriers between them and submits them in batches, a second queue for host
// transfers beside it (ordered against it by timeline semaphores), compute pipelines cached
// per (SPIR-V, specialization constants), and timestamp-query timing. Kernels launch through
// VulkanDevice::dispatch.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backends/vulkan/instance.hpp"
#include "core/scratch_pool.hpp"
#include "ejk/device.hpp"

namespace ejk::vulkan {

struct Allocation;

class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(std::size_t bytes, std::shared_ptr<Allocation> allocation);
  ~VulkanBuffer() override;
  // Shared with every batch that uses it, so dropping a tensor while work is queued is safe.
  const std::shared_ptr<Allocation>& allocation() const { return allocation_; }

 private:
  std::shared_ptr<Allocation> allocation_;
};

// One compute dispatch. Shaders take their workgroup size from specialization constants 0, 1
// and 2 (layout(local_size_x_id = 0, local_size_y_id = 1, local_size_z_id = 2) in;) and `spec`
// as 32-bit constants 3, 4, ...; `buffers` bind as storage buffers 0, 1, ... of set 0; `push` is
// the push-constant block.
struct Launch {
  std::string_view spirv;  // embedded key, e.g. "matmul/matmul.spv"
  std::array<std::uint32_t, 3> local_size{1, 1, 1};
  std::vector<std::uint32_t> spec;
  std::vector<const Buffer*> buffers;
  std::span<const std::byte> push;
  std::array<std::uint32_t, 3> groups{1, 1, 1};
  std::uint32_t shared_bytes = 0;  // the shader's shared memory, checked against the device limit
  bool full_subgroups = false;     // require full subgroups (shaders that index by gl_SubgroupID)
};

template <class T>
std::span<const std::byte> push_bytes(const T& block) {
  return std::as_bytes(std::span<const T, 1>(&block, 1));
}

struct PipelineStats {
  std::uint64_t created = 0;  // pipelines built
  std::uint64_t hits = 0;     // dispatches that found theirs in the cache
  std::uint64_t loaded = 0;   // of those built, the ones seeded with data another process kept
};

// How VulkanDevice::copy moves bytes. `transfer` is vkCmdCopyBuffer, which NVIDIA runs at under
// a third of an SM copy's bandwidth (about 850 GB/s against 3 TB/s on an H100); `shader` is
// kernels/common/copy.comp, 16 bytes a load. `automatic` takes the shader for copies of at least
// shader_copy_min_bytes on GPUs, and vkCmdCopyBuffer below that (no pipeline to bind) and on CPU
// drivers (lavapipe's transfer is a memcpy). The shader needs src and dst offsets congruent
// modulo 16; other copies, and the bytes around the aligned body, go through vkCmdCopyBuffer.
enum class CopyPath { automatic, transfer, shader };
inline constexpr std::size_t shader_copy_min_bytes = std::size_t{1} << 20;
// $EJK_VULKAN_COPY: unset or empty is automatic, else transfer | shader | auto; throws
// InvalidArgument naming the variable and the value otherwise.
CopyPath copy_path_from_env();

// $EJK_VULKAN_COOPMAT: unset, empty or `khr`: cooperative-matrix shaders run in their KHR form
// where the device has VK_KHR_cooperative_matrix (and VK_NV_cooperative_matrix2's conversions
// where they need them), else as compiled; `nv`: always as compiled (GL_NV_cooperative_matrix).
// Throws InvalidArgument naming the variable and the value otherwise.
bool coopmat_khr_from_env();

struct DeviceOptions {
  // Off: descriptor sets come from per-batch pools even where VK_KHR_push_descriptor exists.
  bool push_descriptors = true;
  // On: transfers go through staging buffers even where device memory is host-visible
  // (integrated GPUs and CPUs map it instead), as they do on discrete GPUs.
  bool staging = false;
  CopyPath copy = CopyPath::automatic;  // what copy() does; open_device takes $EJK_VULKAN_COPY
  bool coopmat_khr = true;  // open_device takes $EJK_VULKAN_COOPMAT
};

class VulkanDevice final : public Device {
 public:
  explicit VulkanDevice(int index, DeviceOptions options = {});
  ~VulkanDevice() override;

  const DeviceInfo& info() const override;
  // Throws ResourceError naming the size when it exceeds the largest storage buffer.
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  // From a pool of this device's allocations: dispatches run in submission order, each after a
  // barrier on everything before it, so a buffer one run released is free for the next run's;
  // otherwise every run paid vkAllocateMemory and vkFreeMemory for each scratch buffer.
  std::shared_ptr<Buffer> scratch(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  void read_ranges(std::span<const ReadRange> ranges) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  // A copy by a path of the caller's choosing, for A/B measurements and for tests of each path.
  void copy_by(CopyPath path, const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
               std::size_t bytes);
  // A reduction on the device (kernels/common/difference.comp): a few bytes a group come back.
  Difference difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) override;
  // Both queues.
  void synchronize() override;
  bool has_transfer_queue() const override;
  // Host-visible, host-cached memory (the download staging type), mapped.
  std::shared_ptr<HostBuffer> allocate_host(std::size_t bytes) override;
  // The compute stream's batch submitted, and a fence on the value its submission signals.
  FencePtr mark() override;
  // The batch recorded so far submitted; the next one waits for the fence.
  void order_after(const FencePtr& fence) override;
  // Timestamp queries before and after `work` (which must not call time_ns itself).
  double time_ns(const std::function<void()>& work) override;
  // A timestamp after every dispatch of `work`, up to 1023 of them.
  std::vector<PassTime> time_passes(const std::function<void()>& work) override;

  // Records a dispatch; batches are submitted at synchronize, read and time_ns, or once they
  // hold enough commands. Throws ResourceError when the launch exceeds the device's limits and
  // CompileError when the driver cannot build the pipeline.
  void dispatch(const Launch& launch);

  const PhysicalDevice& physical() const;
  PipelineStats pipeline_stats() const;
  bool uses_push_descriptors() const;
  VkDevice handle() const;

 protected:
  // Whole blocks by kernels/common/fill.comp.
  void fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                   float hi) override;
  // One submission to the transfer queue each, waiting for `after` and for the transfer before it.
  FencePtr queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes, const FencePtr& after) override;
  FencePtr queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                          std::size_t bytes, const FencePtr& after) override;

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();  // shared with the buffers handed out
};

// The Vulkan device behind a Device reference; throws DeviceError when it is another backend's.
VulkanDevice& vulkan_device(Device& d);

}  // namespace ejk::vulkan
