#pragma once
// The CUDA backend: one primary context and one stream per device (and a second stream for host
// transfers beside it, ordered against it by events), buffers, device-clock
// timing with events, and kernels compiled at run time by NVRTC for the device's architecture
// (sm_90a on Hopper), kept in memory per (source, options) and across processes as cubins
// (ProgramStore). It runs the kernels' OpenCL C through a prelude (opencl_c.hpp) and CUDA C++
// sources of its own (cuda_kernel).
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/clc/clc_device.hpp"
#include "backends/cuda/cuda_api.hpp"
#include "backends/program_store.hpp"
#include "core/scratch_pool.hpp"
#include "ejk/device.hpp"

namespace ejk::cuda {

// The device pointer of a CUDA buffer; throws DeviceError when it is another backend's.
CUdeviceptr ptr_of(const Buffer& b);

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(const Driver& d, CUcontext ctx, CUdeviceptr ptr, std::size_t bytes)
      : Buffer(bytes), driver_(d), ctx_(ctx), ptr_(ptr) {}
  ~CudaBuffer() override;
  CUdeviceptr ptr() const { return ptr_; }

 private:
  const Driver& driver_;
  CUcontext ctx_;
  CUdeviceptr ptr_;
};

// A compiled kernel: its function, what the module reports of it, and its parameters' sizes
// (a compile-only device's has no module: a null function and no sizes).
class CudaKernel final : public clc::Kernel {
 public:
  CudaKernel(std::shared_ptr<void> module, CUfunction fn, std::string name, std::size_t max_threads,
             std::uint64_t static_shared, std::vector<std::size_t> param_sizes)
      : module_(std::move(module)), fn_(fn), name_(std::move(name)), max_threads_(max_threads),
        static_shared_(static_shared), param_sizes_(std::move(param_sizes)) {}
  const std::string& name() const override { return name_; }
  std::size_t max_workgroup_size() const override { return max_threads_; }
  std::uint64_t local_mem() const override { return static_shared_; }
  CUfunction function() const { return fn_; }
  const std::vector<std::size_t>& param_sizes() const { return param_sizes_; }

 private:
  friend class CudaDevice;
  std::shared_ptr<void> module_;  // keeps the module loaded
  CUfunction fn_;
  std::string name_;
  std::size_t max_threads_;
  std::uint64_t static_shared_;
  std::vector<std::size_t> param_sizes_;
  std::size_t dynamic_limit_ = 48 * 1024;  // the dynamic shared memory the function is allowed
  std::mutex mutex_;
};

struct ModuleCacheStats {
  std::size_t builds = 0;    // NVRTC compilations (successful or not)
  std::size_t hits = 0;      // requests answered from memory
  std::size_t failures = 0;  // compilations that failed
  std::size_t loaded = 0;    // answered by a cubin another process kept (ProgramStore)
};

// The shared memory a block may have (its opt-in limit) on the device's architecture, from its
// description alone, so that parameter spaces are the same on a compile-only device.
std::int64_t shared_max(const DeviceInfo& dev);

// NVRTC's architecture option for a compute capability: the arch-specific target ("sm_90a",
// with wgmma and setmaxnreg) where there is one, else "sm_86".
std::string nvrtc_arch(int major, int minor);

// Compiles CUDA C++ `source` for `arch` ("sm_90a") with NVRTC; the cubin, or CompileError with
// the log. `origin` names the source in the message.
std::vector<unsigned char> compile(std::string_view source, const std::vector<std::string>& options,
                                   std::string_view arch, std::string_view origin);

// A tiled TMA descriptor (what Hopper's bulk tensor copies read) over a tensor of 16- or 32-bit
// elements in a buffer, copied in boxes into shared memory with 128-byte swizzling; elements past
// the tensor's edges read as zeros.
struct TensorMapShape {
  std::vector<std::uint64_t> dims;     // elements per dimension, innermost first
  std::vector<std::uint64_t> strides;  // bytes from one index of dimension i + 1 to the next
  std::vector<std::uint32_t> box;      // elements a copy moves per dimension
  std::uint32_t element_bytes = 2;     // 2 or 4: what a box's bytes, and so the copy's, count
};
// Throws InvalidArgument naming what TMA cannot describe: rank 1..5, dims in 1..2^32, strides
// 16-byte multiples below 2^40, boxes 1..256 elements with 128 bytes at most innermost, elements
// of 2 or 4 bytes.
void check_tensor_map(const TensorMapShape& shape);

// How a kernel is ordered after the stream's previous one: `after` it completes, or `early`
// (programmatic dependent launch; CudaTarget::launch_cuda).
enum class Launch { after, early };

// What CUDA C++ implementations run on: a CudaDevice, or a CompileOnlyDevice (compile_only.hpp)
// that compiles and launches nothing.
class CudaTarget : public clc::Device {
 public:
  // CUDA C++: kernel `name` (extern "C") of the embedded source `source_key` ("matmul/matmul.cu"),
  // compiled with `options` (NVRTC's: "-DBM=128").
  virtual std::shared_ptr<CudaKernel> cuda_kernel(std::string_view source_key, const std::vector<std::string>& options,
                                                  std::string_view name) = 0;
  // Launches a CUDA kernel: grid and block in blocks and threads, `params` as cuLaunchKernel
  // takes them. Throws ResourceError for a block or shared memory the kernel cannot have.
  // Launch::early (sm_90 and later; ignored before): the kernel's blocks may start once every
  // block of the stream's previous kernel has called start_next() (common/cuda.cuh), so its
  // prologue overlaps that kernel's tail; it must call wait_previous() before it touches what
  // that kernel writes (or anything the kernels before it read).
  virtual void launch_cuda(CudaKernel& k, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                           std::size_t dynamic_shared, std::span<void* const> params, Launch order = Launch::after) = 0;
  // The device address of one of its buffers.
  virtual CUdeviceptr pointer(const Buffer& b) const = 0;
  // The TMA descriptor of `shape` over buffer `b` (check_tensor_map's rules).
  virtual CUtensorMap tensor_map(const Buffer& b, const TensorMapShape& shape) = 0;
};

// The CUDA target behind a Device reference; throws DeviceError naming the device otherwise.
CudaTarget& cuda_target(ejk::Device& d);

class CudaDevice final : public CudaTarget {
 public:
  CudaDevice(CUdevice device, DeviceInfo info);
  ~CudaDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  // From a pool of this device's allocations: cuMemFree waits for the device, and a run that
  // freed its scratch would end every timed sample with that wait.
  std::shared_ptr<Buffer> scratch(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  void read_ranges(std::span<const ReadRange> ranges) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  // Both streams.
  void synchronize() override;
  bool has_transfer_queue() const override { return true; }
  // Page-locked (cuMemHostAlloc): what asynchronous copies need to run beside the compute.
  std::shared_ptr<HostBuffer> allocate_host(std::size_t bytes) override;
  // An event recorded on the device's stream.
  FencePtr mark() override;
  // The device's stream made to wait for the fence's event.
  void order_after(const FencePtr& fence) override;
  // Events recorded on the device's stream before and after `work`; 0 when `work` submitted
  // nothing.
  double time_ns(const std::function<void()>& work) override;

  // OpenCL C (translated, opencl_c.hpp).
  std::shared_ptr<clc::Kernel> kernel(std::string_view source_key, std::string_view options,
                                      std::string_view name) override;
  std::shared_ptr<CudaKernel> cuda_kernel(std::string_view source_key, const std::vector<std::string>& options,
                                          std::string_view name) override;
  CUdeviceptr pointer(const Buffer& b) const override { return ptr_of(b); }
  CUtensorMap tensor_map(const Buffer& b, const TensorMapShape& shape) override;
  bool hardware_fma() const override { return true; }
  ModuleCacheStats module_cache_stats() const;

  // Makes the device's context the calling thread's (what the runtime API, and so NCCL, uses).
  void current() const;
  // An event recorded on the device's stream after the work submitted so far; the stream made to
  // wait for an event recorded elsewhere (other streams' work ordered with the device's).
  void record(CUevent event);
  void wait(CUevent event);

  CUcontext context() const { return ctx_; }
  CUdevice handle() const { return device_; }
  CUstream stream() const { return stream_; }
  const std::string& arch() const { return arch_; }
  int compute_capability() const { return cc_; }  // 90 for sm_90
  std::uint64_t shared_optin() const { return shared_optin_; }

  void launch_cuda(CudaKernel& k, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                   std::size_t dynamic_shared, std::span<void* const> params, Launch order = Launch::after) override;

 protected:
  void launch_args(clc::Kernel& k, const clc::Range& global, const clc::Range& local,
                   std::span<const clc::Arg> args) override;
  FencePtr queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                        std::size_t bytes, const FencePtr& after) override;
  FencePtr queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                          std::size_t bytes, const FencePtr& after) override;

 private:
  struct ModuleEntry;
  struct Source {
    std::string hash, text;            // of the translated text
    std::vector<std::string> options;  // what the translation needs
  };
  std::shared_ptr<const Source> source(std::string_view key, bool opencl_c);
  // The module of `src` built with `options`: the cubin the store keeps, else compiled (and kept).
  std::shared_ptr<void> load_module(const Source& src, const std::vector<std::string>& options, std::string_view origin,
                                    const std::string& stored_key);
  std::shared_ptr<CudaKernel> kernel_for(const Source& source, const std::vector<std::string>& options,
                                         std::string_view origin, std::string_view name);
  void submitted() { submissions_.fetch_add(1, std::memory_order_relaxed); }
  // A fence on an event recorded on `stream` after it waits for `after`, and after `copy`.
  template <class Copy>
  FencePtr transfer(const FencePtr& after, Copy copy);

  const Driver& driver_;
  CUdevice device_;
  DeviceInfo info_;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUstream transfer_ = nullptr;  // upload and download, beside stream_
  std::mutex transfer_mutex_;    // a transfer's wait, copy and event in one piece
  std::string arch_;
  int cc_ = 0;
  std::uint64_t shared_optin_ = 0;
  std::optional<ProgramStore> store_;
  std::atomic<std::uint64_t> submissions_{0};
  std::mutex stream_mutex_;  // host-side order of a launch's checks and its submission
  std::shared_ptr<ScratchPool> scratch_;  // shared with the scratch buffers handed out

  mutable std::mutex cache_mutex_;
  std::map<std::string, std::shared_ptr<const Source>, std::less<>> sources_;  // source key
  std::map<std::string, std::shared_ptr<ModuleEntry>, std::less<>> modules_;     // hash + options
  std::map<std::string, std::shared_ptr<CudaKernel>, std::less<>> kernels_;      // hash + options + name
  ModuleCacheStats stats_;
};

// The CUDA device behind a Device reference; throws DeviceError naming the device when it
// belongs to another backend.
CudaDevice& cuda_device(ejk::Device& d);

}  // namespace ejk::cuda
