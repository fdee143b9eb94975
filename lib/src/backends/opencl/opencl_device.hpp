#pragma once
// The OpenCL backend: one context and one in-order profiling queue per device (and a second
// in-order queue for host transfers beside it, ordered against it by events), buffers,
// run-time compiled programs cached per (source hash, options), and a small typed launch API
// that kernel implementations share.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <CL/cl.h>

#include "backends/clc/clc_device.hpp"
#include "backends/opencl/cl_error.hpp"
#include "backends/opencl/cl_handle.hpp"
#include "backends/program_store.hpp"
#include "core/scratch_pool.hpp"
#include "ejk/device.hpp"
#include "ejk/tensor.hpp"

namespace ejk::opencl {

class ClBuffer final : public Buffer {
 public:
  ClBuffer(MemHandle mem, std::size_t bytes) : Buffer(bytes), mem_(std::move(mem)) {}
  cl_mem mem() const { return mem_.get(); }

 private:
  MemHandle mem_;
};

using clc::LocalBytes;
using clc::Range;
using clc::StructArg;

// A compiled kernel. Shared by every caller that asks for the same (program, name); its
// arguments are set and enqueued under its own lock, so concurrent launches do not mix them.
class ClKernel final : public clc::Kernel {
 public:
  ClKernel(KernelHandle kernel, ProgramHandle program, std::string name, std::size_t max_workgroup_size,
           std::uint64_t local_mem, cl_uint num_args)
      : kernel_(std::move(kernel)), program_(std::move(program)), name_(std::move(name)),
        max_workgroup_size_(max_workgroup_size), local_mem_(local_mem), num_args_(num_args) {}

  const std::string& name() const override { return name_; }
  cl_kernel get() const { return kernel_.get(); }
  std::size_t max_workgroup_size() const override { return max_workgroup_size_; }
  std::uint64_t local_mem() const override { return local_mem_; }
  cl_uint num_args() const { return num_args_; }

 private:
  friend class OpenCLDevice;
  KernelHandle kernel_;
  ProgramHandle program_;
  std::string name_;
  std::size_t max_workgroup_size_;
  std::uint64_t local_mem_;
  cl_uint num_args_;
  std::mutex mutex_;
};

struct ProgramCacheStats {
  std::size_t builds = 0;    // programs compiled (successfully or not)
  std::size_t hits = 0;      // requests answered from the cache
  std::size_t failures = 0;  // builds that failed
  std::size_t loaded = 0;    // builds answered by a binary another process kept (ProgramStore)
};

class OpenCLDevice final : public clc::Device {
 public:
  OpenCLDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info);
  ~OpenCLDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  // From a pool of this device's allocations (its queue runs kernels in submission order):
  // drivers back a buffer on its first use, and NVIDIA's made each launch that first used a new
  // scratch buffer tens of microseconds late, inside the timed span.
  std::shared_ptr<Buffer> scratch(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  // Both queues.
  void synchronize() override;
  bool has_transfer_queue() const override { return true; }
  // Mapped CL_MEM_ALLOC_HOST_PTR buffers: drivers hand out pinned memory for them, and copies
  // from or to it run as DMA.
  std::shared_ptr<HostBuffer> allocate_host(std::size_t bytes) override;
  // A marker on the compute queue, flushed so that the transfer queue's wait on it can end.
  FencePtr mark() override;
  // A barrier on the compute queue waiting for the fence's event.
  void order_after(const FencePtr& fence) override;
  // Every launch (and copy) made through this device while `work` runs records a profiling
  // event; the result is last end - first start on the device clock, 0 when nothing was
  // submitted.
  double time_ns(const std::function<void()>& work) override;
  // Every kernel launch of `work` with its profiling event.
  std::vector<PassTime> time_passes(const std::function<void()>& work) override;

  cl_platform_id platform() const { return platform_; }
  cl_device_id id() const { return device_; }
  cl_context context() const { return context_.get(); }
  cl_command_queue queue() const { return queue_.get(); }
  bool hardware_fma() const override { return hardware_fma_; }

  std::shared_ptr<clc::Kernel> kernel(std::string_view source_key, std::string_view options,
                                     std::string_view name) override;
  // The same for source text given directly.
  std::shared_ptr<ClKernel> kernel_from_source(std::string_view source, std::string_view options,
                                               std::string_view name);
  ProgramCacheStats program_cache_stats() const;

  // Adds an event of work enqueued on queue() by other code (a library) to the timings in
  // progress, so time_ns covers it.
  void record(cl_event event);

 protected:
  void launch_args(clc::Kernel& k, const Range& global, const Range& local, std::span<const clc::Arg> args) override;
  FencePtr queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes, const FencePtr& after) override;
  FencePtr queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                          std::size_t bytes, const FencePtr& after) override;

 private:
  struct ProgramEntry;
  struct Recording;

  std::shared_ptr<ClKernel> kernel_for(const std::string& source_hash, std::string_view source,
                                       std::string_view origin, std::string_view options, std::string_view name);
  ProgramHandle build(const std::string& source_hash, std::string_view source, std::string_view origin,
                      std::string_view options);
  // A program from the binary the store holds for `stored_key`, or none.
  ProgramHandle from_binary(const std::string& stored_key, std::string_view options);
  void keep_binary(const std::string& stored_key, cl_program program);
  void set_raw(const ClKernel& k, cl_uint index, std::size_t size, const void* value) const;

  // Runs `work` with `rec` among the recordings, so that its commands' events land there.
  void record_into(Recording& rec, const std::function<void()>& work);
  bool recording() const { return recording_.load(std::memory_order_acquire) > 0; }
  // Where a command enqueued now should return its event: only the first command of a timing
  // in progress needs one (time_ns closes every timing with a marker), and NVIDIA's OpenCL takes
  // about 14 us of host time to enqueue a kernel with a profiling event against 5 without, which
  // left the device idle between the short passes of a decode. Counts the command.
  cl_event* event_slot(EventHandle& event);
  // `kernel`: the launch's kernel name, empty for other commands.
  void add_event(cl_event e, std::string_view kernel = {});

  cl_platform_id platform_;
  cl_device_id device_;
  DeviceInfo info_;
  ContextHandle context_;
  QueueHandle queue_;
  QueueHandle transfer_;  // upload and download, beside queue_
  bool hardware_fma_ = false;
  std::shared_ptr<ScratchPool> scratch_ = std::make_shared<ScratchPool>();  // shared with the buffers handed out
  // Program binaries kept across processes; by default for every device but CPUs, whose
  // drivers keep their own and whose code depends on settings outside the fingerprint.
  std::optional<ProgramStore> store_;

  mutable std::mutex cache_mutex_;
  struct Source {
    std::string hash, text;  // of the source with its includes spliced in
  };
  std::map<std::string, std::shared_ptr<const Source>, std::less<>> sources_;  // source key -> source
  std::map<std::string, std::shared_ptr<ProgramEntry>, std::less<>> programs_;  // hash + options
  std::map<std::string, std::shared_ptr<ClKernel>, std::less<>> kernels_;      // hash + options + name
  ProgramCacheStats stats_;

  std::mutex recording_mutex_;
  std::vector<Recording*> recordings_;
  std::atomic<int> recording_{0};
};

// The OpenCL device behind a Device reference; throws DeviceError naming the device when it
// belongs to another backend.
OpenCLDevice& opencl_device(Device& d);
// The cl_mem of an OpenCL buffer; throws DeviceError when it is another backend's.
cl_mem mem_of(const Buffer& b);

// CL_DEVICE_TYPE of an OpenCL device listed by list_devices() (CPU devices want other
// parameter spaces than GPUs); throws InvalidArgument for a device that is not one.
cl_device_type device_type(const DeviceInfo& info);

}  // namespace ejk::opencl
