#pragma once
// Devices of the backends, their capabilities, buffers and device-clock timing.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ejk/dtype.hpp"
#include "ejk/export.hpp"

namespace ejk {

enum class Backend : std::uint8_t { cpu, opencl, vulkan, cuda };

EJK_API std::string_view to_string(Backend b);
EJK_API Backend parse_backend(std::string_view name);  // throws InvalidArgument

// One cooperative-matrix (tensor core) shape a device offers: C[m,n] += A[m,k] * B[k,n].
struct CoopMatShape {
  std::uint32_t m = 0, n = 0, k = 0;
  DType a = DType::f16;  // element type of A and B
  DType c = DType::f32;  // accumulator type
  bool operator==(const CoopMatShape&) const = default;
};

struct EJK_API DeviceInfo {
  Backend backend = Backend::cpu;
  int index = 0;  // position among the backend's devices
  std::string vendor;
  std::string name;
  std::string driver;        // driver version text
  std::string api_version;   // "OpenCL 3.0", "Vulkan 1.3.230", "C++20"
  std::string architecture;  // vendor-specific family, for profile fallbacks
  bool discrete = false;     // a discrete GPU
  bool cpu = false;          // runs on the host's CPU cores (the cpu backend, an OpenCL CPU driver)
  std::uint32_t compute_units = 0;
  std::uint64_t global_mem = 0;
  std::uint64_t max_buffer = 0;
  std::uint64_t local_mem = 0;  // per workgroup
  // Per workgroup for __local arrays a program declares at a fixed size, where a driver grants
  // them more than `local_mem` (NVIDIA's OpenCL: the opt-in shared memory); 0: `local_mem`.
  std::uint64_t static_local_mem = 0;
  std::uint32_t max_workgroup_size = 0;
  std::array<std::uint32_t, 3> max_workgroup_dims{};
  std::uint32_t subgroup_size = 0;  // 0: no subgroups
  bool fp16 = false;                // 16-bit float arithmetic
  bool bf16 = false;
  bool subgroups = false;
  std::vector<CoopMatShape> coopmat;
  std::uint64_t static_local() const { return static_local_mem ? static_local_mem : local_mem; }
  // Whether `coopmat` lists fragments of exactly this shape and these types.
  bool offers(const CoopMatShape& shape) const;

  std::string id() const;  // "opencl:0"
  // Stable text naming backend, vendor, device and driver: the hardware/software part of a cache key.
  std::string fingerprint() const;
  nlohmann::json to_json() const;
};

// Device memory. Backends derive from it; users hold it through Tensor.
class EJK_API Buffer {
 public:
  explicit Buffer(std::size_t bytes) : bytes_(bytes) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::size_t bytes() const { return bytes_; }

 private:
  std::size_t bytes_;
};

// How one stored array differs from another of the same dtype (Device::difference).
struct Difference {
  double err = 0;         // max |got - want| where both are finite
  double scale = 0;       // max |want| there
  std::int64_t bad = -1;  // first element where got is NaN or infinite (without want: not finite),
                          // or want is infinite and got is not that same infinity; -1: none
};

// Host memory for staging device transfers (Device::allocate_host): pinned (page-locked) where
// the backend has it, so that its copies run as DMA beside the compute, else ordinary memory.
class EJK_API HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 protected:
  HostBuffer(std::byte* data, std::size_t bytes, bool pinned) : data_(data), bytes_(bytes), pinned_(pinned) {}

 private:
  std::byte* data_;
  std::size_t bytes_;
  bool pinned_;
};

// A point in one of a device's queues (Device::mark, upload, download), reached once everything
// queued there before it has completed. A null FencePtr stands for a point already reached.
class EJK_API Fence {
 public:
  virtual ~Fence() = default;
  // Whether it is reached, without waiting. Throws DeviceError when the work before it failed.
  virtual bool reached() = 0;
  // Blocks the host until it is reached.
  virtual void wait() = 0;
};
using FencePtr = std::shared_ptr<Fence>;

// One stretch of a buffer to read into host memory (Device::read_ranges).
struct ReadRange {
  const Buffer* src = nullptr;
  std::size_t offset = 0, bytes = 0;
  void* dst = nullptr;
};

// One kernel launch of timed work (Device::time_passes): the kernel's name and its duration on the
// device's clock.
struct PassTime {
  std::string name;
  double ns = 0;
};

class EJK_API Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  virtual std::shared_ptr<Buffer> allocate(std::size_t bytes) = 0;
  // Working memory of a kernel's run, at least `bytes`, contents undefined. Work submitted
  // after its release may reuse it (a device whose work runs in submission order recycles it
  // instead of freeing, so that a run's bookkeeping never waits for the device).
  virtual std::shared_ptr<Buffer> scratch(std::size_t bytes) { return allocate(bytes); }
  virtual void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) = 0;
  virtual void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) = 0;
  // Every range, as read() one after another would give; backends where a read is a round trip
  // to the device override it to make one for all of them.
  virtual void read_ranges(std::span<const ReadRange> ranges);
  // Copies bytes from src at src_offset to dst at dst_offset on the device, in submission order.
  virtual void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                    std::size_t bytes) = 0;
  void copy(const Buffer& src, Buffer& dst, std::size_t bytes) { copy(src, 0, dst, 0, bytes); }
  // Elements [first, first + count) of fill_uniform (tensor.hpp) into dst, which holds elements
  // of dtype t from byte 0; the range is checked by the caller. Whole Philox blocks of four
  // elements are made by fill_blocks, the up to three elements at either end on the host.
  void fill_uniform(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo, float hi);
  // Compares elements [0, n) of `got` with those of `want` (null: only whether got is finite),
  // both holding dtype t. This one reads both back a slice at a time and compares on every
  // core; backends with device code reduce on the device and read back a few bytes.
  virtual Difference difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n);
  // Waits until all submitted work, transfers included, is complete.
  virtual void synchronize() = 0;

  // Transfers beside the compute. A device runs its kernels and copies (write, read, copy) on its
  // compute queue; upload and download run on a transfer queue of their own, ordered against the
  // compute only by fences, so that a copy overlaps the kernels queued around it. OpenCL: a
  // second in-order command queue and events; Vulkan: a queue of a transfer-only family where
  // there is one (else a second queue of the compute family, else the same queue) and timeline
  // semaphores; CUDA: a second stream and events. This implementation, which the CPU backend
  // keeps, copies at once on the calling thread (a write or read, in order with the compute
  // queue) and returns null fences.
  //
  // Whether upload and download run beside the compute (else at once, as here).
  virtual bool has_transfer_queue() const { return false; }
  // Host memory for staging, `bytes` long: pinned where the backend has it (OpenCL: a
  // CL_MEM_ALLOC_HOST_PTR buffer kept mapped; Vulkan: host-visible, host-cached memory; CUDA:
  // cuMemHostAlloc).
  virtual std::shared_ptr<HostBuffer> allocate_host(std::size_t bytes);
  // A fence after the compute work submitted so far.
  virtual FencePtr mark() { return nullptr; }
  // Queue a copy between a host buffer (of this device's allocate_host) and a device buffer on the
  // transfer queue, after the fence `after` (null: no wait; the transfer queue runs its copies in
  // the order they were queued) and return a fence reached when it has completed. The host
  // buffer's bytes must stay untouched (upload) or unread (download), and both buffers alive,
  // until then. Ranges past either buffer's end throw InvalidArgument.
  FencePtr upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes,
                  const FencePtr& after = nullptr);
  FencePtr download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                    std::size_t bytes, const FencePtr& after = nullptr);
  // Compute work submitted after this call runs after `fence` is reached; the host does not wait.
  virtual void order_after(const FencePtr& fence);
  // Runs `work` (which submits device work), waits for it and returns its duration in
  // nanoseconds on the device's own clock: profiling events, timestamp queries or steady_clock.
  virtual double time_ns(const std::function<void()>& work) = 0;
  // Runs `work` as time_ns does and returns the time of each kernel launch it made, in launch
  // order: each launch's profiling event (OpenCL), or the time from the end of the launch
  // before to the end of this one (Vulkan: a timestamp after each dispatch; what ran between two
  // dispatches counts to the later one). Devices that do not tell launches apart (this
  // implementation: the CPU, CUDA) return one entry, "(all)", with time_ns.
  virtual std::vector<PassTime> time_passes(const std::function<void()>& work);

 protected:
  // The part of fill_uniform in whole blocks: first and count are multiples of 4. This one makes
  // them on the host, a slice at a time on every core, and writes them; backends with device code
  // override it.
  virtual void fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                           float hi);
  // upload and download once their ranges are checked.
  virtual FencePtr queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                                std::size_t bytes, const FencePtr& after);
  virtual FencePtr queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                  std::size_t bytes, const FencePtr& after);
  // Throws InvalidArgument unless both ranges lie inside their buffers.
  static void check_copy(const Buffer& src, std::size_t src_offset, const Buffer& dst, std::size_t dst_offset,
                         std::size_t bytes);
};

// Every device of every backend compiled in, in a stable order.
EJK_API std::vector<DeviceInfo> list_devices();

// Opens a device by name: "cpu", "opencl:N", "vulkan:N", "cuda:N" or "auto" (a discrete GPU first,
// else the native CPU backend). Devices are shared: the same name gives the same device.
// Throws InvalidArgument naming the device argument when there is no such device.
EJK_API std::shared_ptr<Device> open_device(std::string_view name);

// The device named by $EJK_DEVICE, else "auto".
EJK_API std::string default_device_name();

}  // namespace ejk
