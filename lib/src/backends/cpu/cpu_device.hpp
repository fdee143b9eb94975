#pragma once
// The native CPU backend: host memory and a thread pool; work runs synchronously.
#include <cstdlib>
#include <memory>

#include "backends/cpu/thread_pool.hpp"
#include "ejk/device.hpp"

namespace ejk::cpu {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(std::size_t bytes);
  ~CpuBuffer() override;
  void* data() const { return data_; }
  template <class T>
  T* as() const { return static_cast<T*>(data_); }

 private:
  void* data_;
};

class CpuDevice final : public Device {
 public:
  CpuDevice();
  const DeviceInfo& info() const override { return info_; }
  std::shared_ptr<Buffer> allocate(std::size_t bytes) override;
  void write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) override;
  void read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) override;
  using Device::copy;
  void copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) override;
  void synchronize() override {}
  double time_ns(const std::function<void()>& work) override;

  ThreadPool& pool() { return pool_; }

 private:
  DeviceInfo info_;
  ThreadPool pool_;
};

DeviceInfo cpu_info();

// The CPU device behind a Device reference; throws DeviceError when it is another backend's.
CpuDevice& cpu_device(Device& d);
inline CpuBuffer& cpu_buffer(const Buffer& b) { return const_cast<CpuBuffer&>(static_cast<const CpuBuffer&>(b)); }

}  // namespace ejk::cpu
