#include "backends/cpu/cpu_device.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <new>
#include <thread>
#include <algorithm>
#include <string>
#include <unistd.h>

#include "core/backend_registry.hpp"
#include "ejk/error.hpp"

namespace ejk::cpu {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

std::string cpu_vendor() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("vendor_id", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "x86_64-avx512";
  if (__builtin_cpu_supports("avx2")) return "x86_64-avx2";
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "generic";
#endif
}

}  // namespace

CpuBuffer::CpuBuffer(std::size_t bytes) : Buffer(bytes) {
  // 64-byte alignment and size rounding keep vector loads within the allocation.
  data_ = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  // As the other backends say it: a buffer the device cannot hold, not an internal error.
  if (!data_) throw ResourceError("cpu: cannot allocate a buffer of " + std::to_string(bytes) + " bytes");
}

CpuBuffer::~CpuBuffer() { std::free(data_); }

DeviceInfo cpu_info() {
  DeviceInfo info;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  info.backend = Backend::cpu;
  info.cpu = true;
  info.index = 0;
  info.vendor = cpu_vendor();
  info.name = cpu_model();
  info.architecture = isa();
  info.driver = "ejk-cpu " + std::to_string(threads) + " threads";
  info.api_version = "C++20";
  info.compute_units = threads;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  info.global_mem = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
  info.max_buffer = info.global_mem;
  long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  info.local_mem = l2 > 0 ? static_cast<std::uint64_t>(l2) : 1u << 20;
  info.max_workgroup_size = 1;
  info.max_workgroup_dims = {1, 1, 1};
  return info;
}

CpuDevice::CpuDevice() : info_(cpu_info()), pool_(info_.compute_units) {}

std::shared_ptr<Buffer> CpuDevice::allocate(std::size_t bytes) { return std::make_shared<CpuBuffer>(bytes); }

void CpuDevice::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (offset + bytes > dst.bytes()) throw InvalidArgument("write past the end of a buffer");
  std::memcpy(static_cast<char*>(cpu_buffer(dst).data()) + offset, src, bytes);
}

void CpuDevice::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (offset + bytes > src.bytes()) throw InvalidArgument("read past the end of a buffer");
  std::memcpy(dst, static_cast<const char*>(cpu_buffer(src).data()) + offset, bytes);
}

void CpuDevice::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) {
  check_copy(src, src_offset, dst, dst_offset, bytes);
  if (bytes == 0) return;
  std::memmove(static_cast<char*>(cpu_buffer(dst).data()) + dst_offset,
               static_cast<const char*>(cpu_buffer(src).data()) + src_offset, bytes);
}

double CpuDevice::time_ns(const std::function<void()>& work) {
  auto t0 = std::chrono::steady_clock::now();
  work();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count();
}

CpuDevice& cpu_device(Device& d) {
  if (d.info().backend != Backend::cpu) throw DeviceError("expected the CPU device, got " + d.info().id());
  return static_cast<CpuDevice&>(d);
}

}  // namespace ejk::cpu

namespace ejk::backends {

namespace {
std::vector<DeviceInfo> cpu_devices() { return {cpu::cpu_info()}; }
std::shared_ptr<Device> open_cpu(int /*index*/) { return std::make_shared<cpu::CpuDevice>(); }
const BackendRegistration cpu_registration{{Backend::cpu, &cpu_devices, &open_cpu, 0, "cpu"}};
}  // namespace

}  // namespace ejk::backends
