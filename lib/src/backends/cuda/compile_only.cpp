#include "backends/cuda/compile_only.hpp"

#include <cstring>

#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/opencl_c.hpp"
#include "core/embedded.hpp"
#include "ejk/error.hpp"

namespace ejk::cuda {
namespace {

class NullBuffer final : public Buffer {
 public:
  using Buffer::Buffer;
};

class CompiledKernel final : public clc::Kernel {
 public:
  explicit CompiledKernel(std::string name) : name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  std::size_t max_workgroup_size() const override { return 1024; }
  std::uint64_t local_mem() const override { return 0; }

 private:
  std::string name_;
};

}  // namespace

CompileOnlyDevice::CompileOnlyDevice(DeviceInfo info, std::string arch) : info_(std::move(info)), arch_(std::move(arch)) {}

std::shared_ptr<Buffer> CompileOnlyDevice::allocate(std::size_t bytes) { return std::make_shared<NullBuffer>(bytes); }

void CompileOnlyDevice::write(Buffer& dst, std::size_t offset, const void*, std::size_t bytes) {
  if (offset + bytes > dst.bytes()) throw InvalidArgument("write past the end of a buffer");
}

void CompileOnlyDevice::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  if (offset + bytes > src.bytes()) throw InvalidArgument("read past the end of a buffer");
  std::memset(dst, 0, bytes);
}

void CompileOnlyDevice::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                             std::size_t bytes) {
  check_copy(src, src_offset, dst, dst_offset, bytes);
}

double CompileOnlyDevice::time_ns(const std::function<void()>& work) {
  work();
  return 0.0;
}

Difference CompileOnlyDevice::difference(const Buffer&, const Buffer*, DType, std::int64_t) { return {}; }

std::shared_ptr<clc::Kernel> CompileOnlyDevice::kernel(std::string_view source_key, std::string_view options,
                                                       std::string_view name) {
  std::shared_ptr<const Translated> t;
  {
    std::lock_guard lock(mutex_);
    auto it = translated_.find(source_key);
    if (it == translated_.end())
      it = translated_
               .emplace(std::string(source_key), std::make_shared<const Translated>(translate_opencl_c(
                                                     clc::with_includes(source_key, detail::embedded(source_key).text()))))
               .first;
    t = it->second;
  }
  std::vector<std::string> opts = t->options;
  for (auto& o : translate_options(options)) opts.push_back(std::move(o));
  const std::string key = std::string(source_key) + '\n' + std::string(options);
  {
    std::lock_guard lock(mutex_);
    if (auto k = kernels_.find(key + '\n' + std::string(name)); k != kernels_.end()) return k->second;
  }
  build(key, t->source, opts, source_key);
  auto k = std::make_shared<CompiledKernel>(std::string(name));
  std::lock_guard lock(mutex_);
  return kernels_.emplace(key + '\n' + std::string(name), std::move(k)).first->second;
}

void CompileOnlyDevice::build(const std::string& key, std::string_view text, const std::vector<std::string>& options,
                              std::string_view origin) {
  {
    std::lock_guard lock(mutex_);
    if (auto f = failed_.find(key); f != failed_.end()) throw CompileError(f->second);
    if (built_.count(key)) return;
  }
  try {
    (void)compile(text, options, arch_, origin);
  } catch (const CompileError& e) {
    std::lock_guard lock(mutex_);
    failed_.emplace(key, e.what());
    throw;
  }
  std::lock_guard lock(mutex_);
  built_.insert(key);
}

std::shared_ptr<CudaKernel> CompileOnlyDevice::cuda_kernel(std::string_view source_key,
                                                           const std::vector<std::string>& options,
                                                           std::string_view name) {
  std::vector<std::string> opts{"-std=c++17"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::string key(source_key);
  for (const auto& o : options) key += '\n' + o;
  build(key, clc::with_includes(source_key, detail::embedded(source_key).text()), opts, source_key);
  return std::make_shared<CudaKernel>(nullptr, nullptr, std::string(name), 1024, 0, std::vector<std::size_t>{});
}

void CompileOnlyDevice::launch_cuda(CudaKernel& k, std::array<unsigned, 3>, std::array<unsigned, 3> block,
                                    std::size_t dynamic_shared, std::span<void* const>, Launch) {
  if (static_cast<std::uint64_t>(block[0]) * block[1] * block[2] > k.max_workgroup_size())
    throw ResourceError("launch of " + k.name() + ": a block larger than 1024 threads");
  if (dynamic_shared > 227 * 1024) throw ResourceError("launch of " + k.name() + ": more than 227 KiB of shared memory");
}

CUtensorMap CompileOnlyDevice::tensor_map(const Buffer&, const TensorMapShape& shape) {
  check_tensor_map(shape);
  return CUtensorMap{};
}

std::size_t CompileOnlyDevice::compiled() const {
  std::lock_guard lock(mutex_);
  return built_.size();
}

void CompileOnlyDevice::launch_args(clc::Kernel& k, const clc::Range& global, const clc::Range& local,
                                    std::span<const clc::Arg>) {
  check_ranges(k, global, local);
}

}  // namespace ejk::cuda
