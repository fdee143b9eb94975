#include "backends/cuda/cuda_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "backends/cuda/opencl_c.hpp"
#include "core/embedded.hpp"
#include "core/sha256.hpp"
#include "ejk/error.hpp"

namespace ejk::cuda {

// One cache slot per (source hash, options): a second request for the same module waits for the
// first compilation; a failure is remembered.
struct CudaDevice::ModuleEntry {
  std::mutex mutex;
  bool done = false;
  std::shared_ptr<void> module;
  std::string error;
};

namespace {

// The NVRTC program, destroyed on every path.
struct Program {
  const Nvrtc& n;
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) n.nvrtcDestroyProgram(&p);
  }
};

}  // namespace

std::string nvrtc_arch(int major, int minor) {
  // Arch-specific targets (wgmma, setmaxnreg, tcgen05) exist from Hopper on.
  const bool specific = major == 9 || major == 10 || major == 12;
  return "sm_" + std::to_string(major) + std::to_string(minor) + (specific ? "a" : "");
}

std::vector<unsigned char> compile(std::string_view source, const std::vector<std::string>& options,
                                   std::string_view arch, std::string_view origin) {
  const Nvrtc& n = nvrtc();
  // -D and -U options become lines of the source at kDefinesHere (else at its start).
  std::string defines;
  std::vector<std::string> opts;
  for (const auto& o : options) {
    if (o.starts_with("-D")) {
      const std::string def = o.substr(2);
      const std::size_t eq = def.find('=');
      defines += "#define " + (eq == std::string::npos ? def + " 1" : def.substr(0, eq) + " " + def.substr(eq + 1)) + "\n";
    } else if (o.starts_with("-U")) {
      defines += "#undef " + o.substr(2) + "\n";
    } else {
      opts.push_back(o);
    }
  }
  std::string text(source);
  const std::size_t at = text.find(kDefinesHere);
  text.insert(at == std::string::npos ? 0 : at + kDefinesHere.size(), defines);
  const std::string name(origin);
  Program prog{n};
  if (nvrtcResult r = n.nvrtcCreateProgram(&prog.p, text.c_str(), name.c_str(), 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    throw DeviceError("nvrtcCreateProgram(" + name + "): " + n.nvrtcGetErrorString(r));
  opts.push_back("-arch=" + std::string(arch));
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult r = n.nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
  std::size_t log_size = 0;
  std::string log;
  if (n.nvrtcGetProgramLogSize(prog.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    n.nvrtcGetProgramLog(prog.p, log.data());
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (r != NVRTC_SUCCESS) {
    std::string joined;
    for (const auto& o : options) joined += (joined.empty() ? "" : " ") + o;
    throw CompileError("nvrtcCompileProgram(" + name + ") failed: " + n.nvrtcGetErrorString(r) + " for " +
                       std::string(arch) + " with options '" + joined + "'" + (log.empty() ? "" : ":\n" + log));
  }
  std::size_t size = 0;
  if (nvrtcResult e = n.nvrtcGetCUBINSize(prog.p, &size); e != NVRTC_SUCCESS || size == 0)
    throw DeviceError("nvrtcGetCUBINSize(" + name + "): " + n.nvrtcGetErrorString(e));
  std::vector<unsigned char> cubin(size);
  if (nvrtcResult e = n.nvrtcGetCUBIN(prog.p, reinterpret_cast<char*>(cubin.data())); e != NVRTC_SUCCESS)
    throw DeviceError("nvrtcGetCUBIN(" + name + "): " + n.nvrtcGetErrorString(e));
  return cubin;
}

CudaBuffer::~CudaBuffer() {
  if (!ptr_) return;
  driver_.cuCtxSetCurrent(ctx_);
  driver_.cuMemFree(ptr_);
}

CudaDevice::CudaDevice(CUdevice device, DeviceInfo info)
    : driver_(*driver()), device_(device), info_(std::move(info)), scratch_(std::make_shared<ScratchPool>()) {
  check(driver_.cuDevicePrimaryCtxRetain(&ctx_, device_), "cuDevicePrimaryCtxRetain(" + info_.id() + ")");
  current();
  check(driver_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(driver_.cuStreamCreate(&transfer_, CU_STREAM_NON_BLOCKING), "cuStreamCreate(transfers)");
  int major = 0, minor = 0, optin = 0;
  check(driver_.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_), "cuDeviceGetAttribute");
  check(driver_.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_), "cuDeviceGetAttribute");
  check(driver_.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device_),
        "cuDeviceGetAttribute");
  cc_ = major * 10 + minor;
  arch_ = nvrtc_arch(major, minor);
  shared_optin_ = static_cast<std::uint64_t>(optin);
  store_ = ProgramStore::open("cuda", true);
}

CudaDevice::~CudaDevice() {
  if (transfer_) {
    current();
    driver_.cuStreamSynchronize(transfer_);
    driver_.cuStreamDestroy(transfer_);
  }
  if (stream_) {
    current();
    driver_.cuStreamSynchronize(stream_);
    driver_.cuStreamDestroy(stream_);
  }
  // Kernels (and their modules) handed out may outlive the device in a caller's hands; the
  // primary context stays retained for them.
}

void CudaDevice::current() const { check(driver_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent(" + info_.id() + ")"); }

std::shared_ptr<Buffer> CudaDevice::allocate(std::size_t bytes) {
  current();
  CUdeviceptr p = 0;
  // CUDA refuses empty allocations; a zero-byte Buffer still needs something to bind.
  const CUresult r = driver_.cuMemAlloc(&p, std::max<std::size_t>(bytes, 4));
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw ResourceError("allocating " + std::to_string(bytes) + " bytes on " + info_.id() + ": out of device memory");
  check(r, "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  return std::make_shared<CudaBuffer>(driver_, ctx_, p, bytes);
}

// The stream runs this device's kernels in submission order (the transfer stream's copies are
// not ordered so: their callers keep their buffers until the copies' fences).
std::shared_ptr<Buffer> CudaDevice::scratch(std::size_t bytes) {
  return scratch_->take(bytes, [this](std::size_t n) { return allocate(n); });
}

void CudaDevice::write(Buffer& dst, std::size_t offset, const void* src, std::size_t bytes) {
  if (offset + bytes > dst.bytes())
    throw InvalidArgument("write of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                          " past the end of a buffer of " + std::to_string(dst.bytes()));
  if (bytes == 0) return;
  current();
  std::lock_guard lock(stream_mutex_);
  check(driver_.cuMemcpyHtoDAsync(ptr_of(dst) + offset, src, bytes, stream_), "cuMemcpyHtoDAsync");
  check(driver_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void CudaDevice::read(const Buffer& src, std::size_t offset, void* dst, std::size_t bytes) {
  const ReadRange r{&src, offset, bytes, dst};
  read_ranges({&r, 1});
}

void CudaDevice::read_ranges(std::span<const ReadRange> ranges) {
  for (const ReadRange& r : ranges)
    if (r.offset + r.bytes > r.src->bytes())
      throw InvalidArgument("read of " + std::to_string(r.bytes) + " bytes at offset " + std::to_string(r.offset) +
                            " past the end of a buffer of " + std::to_string(r.src->bytes()));
  current();
  std::lock_guard lock(stream_mutex_);
  for (const ReadRange& r : ranges)
    if (r.bytes) check(driver_.cuMemcpyDtoHAsync(r.dst, ptr_of(*r.src) + r.offset, r.bytes, stream_), "cuMemcpyDtoHAsync");
  check(driver_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void CudaDevice::copy(const Buffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset, std::size_t bytes) {
  check_copy(src, src_offset, dst, dst_offset, bytes);
  if (bytes == 0) return;
  current();
  std::lock_guard lock(stream_mutex_);
  check(driver_.cuMemcpyDtoDAsync(ptr_of(dst) + dst_offset, ptr_of(src) + src_offset, bytes, stream_),
        "cuMemcpyDtoDAsync");
  submitted();
}

void CudaDevice::record(CUevent event) {
  current();
  std::lock_guard lock(stream_mutex_);
  check(driver_.cuEventRecord(event, stream_), "cuEventRecord");
}

void CudaDevice::wait(CUevent event) {
  current();
  std::lock_guard lock(stream_mutex_);
  check(driver_.cuStreamWaitEvent(stream_, event, 0), "cuStreamWaitEvent");
  submitted();
}

void CudaDevice::synchronize() {
  current();
  check(driver_.cuStreamSynchronize(stream_), "cuStreamSynchronize(" + info_.id() + ")");
  check(driver_.cuStreamSynchronize(transfer_), "cuStreamSynchronize(" + info_.id() + ", transfers)");
}

namespace {

class CudaFence final : public Fence {
 public:
  CudaFence(const Driver& d, CUcontext ctx) : d_(d), ctx_(ctx) {
    check(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(d_.cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  ~CudaFence() override {
    if (d_.cuCtxSetCurrent(ctx_) == CUDA_SUCCESS) d_.cuEventDestroy(event_);
  }
  CudaFence(const CudaFence&) = delete;
  CudaFence& operator=(const CudaFence&) = delete;
  CUevent event() const { return event_; }
  bool reached() override {
    check(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    const CUresult r = d_.cuEventQuery(event_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "cuEventQuery");
    return true;
  }
  void wait() override {
    check(d_.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
    check(d_.cuEventSynchronize(event_), "cuEventSynchronize");
  }

 private:
  const Driver& d_;
  CUcontext ctx_;
  CUevent event_ = nullptr;
};

class CudaHostBuffer final : public HostBuffer {
 public:
  CudaHostBuffer(const Driver& d, CUcontext ctx, void* p, std::size_t bytes)
      : HostBuffer(static_cast<std::byte*>(p), bytes, true), d_(d), ctx_(ctx) {}
  ~CudaHostBuffer() override {
    if (d_.cuCtxSetCurrent(ctx_) == CUDA_SUCCESS) d_.cuMemFreeHost(data());
  }

 private:
  const Driver& d_;
  CUcontext ctx_;
};

CUevent event_of(const FencePtr& f) {
  if (!f) return nullptr;
  auto* cf = dynamic_cast<CudaFence*>(f.get());
  if (!cf) throw InvalidArgument("a fence of another device or backend given to a CUDA device");
  return cf->event();
}

}  // namespace

std::shared_ptr<HostBuffer> CudaDevice::allocate_host(std::size_t bytes) {
  current();
  void* p = nullptr;
  const CUresult r = driver_.cuMemHostAlloc(&p, std::max<std::size_t>(bytes, 4), 0);
  if (r == CUDA_ERROR_OUT_OF_MEMORY)
    throw ResourceError("allocating " + std::to_string(bytes) + " bytes of page-locked host memory for " + info_.id());
  check(r, "cuMemHostAlloc(" + std::to_string(bytes) + " bytes)");
  return std::make_shared<CudaHostBuffer>(driver_, ctx_, p, bytes);
}

FencePtr CudaDevice::mark() {
  auto f = std::make_shared<CudaFence>(driver_, ctx_);
  record(f->event());
  return f;
}

void CudaDevice::order_after(const FencePtr& fence) {
  if (CUevent e = event_of(fence)) wait(e);
}

template <class Copy>
FencePtr CudaDevice::transfer(const FencePtr& after, Copy copy) {
  const CUevent before = event_of(after);
  auto f = std::make_shared<CudaFence>(driver_, ctx_);
  current();
  std::lock_guard lock(transfer_mutex_);
  if (before) check(driver_.cuStreamWaitEvent(transfer_, before, 0), "cuStreamWaitEvent(transfers)");
  copy();
  check(driver_.cuEventRecord(f->event(), transfer_), "cuEventRecord(transfers)");
  return f;
}

FencePtr CudaDevice::queue_upload(const HostBuffer& src, std::size_t src_offset, Buffer& dst, std::size_t dst_offset,
                                  std::size_t bytes, const FencePtr& after) {
  const CUdeviceptr to = ptr_of(dst) + dst_offset;
  return transfer(after, [&] {
    if (bytes)
      check(driver_.cuMemcpyHtoDAsync(to, src.data() + src_offset, bytes, transfer_), "cuMemcpyHtoDAsync(transfers)");
  });
}

FencePtr CudaDevice::queue_download(const Buffer& src, std::size_t src_offset, HostBuffer& dst, std::size_t dst_offset,
                                    std::size_t bytes, const FencePtr& after) {
  const CUdeviceptr from = ptr_of(src) + src_offset;
  return transfer(after, [&] {
    if (bytes)
      check(driver_.cuMemcpyDtoHAsync(dst.data() + dst_offset, from, bytes, transfer_), "cuMemcpyDtoHAsync(transfers)");
  });
}

double CudaDevice::time_ns(const std::function<void()>& work) {
  current();
  struct Event {
    const Driver& d;
    CUevent e = nullptr;
    ~Event() {
      if (e) d.cuEventDestroy(e);
    }
  } start{driver_}, stop{driver_};
  check(driver_.cuEventCreate(&start.e, CU_EVENT_DEFAULT), "cuEventCreate");
  check(driver_.cuEventCreate(&stop.e, CU_EVENT_DEFAULT), "cuEventCreate");
  const std::uint64_t before = submissions_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(stream_mutex_);
    check(driver_.cuEventRecord(start.e, stream_), "cuEventRecord");
  }
  work();
  current();
  {
    std::lock_guard lock(stream_mutex_);
    check(driver_.cuEventRecord(stop.e, stream_), "cuEventRecord");
  }
  check(driver_.cuEventSynchronize(stop.e), "cuEventSynchronize");
  if (submissions_.load(std::memory_order_relaxed) == before) return 0.0;
  float ms = 0;
  check(driver_.cuEventElapsedTime(&ms, start.e, stop.e), "cuEventElapsedTime");
  return static_cast<double>(ms) * 1e6;
}

std::shared_ptr<const CudaDevice::Source> CudaDevice::source(std::string_view key, bool opencl_c) {
  {
    std::lock_guard lock(cache_mutex_);
    auto it = sources_.find(key);
    if (it != sources_.end()) return it->second;
  }
  std::string text = clc::with_includes(key, detail::embedded(key).text());
  Source s;
  if (opencl_c) {
    Translated t = translate_opencl_c(text);
    s.text = std::move(t.source);
    s.options = std::move(t.options);
  } else {
    s.text = std::move(text);
    s.options = {"-std=c++17"};
  }
  // $EJK_NVRTC_OPTIONS: more NVRTC options for every program (part of the cache keys).
  if (const char* extra = std::getenv("EJK_NVRTC_OPTIONS")) {
    std::istringstream words(extra);
    for (std::string w; words >> w;) s.options.push_back(w);
  }
  s.hash = detail::sha256_hex(s.text);
  auto made = std::make_shared<const Source>(std::move(s));
  std::lock_guard lock(cache_mutex_);
  return sources_.emplace(std::string(key), std::move(made)).first->second;
}

std::shared_ptr<clc::Kernel> CudaDevice::kernel(std::string_view source_key, std::string_view options,
                                                std::string_view name) {
  auto src = source(source_key, true);
  std::vector<std::string> opts = src->options;
  for (auto& o : translate_options(options)) opts.push_back(std::move(o));
  return kernel_for(*src, opts, source_key, name);
}

std::shared_ptr<CudaKernel> CudaDevice::cuda_kernel(std::string_view source_key, const std::vector<std::string>& options,
                                                    std::string_view name) {
  auto src = source(source_key, false);
  std::vector<std::string> opts = src->options;
  opts.insert(opts.end(), options.begin(), options.end());
  return kernel_for(*src, opts, source_key, name);
}

std::shared_ptr<CudaKernel> CudaDevice::kernel_for(const Source& src, const std::vector<std::string>& options,
                                                   std::string_view origin, std::string_view name) {
  std::string key = src.hash;
  for (const auto& o : options) key += '\n' + o;
  const std::string kernel_key = key + "\n#" + std::string(name);
  std::shared_ptr<ModuleEntry> entry;
  {
    std::lock_guard lock(cache_mutex_);
    if (auto it = kernels_.find(kernel_key); it != kernels_.end()) {
      ++stats_.hits;
      return it->second;
    }
    auto it = modules_.find(key);
    if (it == modules_.end()) it = modules_.emplace(key, std::make_shared<ModuleEntry>()).first;
    entry = it->second;
  }
  std::shared_ptr<void> module;
  {
    std::lock_guard lock(entry->mutex);
    if (entry->done) {
      std::lock_guard stats_lock(cache_mutex_);
      ++stats_.hits;
    } else {
      try {
        entry->module = load_module(src, options, origin, info_.fingerprint() + '\n' + arch_ + '\n' + key);
      } catch (const CompileError& e) {
        entry->error = e.what();
        std::lock_guard stats_lock(cache_mutex_);
        ++stats_.failures;
      }
      // Other failures (the driver's) are not remembered: the next request tries again.
      entry->done = true;
    }
    if (!entry->module) throw CompileError(entry->error);
    module = entry->module;
  }
  current();
  const std::string kname(name);
  CUfunction fn = nullptr;
  const CUresult r = driver_.cuModuleGetFunction(&fn, static_cast<CUmodule>(module.get()), kname.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) throw NotFound("no kernel '" + kname + "' in " + std::string(origin));
  check(r, "cuModuleGetFunction(" + kname + ")");
  int max_threads = 0, shared = 0;
  check(driver_.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn), "cuFuncGetAttribute");
  check(driver_.cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn), "cuFuncGetAttribute");
  std::vector<std::size_t> sizes;
  for (std::size_t i = 0;; ++i) {
    std::size_t offset = 0, size = 0;
    if (driver_.cuFuncGetParamInfo(fn, i, &offset, &size) != CUDA_SUCCESS) break;
    sizes.push_back(size);
  }
  auto made = std::make_shared<CudaKernel>(module, fn, kname, static_cast<std::size_t>(max_threads),
                                           static_cast<std::uint64_t>(shared), std::move(sizes));
  std::lock_guard lock(cache_mutex_);
  return kernels_.emplace(kernel_key, std::move(made)).first->second;
}

std::shared_ptr<void> CudaDevice::load_module(const Source& src, const std::vector<std::string>& options,
                                              std::string_view origin, const std::string& stored_key) {
  // Loads a cubin: the module, or the driver's refusal.
  auto load = [&](const std::vector<unsigned char>& cubin, std::shared_ptr<void>& out) {
    current();
    CUmodule m = nullptr;
    const CUresult r = driver_.cuModuleLoadData(&m, cubin.data());
    if (r != CUDA_SUCCESS) return r;
    const Driver* d = &driver_;
    CUcontext ctx = ctx_;
    out = std::shared_ptr<void>(m, [d, ctx](void* p) {
      d->cuCtxSetCurrent(ctx);
      d->cuModuleUnload(static_cast<CUmodule>(p));
    });
    return r;
  };
  std::shared_ptr<void> module;
  if (store_)
    if (auto kept = store_->load(stored_key))
      // A kept cubin the driver no longer takes is compiled again.
      if (load(*kept, module) == CUDA_SUCCESS) {
        std::lock_guard stats_lock(cache_mutex_);
        ++stats_.loaded;
        return module;
      }
  {
    std::lock_guard stats_lock(cache_mutex_);
    ++stats_.builds;
  }
  const auto cubin = compile(src.text, options, arch_, origin);
  check(load(cubin, module), "cuModuleLoadData(" + std::string(origin) + ")");
  if (store_) store_->store(stored_key, cubin);
  return module;
}

ModuleCacheStats CudaDevice::module_cache_stats() const {
  std::lock_guard lock(cache_mutex_);
  return stats_;
}

void CudaDevice::launch_cuda(CudaKernel& k, std::array<unsigned, 3> grid, std::array<unsigned, 3> block,
                             std::size_t dynamic_shared, std::span<void* const> params, Launch order) {
  if (params.size() != k.param_sizes().size())
    throw InvalidArgument("kernel " + k.name() + " takes " + std::to_string(k.param_sizes().size()) +
                          " arguments, launched with " + std::to_string(params.size()));
  if (static_cast<std::uint64_t>(block[0]) * block[1] * block[2] > k.max_workgroup_size())
    throw ResourceError("launch of " + k.name() + " on " + info_.id() + ": a block of " +
                        std::to_string(static_cast<std::uint64_t>(block[0]) * block[1] * block[2]) +
                        " threads exceeds the kernel's limit of " + std::to_string(k.max_workgroup_size()));
  if (k.local_mem() + dynamic_shared > shared_optin_)
    throw ResourceError("launch of " + k.name() + " on " + info_.id() + ": " +
                        std::to_string(k.local_mem() + dynamic_shared) + " bytes of shared memory exceed the " +
                        std::to_string(shared_optin_) + " a block may have");
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return;
  current();
  std::lock_guard lock(k.mutex_);
  if (dynamic_shared > k.dynamic_limit_) {
    check(driver_.cuFuncSetAttribute(k.function(), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(dynamic_shared)),
          "cuFuncSetAttribute(" + k.name() + ", max dynamic shared memory)");
    k.dynamic_limit_ = dynamic_shared;
  }
  std::lock_guard stream_lock(stream_mutex_);
  CUlaunchAttribute early{};
  early.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  early.value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig launch{};
  launch.gridDimX = grid[0];
  launch.gridDimY = grid[1];
  launch.gridDimZ = grid[2];
  launch.blockDimX = block[0];
  launch.blockDimY = block[1];
  launch.blockDimZ = block[2];
  launch.sharedMemBytes = static_cast<unsigned>(dynamic_shared);
  launch.hStream = stream_;
  if (order == Launch::early && cc_ >= 90) {
    launch.attrs = &early;
    launch.numAttrs = 1;
  }
  const CUresult r = driver_.cuLaunchKernelEx(&launch, k.function(), const_cast<void**>(params.data()), nullptr);
  check(r, "cuLaunchKernelEx(" + k.name() + ")");
  submitted();
}

void CudaDevice::launch_args(clc::Kernel& kernel, const clc::Range& global, const clc::Range& local,
                             std::span<const clc::Arg> args) {
  auto& k = static_cast<CudaKernel&>(kernel);
  const auto& sizes = k.param_sizes();
  if (args.size() != sizes.size())
    throw InvalidArgument("kernel " + k.name() + " takes " + std::to_string(sizes.size()) + " arguments, launched with " +
                          std::to_string(args.size()));
  // Values behind the parameter pointers: device pointers of buffers, and the null a __local
  // argument's (unused) parameter gets; the kernel binds it to dynamic shared memory.
  std::vector<CUdeviceptr> pointers(args.size(), 0);
  std::vector<void*> params(args.size());
  std::size_t dynamic = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const clc::Arg& a = args[i];
    const std::size_t given = a.kind == clc::Arg::Kind::value ? a.bytes : sizeof(CUdeviceptr);
    if (given != sizes[i])
      throw DeviceError("launch of " + k.name() + ": argument " + std::to_string(i) + " is " + std::to_string(given) +
                        " bytes, the kernel's parameter " + std::to_string(sizes[i]));
    switch (a.kind) {
      case clc::Arg::Kind::buffer:
        pointers[i] = ptr_of(*a.buffer);
        params[i] = &pointers[i];
        break;
      case clc::Arg::Kind::local:
        if (dynamic)
          throw InvalidArgument("launch of " + k.name() + ": more than one __local argument (CUDA has one dynamic shared "
                                "memory block)");
        dynamic = std::max<std::size_t>(a.bytes, 1);
        params[i] = &pointers[i];
        break;
      case clc::Arg::Kind::value: params[i] = const_cast<void*>(a.data); break;
    }
  }
  check_ranges(k, global, local);
  std::array<unsigned, 3> grid{1, 1, 1}, block{1, 1, 1};
  for (std::uint32_t d = 0; d < global.dims; ++d) {
    grid[d] = static_cast<unsigned>(global.size[d] / local.size[d]);
    block[d] = static_cast<unsigned>(local.size[d]);
  }
  if (global.count() == 0) return;
  launch_cuda(k, grid, block, dynamic, params);
}

std::int64_t shared_max(const DeviceInfo& dev) {
  const std::string& a = dev.architecture;
  if (a == "sm_80" || a == "sm_87") return 163 * 1024;
  if (a.starts_with("sm_8") || a.starts_with("sm_12")) return 99 * 1024;
  return 227 * 1024;  // sm_90, sm_100
}

void check_tensor_map(const TensorMapShape& shape) {
  const std::size_t rank = shape.dims.size();
  auto fail = [](const std::string& why) { throw InvalidArgument("TMA descriptor: " + why); };
  if (rank < 1 || rank > 5 || shape.box.size() != rank || shape.strides.size() + 1 != rank)
    fail("rank " + std::to_string(rank) + " with " + std::to_string(shape.box.size()) + " box sizes and " +
         std::to_string(shape.strides.size()) + " strides");
  for (std::size_t i = 0; i < rank; ++i) {
    if (shape.dims[i] < 1 || shape.dims[i] > (std::uint64_t{1} << 32))
      fail("dimension " + std::to_string(i) + " of " + std::to_string(shape.dims[i]) + " elements");
    if (shape.box[i] < 1 || shape.box[i] > 256) fail("box of " + std::to_string(shape.box[i]) + " elements");
  }
  if (shape.element_bytes != 2 && shape.element_bytes != 4)
    fail("elements of " + std::to_string(shape.element_bytes) + " bytes");
  if (shape.box[0] * shape.element_bytes > 128)
    fail("a 128-byte swizzled box row of " + std::to_string(shape.box[0] * shape.element_bytes) + " bytes");
  for (std::uint64_t s : shape.strides)
    if (s % 16 != 0 || s >= (std::uint64_t{1} << 40)) fail("a stride of " + std::to_string(s) + " bytes");
}

CUtensorMap CudaDevice::tensor_map(const Buffer& b, const TensorMapShape& shape) {
  check_tensor_map(shape);
  const CUdeviceptr p = ptr_of(b);
  if (p % 16 != 0) throw InvalidArgument("TMA descriptor: a buffer address that is not 16-byte aligned");
  const auto rank = static_cast<cuuint32_t>(shape.dims.size());
  std::vector<cuuint64_t> dims(shape.dims.begin(), shape.dims.end()), strides(shape.strides.begin(), shape.strides.end());
  std::vector<cuuint32_t> box(shape.box.begin(), shape.box.end()), element_strides(rank, 1);
  CUtensorMap map{};
  current();
  const auto type = shape.element_bytes == 4 ? CU_TENSOR_MAP_DATA_TYPE_UINT32 : CU_TENSOR_MAP_DATA_TYPE_UINT16;
  check(driver_.cuTensorMapEncodeTiled(&map, type, rank, reinterpret_cast<void*>(p),
                                       dims.data(), strides.data(), box.data(), element_strides.data(),
                                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
        "cuTensorMapEncodeTiled");
  return map;
}

CudaTarget& cuda_target(ejk::Device& d) {
  auto* t = dynamic_cast<CudaTarget*>(&d);
  if (!t) throw DeviceError("expected a CUDA device, got " + d.info().id());
  return *t;
}

CudaDevice& cuda_device(ejk::Device& d) {
  auto* dev = dynamic_cast<CudaDevice*>(&d);
  if (!dev) throw DeviceError("expected a CUDA device, got " + d.info().id());
  return *dev;
}

CUdeviceptr ptr_of(const Buffer& b) {
  auto* buf = dynamic_cast<const CudaBuffer*>(&b);
  if (!buf) throw DeviceError("expected a buffer of a CUDA device");
  return buf->ptr();
}

}  // namespace ejk::cuda
