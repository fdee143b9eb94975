#include "backends/cuda/compile_only.hpp"

#include <cstring>

#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/opencl_c.hpp"
#include "ejk/detail/embedded.hpp"
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
  std::string text;
  {
    std::lock_guard lock(mutex_);
    auto it = translated_.find(source_key);
    if (it == translated_.end()) {
      Translated t = translate_opencl_c(clc::with_includes(source_key, detail::embedded(source_key).text()));
      std::string joined;
      for (const auto& o : t.options) joined += o + '\n';
      it = translated_.emplace(std::string(source_key), joined + '\0' + t.source).first;
    }
    text = it->second;
  }
  const std::size_t split = text.find('\0');
  std::vector<std::string> opts;
  for (std::size_t pos = 0; pos < split;) {
    const std::size_t end = text.find('\n', pos);
    opts.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  for (auto& o : translate_options(options)) opts.push_back(std::move(o));
  const std::string key = std::string(source_key) + '\n' + std::string(options);
  {
    std::lock_guard lock(mutex_);
    if (auto f = failed_.find(key); f != failed_.end()) throw CompileError(f->second);
    if (auto k = kernels_.find(key + '\n' + std::string(name)); k != kernels_.end()) return k->second;
  }
  bool built = false;
  {
    std::lock_guard lock(mutex_);
    built = built_.count(key) > 0;
  }
  if (!built) {
    try {
      (void)compile(std::string_view(text).substr(split + 1), opts, arch_, source_key);
    } catch (const CompileError& e) {
      std::lock_guard lock(mutex_);
      failed_.emplace(key, e.what());
      throw;
    }
    std::lock_guard lock(mutex_);
    built_.insert(key);
  }
  auto k = std::make_shared<CompiledKernel>(std::string(name));
  std::lock_guard lock(mutex_);
  return kernels_.emplace(key + '\n' + std::string(name), std::move(k)).first->second;
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
