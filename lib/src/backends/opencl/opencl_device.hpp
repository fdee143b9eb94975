#pragma once
// The OpenCL backend: one context and one in-order profiling queue per device, buffers,
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

#include "backends/opencl/cl_error.hpp"
#include "backends/opencl/cl_handle.hpp"
#include "backends/program_store.hpp"
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

// A __local pointer argument of the given size.
struct LocalBytes {
  std::size_t bytes;
};

// A struct argument passed by value; its OpenCL C declaration must have the same layout (plain
// 4-byte members are laid out alike on both sides).
struct StructArg {
  const void* data;
  std::size_t bytes;
  template <class T>
    requires std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>
  static StructArg of(const T& value) {
    return {&value, sizeof(T)};
  }
};

// An NDRange of one to three dimensions.
struct Range {
  // Implicit, so a one-dimensional range is just a number.
  Range(std::size_t x) : size{x, 1, 1}, dims(1) {}  // NOLINT(google-explicit-constructor)
  Range(std::size_t x, std::size_t y) : size{x, y, 1}, dims(2) {}
  Range(std::size_t x, std::size_t y, std::size_t z) : size{x, y, z}, dims(3) {}
  std::size_t count() const { return size[0] * size[1] * size[2]; }
  std::array<std::size_t, 3> size;
  cl_uint dims;
};

// A compiled kernel. Shared by every caller that asks for the same (program, name); its
// arguments are set and enqueued under its own lock, so concurrent launches do not mix them.
class ClKernel {
 public:
  ClKernel(KernelHandle kernel, ProgramHandle program, std::string name, std::size_t max_workgroup_size,
           std::uint64_t local_mem, cl_uint num_args)
      : kernel_(std::move(kernel)), program_(std::move(program)), name_(std::move(name)),
        max_workgroup_size_(max_workgroup_size), local_mem_(local_mem), num_args_(num_args) {}

  const std::string& name() const { return name_; }
  cl_kernel get() const { return kernel_.get(); }
  // The largest workgroup this kernel can launch with on its device (registers included).
  std::size_t max_workgroup_size() const { return max_workgroup_size_; }
  // Local memory the kernel declares statically, in bytes.
  std::uint64_t local_mem() const { return local_mem_; }
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

class OpenCLDevice final : public Device {
 public:
  OpenCLDevice(cl_platform_id platform, cl_device_id device, DeviceInfo info);
  ~OpenCLDevice() override;

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  // A reduction on the device (kernels/common/difference.cl): a few bytes a group come back.
  Difference difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) override;
  void synchronize() override;
  // Every launch (and copy) made through this device while `work` runs records a profiling
  // event; the result is last end - first start on the device clock, 0 when nothing was
  // submitted.
  double time_ns(const std::function<void()>& work) override;

  cl_platform_id platform() const { return platform_; }
  cl_device_id id() const { return device_; }
  cl_context context() const { return context_.get(); }
  cl_command_queue queue() const { return queue_.get(); }
  // Single-precision fma() runs in hardware (CL_FP_FMA, not emulated): kernels may use it
  // in inner loops; otherwise mad() is the fast choice.
  bool hardware_fma() const { return hardware_fma_; }

  // Kernel `name` of the embedded source `source_key` ("matmul/matmul.cl") built with
  // `options` ("-DMWG=64 ..."). The source may `#include "file"` other embedded files of its
  // folder (a header shared with the C++ and GLSL code): the text is spliced in on the host, so
  // no build needs an include path. Throws CompileError carrying the build log, and NotFound
  // for an unknown source key or kernel name.
  std::shared_ptr<ClKernel> kernel(std::string_view source_key, std::string_view options, std::string_view name);
  // The same for source text given directly.
  std::shared_ptr<ClKernel> kernel_from_source(std::string_view source, std::string_view options,
                                               std::string_view name);
  ProgramCacheStats program_cache_stats() const;

  // Sets the arguments in order (buffers, tensors, LocalBytes, or arithmetic values whose C++
  // type must match the kernel parameter's) and enqueues. Throws ResourceError when the local
  // range exceeds what the kernel can launch with, DeviceError for other refusals.
  template <class... Args>
  void launch(ClKernel& k, const Range& global, const Range& local, const Args&... args) {
    std::lock_guard lock(k.mutex_);
    check_arg_count(k, sizeof...(Args));
    cl_uint i = 0;
    (set_arg(k, i++, args), ...);
    enqueue(k, global, local);
  }

  // Adds an event of work enqueued on queue() by other code (a library) to the timings in
  // progress, so time_ns covers it.
  void record(cl_event event);

 protected:
  // Whole blocks by kernels/common/fill.cl.
  void fill_blocks(Buffer& dst, DType t, std::int64_t first, std::int64_t count, std::uint64_t seed, float lo,
                   float hi) override;

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
  void check_arg_count(const ClKernel& k, std::size_t given) const;
  void enqueue(ClKernel& k, const Range& global, const Range& local);
  void set_raw(const ClKernel& k, cl_uint index, std::size_t size, const void* value) const;

  void set_arg(const ClKernel& k, cl_uint index, const Buffer& b) const;
  void set_arg(const ClKernel& k, cl_uint index, const Tensor& t) const { set_arg(k, index, t.buffer()); }
  void set_arg(const ClKernel& k, cl_uint index, LocalBytes local) const { set_raw(k, index, local.bytes, nullptr); }
  void set_arg(const ClKernel& k, cl_uint index, StructArg s) const { set_raw(k, index, s.bytes, s.data); }
  template <class T>
    requires std::is_arithmetic_v<T>
  void set_arg(const ClKernel& k, cl_uint index, T value) const {
    static_assert(!std::is_same_v<T, bool>, "bool has no fixed OpenCL size: pass an int");
    set_raw(k, index, sizeof(T), &value);
  }

  bool recording() const { return recording_.load(std::memory_order_acquire) > 0; }
  void add_event(cl_event e);

  cl_platform_id platform_;
  cl_device_id device_;
  DeviceInfo info_;
  ContextHandle context_;
  QueueHandle queue_;
  bool hardware_fma_ = false;
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
