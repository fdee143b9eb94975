#pragma once
// A CUDA device that only compiles: kernel() runs NVRTC for a chosen architecture, launches check
// their ranges and do nothing, buffers hold no memory and read as zeros. It needs NVRTC but no
// GPU or driver, so a machine without either can check that every program an implementation's
// configs build compiles for sm_80 and sm_90a (tests/cuda_test.cpp).
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/opencl_c.hpp"

namespace ejk::cuda {

class CompileOnlyDevice final : public CudaTarget {
 public:
  // A device like `info` (backend cuda) whose programs are compiled for `arch` ("sm_90a").
  CompileOnlyDevice(DeviceInfo info, std::string arch);

  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  void synchronize() override {}
  double time_ns(const std::function<void()>& work) override;
  std::shared_ptr<clc::Kernel> kernel(std::string_view source_key, std::string_view options,
                                      std::string_view name) override;
  std::shared_ptr<CudaKernel> cuda_kernel(std::string_view source_key, const std::vector<std::string>& options,
                                          std::string_view name) override;
  void launch_cuda(CudaKernel& k, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                   std::size_t dynamic_shared, std::span<void* const> params, Launch order = Launch::after) override;
  CUdeviceptr pointer(const Buffer&) const override { return 0; }
  // Checked, and all zeros.
  CUtensorMap tensor_map(const Buffer& b, const TensorMapShape& shape) override;
  bool hardware_fma() const override { return true; }
  Difference difference(const Buffer& got, const Buffer* want, DType t, std::int64_t n) override;

  // Distinct programs compiled so far.
  std::size_t compiled() const;

 protected:
  void fill_blocks(Buffer&, DType, std::int64_t, std::int64_t, std::uint64_t, float, float) override {}
  void launch_args(clc::Kernel& k, const clc::Range& global, const clc::Range& local,
                   std::span<const clc::Arg> args) override;

 private:
  DeviceInfo info_;
  std::string arch_;
  mutable std::mutex mutex_;
  // Compiles `text` with `options` once (a failure is remembered).
  void build(const std::string& key, std::string_view text, const std::vector<std::string>& options,
             std::string_view origin);
  std::map<std::string, std::shared_ptr<const Translated>, std::less<>> translated_;  // source key
  std::map<std::string, std::shared_ptr<clc::Kernel>, std::less<>> kernels_;  // options + name
  std::map<std::string, std::string, std::less<>> failed_;                   // program -> log
  std::set<std::string> built_;                                               // source key + options
};

}  // namespace ejk::cuda
